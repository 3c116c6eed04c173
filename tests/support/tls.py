"""A throw-away certificate authority for TLS tests, generated at test time (never checked in)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """PEM file paths: one CA, a server certificate (localhost, 127.0.0.1, ``alt_name``) and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here: verification against it must fail

    def read(self, name: str) -> bytes:
        """The bytes of one of the files (grpc credentials take bytes)."""
        path: Path = getattr(self, name)
        return path.read_bytes()


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return cert, key


def _leaf(
    cn: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, san: list[x509.GeneralName], server: bool,
    shift: datetime.timedelta = datetime.timedelta(0),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC) + shift
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path, alt_name: str = "triton.staging.test",
             server_shift: datetime.timedelta = datetime.timedelta(0)) -> Pki:  # fmt: skip
    """Generate the CA and certificates into ``directory`` (EC P-256, valid for a day; the server's dates moved by
    ``server_shift``: two days back, and it has expired)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("triton-tap test CA")
    san: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName(alt_name),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    server, server_key = _leaf("localhost", ca, ca_key, san, server=True, shift=server_shift)
    client, client_key = _leaf("triton-tap test client", ca, ca_key, [], server=False)
    other, _ = _ca("unrelated CA")
    pem = serialization.Encoding.PEM
    pki = Pki(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.pem",
    )
    pki.ca.write_bytes(ca.public_bytes(pem))
    pki.server_cert.write_bytes(server.public_bytes(pem))
    _write_key(server_key, pki.server_key)
    pki.client_cert.write_bytes(client.public_bytes(pem))
    _write_key(client_key, pki.client_key)
    pki.other_ca.write_bytes(other.public_bytes(pem))
    return pki


def server_side_copy(pki: Pki, to: Path) -> Pki:
    """``pki`` with its proxy-side files (server certificate, key, CA) copied into ``to``, where a reload can
    replace them; the client's stay where they are."""
    import shutil

    to.mkdir()
    for name in ("server_cert", "server_key", "ca"):
        shutil.copy(getattr(pki, name), to / getattr(pki, name).name)
    return Pki(ca=to / pki.ca.name, server_cert=to / pki.server_cert.name, server_key=to / pki.server_key.name,
               client_cert=pki.client_cert, client_key=pki.client_key, other_ca=pki.other_ca)  # fmt: skip
