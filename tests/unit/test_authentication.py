"""The authenticator chain: x509, bearer token, system:authenticated, anonymous on public paths only."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from isthmus.apiserver.authentication.authenticators import (
    ADMIN,
    ANONYMOUS,
    UNSECURED,
    AuthenticationError,
    Authenticator,
    StaticTokens,
    X509Authenticator,
)
from isthmus.apiserver.authentication.tls import (
    CLIENT_CA_CRT,
    CLIENT_CA_KEY,
    ensure_client_ca,
    issue_client_cert,
)

PUBLIC = ("/healthz", "/version")


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    d = tmp_path / "tls"
    ensure_client_ca(d)
    return d


def chain(ca: Path | None, token: str | None = "s3cret", anonymous: bool = True) -> Authenticator:
    return Authenticator(tokens=[StaticTokens({token: ADMIN})] if token else [],
                         x509=X509Authenticator((ca / CLIENT_CA_CRT).read_bytes()) if ca else None,
                         anonymous=anonymous, anonymous_paths=PUBLIC, open_access=token is None and ca is None)


def test_token_user_is_admin_in_masters_and_authenticated(ca: Path) -> None:
    user = chain(ca).authenticate("Bearer s3cret", None, "/api")
    assert (user.username, user.groups) == ("admin", ("system:masters", "system:authenticated"))
    assert chain(ca).authenticate("bearer s3cret", None, "/api") == user  # scheme case-insensitive


def test_client_certificate_cn_is_the_user_and_each_o_a_group(ca: Path) -> None:
    cert, _ = issue_client_cert(ca, "jane", ["dev", "ops"])
    user = chain(ca).authenticate(None, der(cert), "/api")
    assert user.username == "jane"
    assert user.groups == ("dev", "ops", "system:authenticated")
    assert user.to_api() == {"username": "jane", "groups": ["dev", "ops", "system:authenticated"]}


def test_bad_credentials_are_401_even_on_public_paths(ca: Path, tmp_path: Path) -> None:
    auth = chain(ca)
    with pytest.raises(AuthenticationError):
        auth.authenticate("Bearer wrong", None, "/healthz")
    foreign, _ = issue_client_cert(tmp_path / "other", "admin", ["system:masters"])
    with pytest.raises(AuthenticationError):
        auth.authenticate(None, der(foreign), "/version")


def test_first_valid_credential_wins_over_a_bad_one(ca: Path, tmp_path: Path) -> None:
    # kube's union: an authenticator's error counts only when no other one recognised the request.
    foreign, _ = issue_client_cert(tmp_path / "other", "mallory", [])
    assert chain(ca).authenticate("Bearer s3cret", der(foreign), "/api").username == "admin"
    cert, _ = issue_client_cert(ca, "jane", [])
    assert chain(ca).authenticate("Bearer wrong", der(cert), "/api").username == "jane"


def test_anonymous_only_on_public_paths(ca: Path) -> None:
    auth = chain(ca)
    assert auth.authenticate(None, None, "/healthz") == ANONYMOUS
    assert auth.authenticate("Basic Zm9vOmJhcg==", None, "/version") == ANONYMOUS  # not a bearer token
    assert ANONYMOUS.groups == ("system:unauthenticated",)
    with pytest.raises(AuthenticationError):
        auth.authenticate(None, None, "/api/v1/namespaces")


def test_without_anonymous_auth_no_credentials_is_401_everywhere(ca: Path) -> None:
    auth = chain(ca, anonymous=False)
    for path in ("/healthz", "/version", "/api"):
        with pytest.raises(AuthenticationError):
            auth.authenticate(None, None, path)
    assert auth.authenticate("Bearer s3cret", None, "/healthz").username == "admin"


def test_anonymous_on_every_path_when_authorization_decides(ca: Path) -> None:
    auth = Authenticator(tokens=[StaticTokens({"s3cret": ADMIN})], anonymous=True, anonymous_paths=None)
    assert auth.authenticate(None, None, "/api/v1/namespaces") == ANONYMOUS


def test_open_server_serves_everyone_as_unsecured() -> None:
    assert chain(None, token=None).authenticate(None, None, "/api") == UNSECURED


def _sign(ca: Path, *, cn: str = "jane", eku: list[x509.ObjectIdentifier] | None = None,
          days: tuple[int, int] = (-1, 1)) -> bytes:
    ca_cert = x509.load_pem_x509_certificate((ca / CLIENT_CA_CRT).read_bytes())
    ca_key = serialization.load_pem_private_key((ca / CLIENT_CA_KEY).read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder()
         .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else []))
         .issuer_name(ca_cert.subject)
         .public_key(ec.generate_private_key(ec.SECP256R1()).public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now + datetime.timedelta(days=days[0]))
         .not_valid_after(now + datetime.timedelta(days=days[1])))
    if eku is not None:
        b = b.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    return b.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def test_certificate_checks(ca: Path) -> None:
    auth = chain(ca)
    assert auth.authenticate(None, _sign(ca), "/api").username == "jane"  # no EKU: any usage, as Go
    with pytest.raises(AuthenticationError):  # a serving certificate is no client certificate
        auth.authenticate(None, _sign(ca, eku=[ExtendedKeyUsageOID.SERVER_AUTH]), "/api")
    with pytest.raises(AuthenticationError):
        auth.authenticate(None, _sign(ca, days=(-3, -2)), "/api")  # expired
    with pytest.raises(AuthenticationError):
        auth.authenticate(None, _sign(ca, days=(1, 2)), "/api")  # not yet valid
    # A valid certificate without a CN names nobody: the request is anonymous (public paths only).
    assert auth.authenticate(None, _sign(ca, cn=""), "/healthz") == ANONYMOUS
    with pytest.raises(AuthenticationError):
        auth.authenticate(None, _sign(ca, cn=""), "/api")


def test_token_review_audiences() -> None:
    auth = Authenticator(tokens=[StaticTokens({"s3cret": ADMIN}, ["https://kubernetes.default.svc.cluster.local"])])
    resp, err = auth.review_token("s3cret", [])
    assert resp is not None and not err
    assert resp.audiences == ("https://kubernetes.default.svc.cluster.local",)
    resp, err = auth.review_token("s3cret", ["other", "https://kubernetes.default.svc.cluster.local"])
    assert resp is not None and resp.audiences == ("https://kubernetes.default.svc.cluster.local",)
    # A static token is valid for the server's audiences only.
    assert auth.review_token("s3cret", ["other"]) == (None, "invalid bearer token")
    assert auth.review_token("nope", []) == (None, "invalid bearer token")
