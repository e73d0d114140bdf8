"""ServiceAccount tokens: issued and verified as kube-apiserver 1.32 does (pkg/serviceaccount).

Tokens are RS256 JWTs signed with one RSA key the server keeps (`<data-dir>/tls/sa.key`, made
once, 0600; a fresh key per start without a data dir, so such tokens die with the process).

- Bound tokens (TokenRequest, `kubectl create token`, kubelets): iss = the server's issuer, sub
  `system:serviceaccount:<ns>:<name>`, aud, exp, iat, nbf, jti, and the private `kubernetes.io`
  claim naming the namespace, the ServiceAccount (name, uid) and the object the token is bound to
  (pod, with its node when scheduled, or secret), plus `warnafter` for extended tokens.
- Legacy tokens (the tokens controller fills Secrets of type kubernetes.io/service-account-token
  with them): iss `kubernetes/serviceaccount`, no expiry, no audience (valid for the API audiences).

Verification (`ServiceAccountTokens.authenticate_token`, one TokenAuthenticator of the chain)
ignores tokens of other issuers, checks the signature, time (60 s leeway), audiences, and then
that the ServiceAccount, and the Pod or Secret the token is bound to, still exist with the uids
the token names: deleting any of them revokes the token. Error texts are kube's.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from isthmus.apiserver.authentication.authenticators import (
    API_AUDIENCES,
    AuthenticationError,
    Response,
    UserInfo,
)
from isthmus.apiserver.storage.datadir import make_private_dir, make_private_file, write_private

__all__ = [
    "CREDENTIAL_ID_KEY",
    "DEFAULT_ISSUER",
    "EXTENDED_EXPIRATION_SECONDS",
    "LEGACY_ISSUER",
    "NODE_NAME_KEY",
    "NODE_UID_KEY",
    "POD_NAME_KEY",
    "POD_UID_KEY",
    "WARN_ONLY_EXPIRATION_SECONDS",
    "Lookup",
    "ServiceAccountTokens",
    "load_or_create_key",
    "load_public_keys",
    "service_account_user",
]

Obj = dict[str, Any]
# (storage key, namespace, name) → the stored object or None: "/serviceaccounts", "/pods", "/secrets".
Lookup = Callable[[str, str, str], Obj | None]

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"
SA_PREFIX = "system:serviceaccount:"
ALL_SA_GROUP = "system:serviceaccounts"
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
POD_UID_KEY = "authentication.kubernetes.io/pod-uid"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
NODE_UID_KEY = "authentication.kubernetes.io/node-uid"
CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"
# kube's --service-account-extend-token-expiration: a pod-bound token asked for exactly this many
# seconds (what kubelets ask for) is valid for a year, with warnafter at the requested expiry.
WARN_ONLY_EXPIRATION_SECONDS = 3607
VERIFIED_CACHE_SIZE = 4096
EXTENDED_EXPIRATION_SECONDS = 365 * 24 * 60 * 60
LEEWAY = 60.0  # go-jose's jwt.DefaultLeeway, which kube validates with

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z ]+)-----.+?-----END \1-----", re.S)
_LEGACY_SA_NAME = "kubernetes.io/serviceaccount/service-account.name"
_LEGACY_SA_UID = "kubernetes.io/serviceaccount/service-account.uid"
_LEGACY_SECRET = "kubernetes.io/serviceaccount/secret.name"
_LEGACY_NS = "kubernetes.io/serviceaccount/namespace"


def service_account_user(namespace: str, name: str, uid: str, extra: dict[str, tuple[str, ...]] | None = None) -> UserInfo:
    """kube's ServiceAccountInfo.UserInfo(): the username, the SA's uid, and the two SA groups."""
    return UserInfo(f"{SA_PREFIX}{namespace}:{name}", uid,
                    (ALL_SA_GROUP, f"{ALL_SA_GROUP}:{namespace}"), extra or {})


def load_or_create_key(path: Path) -> rsa.RSAPrivateKey:
    """The signing key in `path` (PEM), created once (RSA 2048, 0600) when missing."""
    if path.exists():
        make_private_file(path)
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError(f"{path}: the service account signing key must be an RSA private key")
        return key
    make_private_dir(path.parent)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    return key


def load_public_keys(path: Path) -> list[rsa.RSAPublicKey]:
    """kube's --service-account-key-file: PEM RSA public keys, or private keys (their public half)."""
    out: list[rsa.RSAPublicKey] = []
    for m in _PEM_BLOCK.finditer(path.read_bytes()):
        pem, label = m.group(0), m.group(1)
        key: Any = (serialization.load_pem_private_key(pem, password=None).public_key()
                    if label.endswith(b"PRIVATE KEY") else serialization.load_pem_public_key(pem))
        if isinstance(key, rsa.RSAPublicKey):
            out.append(key)
    if not out:
        raise ValueError(f"{path}: no RSA keys found")
    return out


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id(key: rsa.RSAPublicKey) -> str:
    """kube's keyIDFromPublicKey: base64url(SHA-256 of the DER public key), unpadded."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _b64(hashlib.sha256(der).digest())


def _go_quote_list(items: Sequence[str]) -> str:
    """fmt's %q of a []string: `["a" "b"]`."""
    return "[" + " ".join(orjson.dumps(i).decode() for i in items) + "]"


class ServiceAccountTokens:
    """The issuer and the authenticator of ServiceAccount tokens (one key, one issuer)."""

    def __init__(self, key: rsa.RSAPrivateKey | None, lookup: Lookup, *, issuer: str = DEFAULT_ISSUER,
                 api_audiences: Sequence[str] = API_AUDIENCES, public_keys: Iterable[rsa.RSAPublicKey] = (),
                 clock: Callable[[], float] = time.time) -> None:
        """key None: a new key, made on first use (servers without a data dir mostly never sign)."""
        self._key = key
        self.lookup = lookup
        self.issuer = issuer
        self.api_audiences = tuple(api_audiences)
        self.clock = clock
        self._public_keys = list(public_keys)
        self._verified: dict[str, tuple[Any, Obj]] = {}
        """Tokens whose signature a current key verified, with their issuer and claims: a JWT's RS256
        check costs more than the rest of a request's authentication, and a client sends the same
        token on every request. Only the signature and decoding are remembered; audiences, expiry
        and the bound objects are checked every time."""

    def use_keys(self, key: rsa.RSAPrivateKey | None, public_keys: Iterable[rsa.RSAPublicKey] = ()) -> None:
        """Sign with `key` (None: keep the current one), verify with it and `public_keys`."""
        if key is not None:
            self._key = key
        self._public_keys = list(public_keys)
        self._verified = {}  # keys changed: verify again

    @property
    def key(self) -> rsa.RSAPrivateKey:
        if self._key is None:
            self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return self._key

    @property
    def _keys(self) -> list[rsa.RSAPublicKey]:
        return [self.key.public_key(), *self._public_keys]

    # ---------------------------------------------------------------- issuing

    def _sign(self, claims: Obj) -> str:
        header = _b64(orjson.dumps({"alg": "RS256", "kid": key_id(self.key.public_key())}))
        payload = _b64(orjson.dumps(claims))
        signature = self.key.sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{payload}.{_b64(signature)}"

    def issue(self, sa: Obj, audiences: Sequence[str], expiration_seconds: int, *, pod: Obj | None = None,
              secret: Obj | None = None, node: Obj | None = None, warn_after: int = 0) -> tuple[str, int]:
        """A bound token (kube's token.Claims + GenerateToken); returns (token, iat)."""
        now = int(self.clock())
        m = sa["metadata"]
        k8s: Obj = {"namespace": m["namespace"],
                    "serviceaccount": {"name": m["name"], "uid": m.get("uid", "")}}
        if pod is not None:
            k8s["pod"] = _ref(pod)
            if node is not None:  # ServiceAccountTokenPodNodeInfo (beta, on in 1.32)
                k8s["node"] = _ref(node)
        elif secret is not None:
            k8s["secret"] = _ref(secret)
        elif node is not None:
            k8s["node"] = _ref(node)
        if warn_after:
            k8s["warnafter"] = now + warn_after
        claims: Obj = {"aud": list(audiences), "exp": now + expiration_seconds, "iat": now, "iss": self.issuer,
                       "jti": str(uuid.uuid4()), "kubernetes.io": k8s, "nbf": now,
                       "sub": f"{SA_PREFIX}{m['namespace']}:{m['name']}"}
        return self._sign(claims), now

    def issue_legacy(self, sa: Obj, secret_name: str) -> str:
        """A non-expiring legacy token for a kubernetes.io/service-account-token Secret."""
        m = sa["metadata"]
        return self._sign({"iss": LEGACY_ISSUER, _LEGACY_NS: m["namespace"], _LEGACY_SECRET: secret_name,
                           _LEGACY_SA_NAME: m["name"], _LEGACY_SA_UID: m.get("uid", ""),
                           "sub": f"{SA_PREFIX}{m['namespace']}:{m['name']}"})

    def is_api_audience(self, audiences: Sequence[str]) -> bool:
        """kube's isKubeAudiences: every requested audience is one of the API audiences."""
        return all(a in self.api_audiences for a in audiences)

    # ---------------------------------------------------------------- verifying

    def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        verified = self._verified.get(token)
        if verified is not None:  # decoded and its signature checked before; what it claims is checked below
            iss, claims = verified
        else:
            parts = token.split(".")
            if len(parts) != 3:
                return None
            try:
                header = orjson.loads(_unb64(parts[0]))
                claims = orjson.loads(_unb64(parts[1]))
                signature = _unb64(parts[2])
            except (ValueError, binascii.Error, orjson.JSONDecodeError):
                return None
            if not isinstance(claims, dict) or not isinstance(header, dict):
                return None
            iss = claims.get("iss")
            if iss not in (self.issuer, LEGACY_ISSUER):
                return None  # another issuer's token: not ours to judge (kube's hasCorrectIssuer)
            if header.get("alg") != "RS256":
                raise AuthenticationError("go-jose/go-jose: unexpected signature algorithm "
                                          f"\"{header.get('alg')}\"; expected [\"RS256\"]")
            signed = f"{parts[0]}.{parts[1]}".encode()
            for key in self._keys:
                try:
                    key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
                    break
                except InvalidSignature:
                    continue
            else:
                raise AuthenticationError("go-jose/go-jose: error in cryptographic primitive")
            self._verified[token] = (iss, claims)
            if len(self._verified) > VERIFIED_CACHE_SIZE:
                self._verified.pop(next(iter(self._verified)))
        aud = claims.get("aud")
        token_auds = [aud] if isinstance(aud, str) else [str(a) for a in aud or []]
        if not token_auds:
            token_auds = list(self.api_audiences)  # legacy tokens: valid for the API audiences only
        requested = list(audiences) or list(self.api_audiences)
        auds = tuple(a for a in token_auds if a in requested)
        if not auds:
            raise AuthenticationError(f"token audiences {_go_quote_list(token_auds)} is invalid for the target "
                                      f"audiences {_go_quote_list(requested)}")
        user = self._validate_legacy(token, claims) if iss == LEGACY_ISSUER else self._validate_bound(claims)
        return Response(user, auds)

    def _check_time(self, claims: Obj) -> float:
        now = self.clock()
        exp, nbf, iat = claims.get("exp"), claims.get("nbf"), claims.get("iat")
        if isinstance(exp, (int, float)) and now > exp + LEEWAY:
            raise AuthenticationError("service account token has expired")
        if isinstance(nbf, (int, float)) and now + LEEWAY < nbf:
            raise AuthenticationError("service account token is not valid yet")
        if isinstance(iat, (int, float)) and now + LEEWAY < iat:
            raise AuthenticationError("service account token is issued in the future")
        return now

    def _get(self, key: str, ns: str, name: str, plural: str) -> Obj:
        obj = self.lookup(key, ns, name)
        if obj is None:
            raise AuthenticationError(f'{plural} "{name}" not found')
        return obj

    def _validate_bound(self, claims: Obj) -> UserInfo:
        """kube's validator.Validate for bound tokens."""
        k8s = claims.get("kubernetes.io")
        if not isinstance(k8s, dict) or not isinstance(k8s.get("serviceaccount"), dict):
            raise AuthenticationError("service account token claims could not be validated due to unexpected "
                                      "private claim")
        now = self._check_time(claims)
        # Objects deleted more than a leeway ago no longer back a token (their deletion is pending).
        ns, saref = str(k8s.get("namespace", "")), k8s["serviceaccount"]
        sa = self._get("/serviceaccounts", ns, str(saref.get("name", "")), "serviceaccounts")
        if _deleted_before(sa, now - LEEWAY):
            raise AuthenticationError(f"service account {ns}/{saref.get('name')} has been deleted")
        if sa["metadata"].get("uid") != saref.get("uid"):
            raise AuthenticationError(f"service account UID ({sa['metadata'].get('uid')}) does not match claim "
                                      f"({saref.get('uid')})")
        extra: dict[str, tuple[str, ...]] = {}
        secref = k8s.get("secret")
        if isinstance(secref, dict):
            secret = self.lookup("/secrets", ns, str(secref.get("name", "")))
            if secret is None or _deleted_before(secret, now - LEEWAY):
                raise AuthenticationError("service account token has been invalidated")
            if secret["metadata"].get("uid") != secref.get("uid"):
                raise AuthenticationError(f"secret UID ({secret['metadata'].get('uid')}) does not match service "
                                          f"account secret ref claim ({secref.get('uid')})")
        podref = k8s.get("pod")
        if isinstance(podref, dict):
            pod = self.lookup("/pods", ns, str(podref.get("name", "")))
            if pod is None or _deleted_before(pod, now - LEEWAY):
                raise AuthenticationError("service account token has been invalidated")
            if pod["metadata"].get("uid") != podref.get("uid"):
                raise AuthenticationError(f"pod UID ({pod['metadata'].get('uid')}) does not match service account "
                                          f"pod ref claim ({podref.get('uid')})")
            extra[POD_NAME_KEY] = (str(podref.get("name")),)
            extra[POD_UID_KEY] = (str(podref.get("uid")),)
        noderef = k8s.get("node")
        if isinstance(noderef, dict):
            if not isinstance(podref, dict):  # a node-bound token: the node must still be there
                node = self.lookup("/nodes", "", str(noderef.get("name", "")))
                if node is None or _deleted_before(node, now - LEEWAY):
                    raise AuthenticationError("service account token has been invalidated")
                if node["metadata"].get("uid") != noderef.get("uid"):
                    raise AuthenticationError(f"node UID ({node['metadata'].get('uid')}) does not match service "
                                              f"account node ref claim ({noderef.get('uid')})")
            extra[NODE_NAME_KEY] = (str(noderef.get("name")),)
            if noderef.get("uid"):
                extra[NODE_UID_KEY] = (str(noderef.get("uid")),)
        if claims.get("jti"):
            extra[CREDENTIAL_ID_KEY] = (f"JTI={claims['jti']}",)
        return service_account_user(ns, str(saref.get("name")), str(saref.get("uid")), extra)

    def _validate_legacy(self, token: str, claims: Obj) -> UserInfo:
        """kube's legacyValidator.Validate (with lookup): the Secret must still hold this token."""
        for claim, what in (("sub", "sub"), (_LEGACY_NS, "namespace"), (_LEGACY_SECRET, "secretName"),
                            (_LEGACY_SA_NAME, "serviceAccountName"), (_LEGACY_SA_UID, "serviceAccountUID")):
            if not claims.get(claim):
                raise AuthenticationError(f"{what} claim is missing")
        ns, name, uid = str(claims[_LEGACY_NS]), str(claims[_LEGACY_SA_NAME]), str(claims[_LEGACY_SA_UID])
        if claims["sub"] != f"{SA_PREFIX}{ns}:{name}":
            raise AuthenticationError("sub claim is invalid")
        secret = self.lookup("/secrets", ns, str(claims[_LEGACY_SECRET]))
        if secret is None or secret["metadata"].get("deletionTimestamp"):
            raise AuthenticationError("token has been invalidated")
        stored = (secret.get("data") or {}).get("token", "")
        try:
            matches = base64.b64decode(stored) == token.encode()
        except (ValueError, binascii.Error):
            matches = False
        if not matches:
            raise AuthenticationError("token does not match server's copy")
        sa = self._get("/serviceaccounts", ns, name, "serviceaccounts")
        if sa["metadata"].get("deletionTimestamp"):
            raise AuthenticationError(f"service account {ns}/{name} has been deleted")
        if sa["metadata"].get("uid") != uid:
            raise AuthenticationError(f"service account UID ({sa['metadata'].get('uid')}) does not match claim ({uid})")
        return service_account_user(ns, name, uid)


def _ref(obj: Obj) -> Obj:
    return {"name": obj["metadata"]["name"], "uid": obj["metadata"].get("uid", "")}


def _deleted_before(obj: Obj, when: float) -> bool:
    ts = obj["metadata"].get("deletionTimestamp")
    if not ts:
        return False
    try:
        stamp = calendar.timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return True
    return stamp < when
