"""Self-signed CA and serving certificate for 127.0.0.1/localhost, kept in the data dir across restarts."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from isthmus.apiserver.datadir import make_private_dir, make_private_file, write_private


def ensure_certs(directory: Path, hosts: list[str]) -> tuple[Path, Path, Path]:
    """Return (ca.crt, server.crt, server.key), creating them once; the dir is 0700, every file 0600."""
    make_private_dir(directory)
    ca_crt, srv_crt, srv_key = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    if ca_crt.exists() and srv_crt.exists() and srv_key.exists():
        for f in (ca_crt, srv_crt, srv_key, directory / "ca.key"):
            make_private_file(f)
        return ca_crt, srv_crt, srv_key
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "isthmus-apiserver-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "isthmus-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    # Keys are written with 0600 from the first byte (never briefly readable); the certificates
    # are not secret but get the same mode, so the whole dir has one rule.
    write_private(directory / "ca.key", ca_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    write_private(ca_crt, ca.public_bytes(serialization.Encoding.PEM))
    write_private(srv_key, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    write_private(srv_crt, cert.public_bytes(serialization.Encoding.PEM))
    return ca_crt, srv_crt, srv_key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx
