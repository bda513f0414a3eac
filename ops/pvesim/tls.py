"""pveproxy's certificate for the simulated cluster: self-signed, made once per state root.

The SAN is what PVE puts in a node certificate (`IP:127.0.0.1, IP:::1, DNS:localhost`, the
node's name and address); the fingerprint is SHA-256 over the DER certificate,
`AB:CD:...`, as `pvenode cert info` prints it.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from events.certificates import alt_names, certificate, new_key, pem_cert, pem_key


def make_certificate(folder: Path, node: str, address: str) -> tuple[Path, Path]:
    """(cert, key) PEM files in `folder`, made on first use and kept afterwards."""
    cert_path, key_path = folder / "pve-ssl.pem", folder / "pve-ssl.key"
    if cert_path.is_file() and key_path.is_file():
        return cert_path, key_path
    folder.mkdir(parents=True, exist_ok=True)
    key = new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Node"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{node}.invalid"),
        ]
    )
    san = alt_names(["127.0.0.1", "::1", "localhost", address, node])
    extensions = [(san, False), (x509.BasicConstraints(ca=True, path_length=None), True)]
    cert = certificate(key, name, datetime.timedelta(days=730), extensions)
    key_path.write_text(pem_key(key))
    os.chmod(key_path, 0o600)
    cert_path.write_text(pem_cert(cert))
    return cert_path, key_path


def fingerprint(cert_path: Path) -> str:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    digest = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()
    return ":".join(f"{b:02X}" for b in digest)


def server_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert_path), str(key_path))
    return context
