"""The self-signed development certificate: generated once, kept in the state directory.

Keeping it (instead of minting one per start, as the reference does) lets clients pin it on first
use, ssh-style, so a newcomer never needs ``-insecure`` against a local server.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from markproto import durable
from markproto.protocol import digests

CERT_NAME = "devcert.pem"
KEY_NAME = "devkey.pem"
VALIDITY = dt.timedelta(days=3650)


def fingerprint(cert_pem: bytes) -> str:
    """The certificate's fingerprint (``sha256:`` + hex of its DER bytes), what clients pin."""
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    return digests.fingerprint(der)


def names(cert_pem: bytes) -> list[str]:
    """The names a certificate is valid for (its DNS and IP subject alternative names): the
    hosts a ``mark://`` URL of this server names."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    found = [name.lower() for name in sans.get_values_for_type(x509.DNSName)]
    return found + [str(address) for address in sans.get_values_for_type(x509.IPAddress)]


def generate(hostnames: list[str] | None = None) -> tuple[bytes, bytes]:
    """Return ``(cert_pem, key_pem)`` for a self-signed ECDSA P-256 leaf certificate.

    SANs always hold ``localhost``, ``127.0.0.1`` and ``::1``; ``hostnames`` adds more (by default
    the machine's own name), because hostname verification needs a SAN, not a CN.
    """
    names = ["localhost", *(hostnames if hostnames is not None else [socket.gethostname()])]
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "markproto development server")])
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(names) if n]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert_pem, key_pem


def ensure(state_dir: Path) -> tuple[Path, Path, bool]:
    """Return ``(cert_path, key_path, created)``, generating the pair on first use.

    The key is written 0600 before the certificate, so a crash never leaves a certificate without
    its key; a half-written pair is regenerated.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = state_dir / CERT_NAME, state_dir / KEY_NAME
    if cert_path.is_file() and key_path.is_file():
        return cert_path, key_path, False
    cert_pem, key_pem = generate()
    durable.replace(str(key_path), key_pem, mode=0o600)
    durable.replace(str(cert_path), cert_pem)
    return cert_path, key_path, True
