"""A throwaway PKI for the TLS tests: a CA, server certificates it signs (for 127.0.0.1 and
``localhost``), and a client certificate for mutual TLS; written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "sluicegate-epp.test"


@dataclass(frozen=True)
class Issued:
    cert_pem: bytes
    key_pem: bytes
    serial: int

    def write(self, cert: Path, key: Path) -> None:
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)


class TestCa:
    __test__ = False  # not a test class

    def __init__(self, name: str = "sluicegate test CA") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = _builder(self._name, self._key.public_key()).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        )
        self.cert = builder.sign(self._key, hashes.SHA256())
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, client: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        builder = _builder(subject, key.public_key(), issuer=self._name).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if not client:
            names = [
                x509.DNSName(SERVER_NAME),
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return Issued(cert.public_bytes(serialization.Encoding.PEM), key_pem, cert.serial_number)


def _builder(
    subject: x509.Name, public_key: ec.EllipticCurvePublicKey, issuer: x509.Name | None = None
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
