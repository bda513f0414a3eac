"""X.509 certificates cairn makes itself: the NATS cluster's CA and its members'
(events/cluster_kit.py), the simulated Proxmox node's (ops/pvesim/tls.py). P-256 keys,
SHA-256 signatures, PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

# Backdated a little: a peer whose clock is a few minutes behind must not see a certificate
# that is not yet valid.
_BACKDATE = datetime.timedelta(minutes=5)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def certificate(
    key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    valid_for: datetime.timedelta,
    extensions: Sequence[tuple[x509.ExtensionType, bool]],
    *,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None = None,
) -> x509.Certificate:
    """A certificate for ``key``'s public half, valid from now for ``valid_for``, carrying
    ``extensions`` as (extension, critical) pairs; signed by ``issuer`` (its name and key), or
    self-signed without one."""
    issuer_name, signer = issuer if issuer is not None else (subject, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + valid_for)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signer, hashes.SHA256())


def alt_names(addresses: Iterable[str]) -> x509.SubjectAlternativeName:
    """A SAN of IP addresses and DNS names: each entry that parses as an address is one."""
    names: list[x509.GeneralName] = []
    for address in addresses:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            names.append(x509.DNSName(address))
    return x509.SubjectAlternativeName(names)


def pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def pem_cert(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()
