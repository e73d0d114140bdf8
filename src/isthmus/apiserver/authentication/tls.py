"""Self-signed CAs and certificates, kept in the data dir across restarts.

Two CAs, as kube-apiserver's `--tls-cert-file` issuer and `--client-ca-file`: `ca.crt` issues the
serving certificate (clients trust it), `client-ca.crt` issues client certificates (the server
trusts those: CN = username, O = groups). `admin.crt` is the client certificate of the
kubeconfig `--kubeconfig-auth cert` writes.
"""

from __future__ import annotations

import ctypes
import datetime
import ipaddress
import logging
import ssl
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from isthmus.apiserver.storage.datadir import make_private_dir, make_private_file, write_private

log = logging.getLogger("isthmus.apiserver")

CLIENT_CA_CRT, CLIENT_CA_KEY = "client-ca.crt", "client-ca.key"
ADMIN_CRT, ADMIN_KEY = "admin.crt", "admin.key"
# A stored client certificate this close to expiry is issued again when a kubeconfig is written.
RENEW_BEFORE = datetime.timedelta(days=30)


def ensure_certs(directory: Path, hosts: list[str]) -> tuple[Path, Path, Path]:
    """Return (ca.crt, server.crt, server.key), creating them once; the dir is 0700, every file 0600."""
    make_private_dir(directory)
    ca_crt, srv_crt, srv_key = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    if ca_crt.exists() and srv_crt.exists() and srv_key.exists():
        for f in (ca_crt, srv_crt, srv_key, directory / "ca.key"):
            make_private_file(f)
        return ca_crt, srv_crt, srv_key
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca = _new_ca("isthmus-apiserver-ca")
    ca_name = ca.subject
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


def _new_ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
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
    return ca_key, ca


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def ensure_client_ca(directory: Path) -> Path:
    """Return client-ca.crt, creating the client CA once (a data dir from before it gets one)."""
    make_private_dir(directory)
    crt, key = directory / CLIENT_CA_CRT, directory / CLIENT_CA_KEY
    if crt.exists() and key.exists():
        make_private_file(crt)
        make_private_file(key)
        return crt
    ca_key, ca = _new_ca("isthmus-apiserver-client-ca")
    write_private(key, _pem_key(ca_key))
    write_private(crt, ca.public_bytes(serialization.Encoding.PEM))
    return crt


def issue_client_cert(directory: Path, username: str, groups: Sequence[str] = (),
                      days: int = 365) -> tuple[bytes, bytes]:
    """A client certificate (PEM) and its key (PEM) for `username` in `groups`, signed by the
    client CA in `directory` (created if missing): CN = username, one O per group, as kube reads them."""
    ensure_client_ca(directory)
    ca = x509.load_pem_x509_certificate((directory / CLIENT_CA_CRT).read_bytes())
    ca_key = serialization.load_pem_private_key((directory / CLIENT_CA_KEY).read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, username))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def ensure_admin_cert(directory: Path, username: str, groups: Sequence[str]) -> tuple[bytes, bytes]:
    """The stored client certificate and key for the server's own kubeconfig (admin.crt/admin.key),
    issued again when missing, for another user, not from the current client CA, or near expiry;
    so a kubeconfig written with it stays valid across restarts."""
    crt, key = directory / ADMIN_CRT, directory / ADMIN_KEY
    ensure_client_ca(directory)
    if crt.exists() and key.exists():
        make_private_file(crt)
        make_private_file(key)
        try:
            cert = x509.load_pem_x509_certificate(crt.read_bytes())
            ca = x509.load_pem_x509_certificate((directory / CLIENT_CA_CRT).read_bytes())
            cert.verify_directly_issued_by(ca)
            cns = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
            orgs = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
            fresh = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > RENEW_BEFORE
            if cns == [username] and orgs == list(groups) and fresh:
                return crt.read_bytes(), key.read_bytes()
        except Exception:  # unreadable or foreign: issue a new one
            pass
    cert_pem, key_pem = issue_client_cert(directory, username, groups)
    write_private(key, key_pem)
    write_private(crt, cert_pem)
    return cert_pem, key_pem


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """The serving context; with `client_ca`, clients are asked for a certificate (not required).

    kube's TLS layer requests a client certificate without verifying it, and its x509
    authenticator then answers 401 for a certificate it does not trust. OpenSSL, asked to
    request one, also fails the handshake on a certificate that does not verify; so the check is
    handed to the authenticator (authentication.X509Authenticator), which verifies it against
    the client CA. The handshake still proves the client holds the certificate's key. Where
    OpenSSL's verification cannot be handed over, it verifies against the client CA itself:
    a foreign certificate then fails the handshake instead of getting a 401.
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    if client_ca is not None:
        if not _request_unverified_client_certs(ctx):
            log.info("client certificates are verified during the TLS handshake (OpenSSL not reachable)")
            ctx.load_verify_locations(cafile=str(client_ca))
            ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


_SSL_VERIFY_PEER = 0x01
_VERIFY_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
# OpenSSL's verify callback: every certificate passes here; the authenticator judges it. Module
# level, so it lives as long as any context using it.
_accept_all = _VERIFY_CB(lambda preverify_ok, store_ctx: 1)


def _libssl() -> ctypes.CDLL | None:
    """The libssl Python's ssl module is linked against (already loaded in this process)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libssl.so" in line and "/" in line}
    except OSError:
        return None
    if len(paths) != 1:
        return None
    try:
        return ctypes.CDLL(paths.pop())
    except OSError:
        return None


def _request_unverified_client_certs(ctx: ssl.SSLContext) -> bool:
    """SSL_CTX_set_verify(SSL_VERIFY_PEER, accept-all) on `ctx`; False when it cannot be done safely.

    Python exposes no verify callback, so the SSL_CTX pointer is read from the context object
    (the field right after the object header) and only used after OpenSSL confirmed, twice,
    that it reads back the verify modes Python set on it.
    """
    lib = _libssl()
    if lib is None:
        return False
    try:
        get_mode = lib.SSL_CTX_get_verify_mode
        set_verify = lib.SSL_CTX_set_verify
    except AttributeError:
        return False
    get_mode.argtypes, get_mode.restype = [ctypes.c_void_p], ctypes.c_int
    set_verify.argtypes, set_verify.restype = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CB], None
    ptr = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not ptr:
        return False
    original = ctx.verify_mode
    for mode, expected in ((ssl.CERT_REQUIRED, 0x03), (ssl.CERT_OPTIONAL, 0x01)):
        ctx.verify_mode = mode
        if get_mode(ptr) != expected:
            ctx.verify_mode = original
            return False
    set_verify(ptr, _SSL_VERIFY_PEER, _accept_all)
    return True
