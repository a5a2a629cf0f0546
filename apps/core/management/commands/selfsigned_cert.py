"""`manage.py selfsigned_cert DIR`: a self-signed TLS certificate for the proxy's first start.

Writes DIR/cert.pem and DIR/key.pem (mode 0600) unless both exist, so compose's `init` can
run it on every start and a real certificate put there later is never overwritten. Browsers
warn about a self-signed certificate (and ignore HSTS over it): replace the two files with a
real certificate and key for anything but a trial, then restart the proxy.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.management.base import BaseCommand

VALID_DAYS = 365


def selfsigned_cert(*, names: list[str], now: datetime.datetime) -> tuple[bytes, bytes]:
    """(certificate, private key), both PEM, for `names` (host names or IP addresses)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    alternatives = [_general_name(name) for name in names]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


class Command(BaseCommand):
    help = "Write DIR/cert.pem and DIR/key.pem, a self-signed certificate, unless both exist."
    requires_system_checks = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("directory", type=Path)
        parser.add_argument(
            "--name",
            action="append",
            dest="names",
            help="a host name or IP address the certificate is for (repeatable; "
            "default: localhost, 127.0.0.1 and ::1)",
        )

    def handle(self, *args, directory: Path, names: list[str] | None, **options) -> None:
        cert_path, key_path = directory / "cert.pem", directory / "key.pem"
        if cert_path.exists() and key_path.exists():
            self.stdout.write(f"{cert_path} and {key_path} exist: left as they are")
            return
        names = names or ["localhost", "127.0.0.1", "::1"]
        cert, key = selfsigned_cert(names=names, now=datetime.datetime.now(datetime.UTC))
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(key)
        cert_path.write_bytes(cert)
        self.stdout.write(
            f"wrote a self-signed certificate for {', '.join(names)} "
            f"to {cert_path} (key {key_path}); replace both with a real one"
        )
