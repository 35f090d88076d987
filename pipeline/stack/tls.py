"""A throwaway CA and the certificates of the secure local stack (``babelstream up --secure``).

Everything is PEM, written once under ``<stack home>/secure/tls/`` with mode
0600 for keys: the CA certificate (every client's trust store), one server
certificate for ``localhost`` / ``127.0.0.1`` shared by the Kafka nodes and
Redis, and one client certificate for the mutual-TLS listener. Private keys
are unencrypted PKCS#8: Kafka's PEM key stores (KIP-651) cannot read the
PBES2 encryption ``cryptography`` writes on Java 17 ("PBES2 SecretKeyFactory
not available"), and file permissions protect them as well here.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365
SERVER_NAMES = ("localhost",)
SERVER_IPS = ("127.0.0.1",)
CLIENT_NAME = "babelstream-client"


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Paths of the generated PEM files."""

    folder: Path

    @property
    def ca(self) -> Path:
        """CA certificate: the trust store of clients and nodes."""
        return self.folder / "ca.pem"

    @property
    def server_keystore(self) -> Path:
        """Server key + certificate chain, one file (Kafka's ``ssl.keystore.location``)."""
        return self.folder / "server-keystore.pem"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server-cert.pem"

    @property
    def server_key(self) -> Path:
        """The server key (Redis's ``tls-key-file``)."""
        return self.folder / "server-key.pem"

    @property
    def client_keystore(self) -> Path:
        """Client key + certificate chain, one file (every client type reads it)."""
        return self.folder / "client-keystore.pem"

    def complete(self) -> bool:
        return all(
            path.is_file()
            for path in (
                self.ca,
                self.server_keystore,
                self.server_cert,
                self.server_key,
                self.client_keystore,
            )
        )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "babelstream local stack"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _certificate(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, secret: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)


def ensure_tls(folder: Path) -> TlsFiles:
    """Generate the CA, server and client certificates unless all are there already."""
    files = TlsFiles(folder)
    if files.complete():
        return files
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("babelstream local CA")
    ca = _certificate(
        ca_name,
        ca_key,
        ca_name,
        ca_key,
        [
            (x509.BasicConstraints(ca=True, path_length=0), True),
            (
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                True,
            ),
        ],
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(
        _name("localhost"),
        server_key,
        ca_name,
        ca_key,
        [
            (
                x509.SubjectAlternativeName(
                    [x509.DNSName(name) for name in SERVER_NAMES]
                    + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVER_IPS]
                ),
                False,
            ),
            # nodes also connect to each other as clients over mutual TLS
            (
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                False,
            ),
        ],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate(
        _name(CLIENT_NAME),
        client_key,
        ca_name,
        ca_key,
        [
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False),
        ],
    )
    _write(files.ca, _pem(ca))
    _write(files.server_cert, _pem(server) + _pem(ca))
    _write(files.server_key, _key_pem(server_key), secret=True)
    _write(files.server_keystore, _key_pem(server_key) + _pem(server) + _pem(ca), secret=True)
    _write(files.client_keystore, _key_pem(client_key) + _pem(client) + _pem(ca), secret=True)
    return files
