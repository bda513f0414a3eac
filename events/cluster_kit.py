"""What a cluster's NATS needs to be closed: made once, on one machine, by ``cairn cluster init``.

A kit is a directory:

- ``keys/``: the keyring (``events/credentials.py``): each role's nkey seed and the events
  signing key. Copy it to every cairn host (``NATS_KEYS``); give a reader ``observer.nk`` alone.
- ``auth.conf``: the ``accounts`` block of the servers' configuration, public keys only
  (``events/permissions.py``). Copy it beside every nats-server's configuration.
- ``tls/ca.pem``: the cluster's own certificate authority. Every server and every cairn host
  (``NATS_CA``) trusts it and nothing else.
- ``tls/<member>.pem`` and ``tls/<member>-key.pem``: each server's certificate (for its
  addresses, good as a TLS server and as a route client) and its key. The servers speak TLS to
  clients and to each other, and a route peer must show a certificate of this CA
  (``verify: true``): a server without one cannot join the cluster.
- ``tls/ca-key.pem``: the CA's key. Needed only to make certificates (``cairn cluster init``
  with the same directory adds members); keep it off the servers.

Every secret file is mode 0600 in a directory of mode 0700.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from events.certificates import alt_names, certificate, new_key, pem_cert, pem_key
from events.credentials import Keyring, write_secret
from events.files import write_atomically
from events.permissions import accounts_block_for

CA_NAME = "cairn cluster CA"
# Certificates are made for ten years: rotation is the operator's choice (docs/cluster.md).
VALIDITY = datetime.timedelta(days=3650)


_CA_USAGE = x509.KeyUsage(
    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
    key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
    decipher_only=False,
)  # fmt: skip


@attrs.frozen
class Member:
    """One nats-server of the cluster: its name and the addresses clients and peers use."""

    name: str
    addresses: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Member:
        """``NAME=ADDRESS[,ADDRESS...]`` (an address is an IP or a DNS name)."""
        name, sep, addresses = text.partition("=")
        parts = tuple(a.strip() for a in addresses.split(",") if a.strip())
        if not sep or not name.strip() or not parts:
            raise ValueError(f"a member is NAME=ADDRESS[,ADDRESS...], got {text!r}")
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"a member's name is letters, digits, - and _, got {name!r}")
        return cls(name.strip(), parts)


def write_auth(path: Path, keyrings: Sequence[Keyring]) -> None:
    """An ``auth.conf`` letting in the keys of every keyring given (two while keys rotate)."""
    text = (
        "# Written by `cairn cluster`: who may connect, and what each role may do\n"
        "# (events/permissions.py). Public keys only.\n"
        + accounts_block_for([k.public_keys() for k in keyrings])
    )
    write_atomically(path, text)


@attrs.frozen
class ClusterKit:
    root: Path

    @property
    def keyring(self) -> Keyring:
        return Keyring(self.root / "keys")

    @property
    def tls(self) -> Path:
        return self.root / "tls"

    @property
    def ca_file(self) -> Path:
        return self.tls / "ca.pem"

    @property
    def auth_file(self) -> Path:
        return self.root / "auth.conf"

    def cert_file(self, member: str) -> Path:
        return self.tls / f"{member}.pem"

    def key_file(self, member: str) -> Path:
        return self.tls / f"{member}-key.pem"

    @classmethod
    def create(cls, root: Path, members: Sequence[Member]) -> ClusterKit:
        """Make whatever of the kit is missing: the keyring, the CA, a certificate for each
        member that has none, and ``auth.conf``. What exists is kept (a second run adds
        members without touching the keys hosts already hold)."""
        kit = cls(root)
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(root, 0o700)
        Keyring.create(kit.keyring.path)
        kit.tls.mkdir(exist_ok=True, mode=0o700)
        ca_key, ca_cert = kit._authority()
        for member in members:
            if not kit.cert_file(member.name).exists():
                kit._certify(member, ca_key, ca_cert)
        kit.write_auth([kit.keyring])
        return kit

    def write_auth(self, keyrings: Sequence[Keyring]) -> None:
        write_auth(self.auth_file, keyrings)

    def _authority(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key_path = self.tls / "ca-key.pem"
        if key_path.exists() and self.ca_file.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            return key, x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        key = new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
        ca_extensions = [
            (x509.BasicConstraints(ca=True, path_length=0), True),
            (_CA_USAGE, True),
        ]
        cert = certificate(key, name, VALIDITY, ca_extensions)
        write_secret(key_path, pem_key(key).strip())
        self.ca_file.write_text(pem_cert(cert))
        return key, cert

    def _certify(
        self, member: Member, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
    ) -> None:
        key = new_key()
        usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        extensions = [
            (alt_names(member.addresses), False),
            (x509.ExtendedKeyUsage(usage), False),
            (x509.BasicConstraints(ca=False, path_length=None), True),
        ]
        cert = certificate(
            key,
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, member.name)]),
            VALIDITY,
            extensions,
            issuer=(ca_cert.subject, ca_key),
        )
        write_secret(self.key_file(member.name), pem_key(key).strip())
        self.cert_file(member.name).write_text(pem_cert(cert))
