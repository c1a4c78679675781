"""The self-signed development certificate: generated once, kept in the state directory.

Keeping it (instead of minting one per start, as the reference does) lets clients pin it on first
use, ssh-style, so a newcomer never needs ``-insecure`` against a local server.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import socket
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CERT_NAME = "devcert.pem"
KEY_NAME = "devkey.pem"
VALIDITY = dt.timedelta(days=3650)


def fingerprint(cert_pem: bytes) -> str:
    """SHA-256 of the certificate's DER bytes, as ``sha256:`` + lowercase hex (what clients pin)."""
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    return "sha256:" + hashlib.sha256(der).hexdigest()


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
    _write_private(key_path, key_pem)
    _write_private(cert_path, cert_pem, mode=0o644)
    return cert_path, key_path, True


def _write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
