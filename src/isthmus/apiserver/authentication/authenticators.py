"""Authentication: who sent a request, decided as kube-apiserver's authenticator chain does.

kube builds a union of authenticators (x509 client certificates, then bearer tokens: the static
token file, later ServiceAccount tokens), adds `system:authenticated` to whoever one of them
recognised, and falls back to anonymous only when no authenticator objected. Ours is that chain:

- x509: a client certificate issued by the server's client CA; CN is the username, each O a group
  (kube's CommonNameUserConversion). A certificate that does not verify is an error (401).
- bearer token: the server's token, whose user is `admin` in `system:masters` (kube's static
  token file gives a token a user and groups); a token nobody recognises is an error (401).
- ServiceAccount tokens (serviceaccounts.py): bound and legacy JWTs this server signed.
- anonymous (`system:anonymous`, group `system:unauthenticated`) only when enabled (kube's
  --anonymous-auth; off by default here): otherwise every request without credentials is 401,
  /healthz included. Enabled, it is further limited to `anonymous_paths` (the paths kube's
  `system:public-info-viewer` role opens) until authorization decides for anonymous users
  (`anonymous_paths=None`: every path, authorization's call).

Credentials are tried in that order and the first that authenticates wins; errors only count
when nothing authenticated (kube's union). A ServiceAccount token authenticator is one more
`TokenAuthenticator` in `Authenticator.tokens` (serviceaccounts.py); RBAC reads the UserInfo this module produces.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "ADMIN",
    "ANONYMOUS",
    "API_AUDIENCES",
    "AUTHENTICATED_GROUP",
    "UNSECURED",
    "AuthenticationError",
    "Authenticator",
    "Response",
    "StaticTokens",
    "TokenAuthenticator",
    "UserInfo",
    "X509Authenticator",
]

Obj = dict[str, Any]

AUTHENTICATED_GROUP = "system:authenticated"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
MASTERS_GROUP = "system:masters"
ANONYMOUS_USER = "system:anonymous"
# What kube-apiserver authenticates tokens for unless told otherwise: its ServiceAccount issuer
# (kubeadm's and kind's default), so a TokenReview without spec.audiences reports this one.
API_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)


@dataclass(frozen=True)
class UserInfo:
    """kube's user.Info: who a request is, as authorization, admission and audit see it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    def to_api(self) -> Obj:
        """authentication.k8s.io/v1 UserInfo; empty fields omitted, as Go's omitempty writes them."""
        out: Obj = {}
        if self.username:
            out["username"] = self.username
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out

    def with_group(self, group: str) -> UserInfo:
        if group in self.groups:
            return self
        return UserInfo(self.username, self.uid, (*self.groups, group), self.extra)


# The user of the server's bearer token (configurable per ApiServer).
ADMIN = UserInfo("admin", groups=(MASTERS_GROUP,))
ANONYMOUS = UserInfo(ANONYMOUS_USER, groups=(UNAUTHENTICATED_GROUP,))
# Everyone, on an in-process ApiServer without a token: kube's old insecure port served its
# requests as this user.
UNSECURED = UserInfo("system:unsecured", groups=(MASTERS_GROUP, AUTHENTICATED_GROUP))


class AuthenticationError(Exception):
    """Credentials were presented and are not valid: 401, whatever the path."""


@dataclass(frozen=True)
class Response:
    """What an authenticator recognised: the user, and the audiences the credential is valid for."""

    user: UserInfo
    audiences: tuple[str, ...] = ()


class TokenAuthenticator(Protocol):
    def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        """The token's user, None when this authenticator does not know the token; raises
        AuthenticationError when it knows the token to be bad."""


class StaticTokens:
    """kube's token file authenticator, wrapped as kube wraps audience-agnostic tokens.

    Such a token is valid for the server's API audiences only: asked for others it is not
    recognised, asked for some of them it is valid for those (WrapAudienceAgnosticToken).
    """

    def __init__(self, tokens: Mapping[str, UserInfo], api_audiences: Sequence[str] = API_AUDIENCES) -> None:
        self.api_audiences = tuple(api_audiences)
        # kube's token file authenticator looks tokens up in a map; the answer for the server's own
        # audiences (what every API request asks) is made once per token, with the group the
        # chain adds to every authenticated user already in it.
        self._tokens = dict(tokens)
        self._answers = {t: Response(u.with_group(AUTHENTICATED_GROUP), self.api_audiences) for t, u in tokens.items()}

    def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        if not audiences or audiences == self.api_audiences:
            return self._answers.get(token)
        wanted = tuple(a for a in self.api_audiences if a in audiences)
        user = self._tokens.get(token) if wanted else None
        return Response(user, wanted) if user is not None else None


class X509Authenticator:
    """kube's x509 request authenticator over one CA: CN = username, O = groups.

    The TLS layer only asks for the certificate (and proves the client holds its key): whether
    it is ours is decided here, so a foreign certificate gets kube's 401, not a failed handshake.
    The certificate must be issued directly by the client CA, valid now, and usable for client
    auth (an extended key usage, when present, must allow it).
    """

    MAX_CACHED = 1024

    def __init__(self, ca_pem: bytes) -> None:
        self.ca = x509.load_pem_x509_certificate(ca_pem)
        # Verified certificates by SHA-256 of their DER: a client sends its certificate on every
        # connection, and checking a signature on each request would cost more than serving it.
        self._verified: dict[bytes, tuple[UserInfo | None, datetime.datetime, datetime.datetime]] = {}

    def authenticate_cert(self, der: bytes) -> Response | None:
        now = datetime.datetime.now(datetime.UTC)
        digest = hashlib.sha256(der).digest()
        hit = self._verified.get(digest)
        if hit is None:
            hit = self._verify(der)
            if len(self._verified) >= self.MAX_CACHED:
                self._verified.clear()
            self._verified[digest] = hit
        user, not_before, not_after = hit
        if not not_before <= now <= not_after:
            raise AuthenticationError("x509: certificate has expired or is not yet valid")
        return Response(user) if user is not None else None

    def _verify(self, der: bytes) -> tuple[UserInfo | None, datetime.datetime, datetime.datetime]:
        try:
            cert = x509.load_der_x509_certificate(der)
            cert.verify_directly_issued_by(self.ca)
        except Exception as e:  # malformed, another issuer, bad signature: all "not ours"
            raise AuthenticationError(f"x509: certificate signed by unknown authority ({e})") from None
        try:
            eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound:
            eku = None
        if eku is not None and not {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE} & set(eku):
            raise AuthenticationError("x509: certificate specifies an incompatible key usage")
        cn = _names(cert.subject, NameOID.COMMON_NAME)
        # kube: a verified certificate without a CN identifies nobody (not an error).
        user = UserInfo(cn[0], groups=tuple(_names(cert.subject, NameOID.ORGANIZATION_NAME))) if cn and cn[0] else None
        return user, cert.not_valid_before_utc, cert.not_valid_after_utc


def _names(name: x509.Name, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in name.get_attributes_for_oid(oid)]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, as kube's bearertoken reads it:
    the scheme is case-insensitive; anything else (or an empty token) is no token at all."""
    parts = (authorization or "").strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class Authenticator:
    """The chain: x509, bearer tokens, `system:authenticated` added, anonymous when enabled.

    `tokens` empty and `x509` None is an open server (in-process use): every request without
    valid credentials is UNSECURED.
    """

    def __init__(self, *, tokens: Iterable[TokenAuthenticator] = (), x509: X509Authenticator | None = None,
                 api_audiences: Sequence[str] = API_AUDIENCES, anonymous: bool = False,
                 anonymous_paths: Iterable[str] | None = (), open_access: bool = False) -> None:
        self.tokens = list(tokens)
        self.x509 = x509
        self.api_audiences = tuple(api_audiences)
        self.anonymous = anonymous
        # HOOK (RBAC): None lets anonymous requests through on every path, for authorization to
        # decide (kube's system:public-info-viewer opens the public paths); a set restricts them
        # here, which is all that stands between anonymous users and the API without RBAC.
        self.anonymous_paths = None if anonymous_paths is None else frozenset(anonymous_paths)
        self.open_access = open_access

    def authenticate(self, authorization: str | None, peer_cert: bytes | None, path: str) -> UserInfo:
        """The user of a request; raises AuthenticationError (401)."""
        failed: AuthenticationError | None = None
        if peer_cert and self.x509 is not None:
            try:
                resp = self.x509.authenticate_cert(peer_cert)
            except AuthenticationError as e:
                failed = e
            else:
                if resp is not None:
                    return resp.user.with_group(AUTHENTICATED_GROUP)
        token = bearer_token(authorization)
        if token is not None and self.tokens:
            resp, error = self.review_token(token, self.api_audiences)
            if resp is not None:
                return resp.user
            failed = failed or AuthenticationError(error or "invalid bearer token")
        if self.open_access:
            return UNSECURED
        if failed is not None:
            raise failed
        if self.anonymous and (self.anonymous_paths is None or path in self.anonymous_paths):
            return ANONYMOUS
        raise AuthenticationError("no credentials")

    def review_token(self, token: str, audiences: Sequence[str]) -> tuple[Response | None, str]:
        """What a TokenReview reports: (the response with `system:authenticated` added, or None;
        the error text, "" when none). As kube's bearer token authenticator, a token no
        authenticator recognises is an "invalid bearer token"."""
        errors: list[str] = []
        for auth in self.tokens:
            try:
                resp = auth.authenticate_token(token, audiences)
            except AuthenticationError as e:
                errors.append(str(e))
                continue
            if resp is not None:
                if AUTHENTICATED_GROUP in resp.user.groups:  # static tokens' answers already have it
                    return resp, ""
                return Response(resp.user.with_group(AUTHENTICATED_GROUP), resp.audiences), ""
        if not errors:
            return None, "invalid bearer token"
        return None, errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
