"""Certificates of the secure Kafka profile: a private CA and a broker certificate it signs, as PEM files.

Kafka reads them natively (`ssl.keystore.type=PEM`, `ssl.truststore.type=PEM`); clients trust `ca.pem`
(`KAFKA_SSL_CA_LOCATION`). Keys are EC P-256, unencrypted PKCS#8, mode 0600 under the state directory. The CA is made
once per state directory; the broker certificate is remade when it is missing, expires within `RENEW_BEFORE`, or
no longer names every host the brokers are reached at.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
BROKER_DAYS = 825
RENEW_BEFORE = dt.timedelta(days=30)
LOCAL_NAMES = ("127.0.0.1", "localhost")
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


@dataclass(frozen=True)
class TlsFiles:
    """Where one state directory keeps its CA and broker key pair."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def broker_keystore(self) -> Path:
        """The broker's PEM keystore: private key, then its certificate and the CA's (the chain)."""
        return self.dir / "broker-keystore.pem"


def write_private(path: Path, data: bytes | str) -> None:
    """Write a file only its owner can read (keys, passwords, configs that hold them)."""
    if isinstance(data, str):
        data = data.encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _san(names: tuple[str, ...]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def generate_ca(cert_path: Path, key_path: Path, common_name: str = "pipeline-project local CA") -> x509.Certificate:
    """A self-signed CA (key usage: certificate signing), written as PEM; returns the certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_private(key_path, _key_pem(key))
    cert_path.write_bytes(_cert_pem(cert))
    return cert


def _load_ca(files: TlsFiles) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def _issue_broker(files: TlsFiles, names: tuple[str, ...]) -> None:
    ca_cert, ca_key = _load_ca(files)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pipeline-project kafka broker")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=BROKER_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(names), critical=False)
        # Brokers are TLS servers to clients and TLS clients to each other (inter-broker replication).
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write_private(files.broker_keystore, _key_pem(key) + _cert_pem(cert) + _cert_pem(ca_cert))


def _broker_cert_is_current(files: TlsFiles, names: tuple[str, ...]) -> bool:
    if not files.broker_keystore.exists():
        return False
    cert = x509.load_pem_x509_certificates(files.broker_keystore.read_bytes())[0]
    ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    if cert.issuer != ca_cert.subject:
        return False
    if cert.not_valid_after_utc - dt.datetime.now(dt.timezone.utc) < RENEW_BEFORE:
        return False
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(_san(names)) <= set(san)


def ensure_certificates(tls_dir: Path, hosts: tuple[str, ...] = LOCAL_NAMES) -> TlsFiles:
    """Make the CA (once) and a current broker certificate for `hosts` under `tls_dir`; idempotent."""
    files = TlsFiles(Path(tls_dir))
    names = tuple(dict.fromkeys((*hosts, *LOCAL_NAMES)))
    if not (files.ca_cert.exists() and files.ca_key.exists()):
        generate_ca(files.ca_cert, files.ca_key)
        files.broker_keystore.unlink(missing_ok=True)
    if not _broker_cert_is_current(files, names):
        _issue_broker(files, names)
    return files
