"""ServiceAccount token issuing and verification without a server: keys, rotation, claims."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from isthmus.apiserver.authentication.authenticators import AuthenticationError
from isthmus.apiserver.authentication.serviceaccounts import (
    ServiceAccountTokens,
    key_id,
    load_or_create_key,
    load_public_keys,
)

SA = {"metadata": {"name": "bot", "namespace": "ns", "uid": "u-1"}}


def lookup(objects: dict[tuple[str, str, str], Any]) -> Any:
    return lambda key, ns, name: objects.get((key, ns, name))


def test_signing_key_is_created_once_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "tls" / "sa.key"
    key = load_or_create_key(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert key_id(load_or_create_key(path).public_key()) == key_id(key.public_key())


def test_tokens_of_a_previous_key_verify_with_service_account_key_file(tmp_path: Path) -> None:
    old = load_or_create_key(tmp_path / "old.key")
    new = load_or_create_key(tmp_path / "new.key")
    objects = {("/serviceaccounts", "ns", "bot"): SA}
    token, _ = ServiceAccountTokens(old, lookup(objects)).issue(SA, ["https://kubernetes.default.svc.cluster.local"],
                                                                3600)
    with pytest.raises(AuthenticationError, match="error in cryptographic primitive"):
        ServiceAccountTokens(new, lookup(objects)).authenticate_token(token, [])
    # A public key file, or the old private key file itself, as kube's --service-account-key-file.
    pub = tmp_path / "old.pub"
    pub.write_bytes(old.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    for f in (pub, tmp_path / "old.key"):
        rotated = ServiceAccountTokens(new, lookup(objects), public_keys=load_public_keys(f))
        resp = rotated.authenticate_token(token, [])
        assert resp is not None and resp.user.username == "system:serviceaccount:ns:bot"


def test_tokens_of_other_issuers_are_not_ours_and_other_algorithms_are_refused(tmp_path: Path) -> None:
    tokens = ServiceAccountTokens(None, lookup({}))
    assert tokens.authenticate_token("not-a-jwt", []) is None

    def jwt(header: dict[str, Any], claims: dict[str, Any]) -> str:
        enc = [base64.urlsafe_b64encode(json.dumps(p).encode()).rstrip(b"=").decode() for p in (header, claims)]
        return f"{enc[0]}.{enc[1]}.c2ln"

    assert tokens.authenticate_token(jwt({"alg": "RS256"}, {"iss": "https://accounts.google.com"}), []) is None
    with pytest.raises(AuthenticationError, match="unexpected signature algorithm"):
        tokens.authenticate_token(jwt({"alg": "none"}, {"iss": "https://kubernetes.default.svc.cluster.local"}), [])


def test_node_bound_token_names_the_node_and_needs_it(tmp_path: Path) -> None:
    node = {"metadata": {"name": "n1", "uid": "n-1"}}
    objects: dict[tuple[str, str, str], Any] = {("/serviceaccounts", "ns", "bot"): SA, ("/nodes", "", "n1"): node}
    tokens = ServiceAccountTokens(None, lookup(objects))
    token, _ = tokens.issue(SA, ["https://kubernetes.default.svc.cluster.local"], 3600, node=node)
    resp = tokens.authenticate_token(token, [])
    assert resp is not None
    assert resp.user.extra["authentication.kubernetes.io/node-name"] == ("n1",)
    assert resp.user.extra["authentication.kubernetes.io/node-uid"] == ("n-1",)
    del objects[("/nodes", "", "n1")]
    with pytest.raises(AuthenticationError, match="service account token has been invalidated"):
        tokens.authenticate_token(token, [])


def test_a_remembered_signature_skips_only_the_crypto(tmp_path: Path) -> None:
    """The second request with a token skips the RS256 check, never the validity checks: a deleted
    ServiceAccount, an expired token or a rotated key still refuse it."""
    now = [1_000_000.0]
    objects: dict[tuple[str, str, str], Any] = {("/serviceaccounts", "ns", "bot"): SA}
    key = load_or_create_key(tmp_path / "k.key")
    tokens = ServiceAccountTokens(key, lookup(objects), clock=lambda: now[0])
    token, _ = tokens.issue(SA, ["https://kubernetes.default.svc.cluster.local"], 3600)
    assert tokens.authenticate_token(token, []) is not None
    assert token in tokens._verified
    assert tokens.authenticate_token(token, []) is not None
    del objects[("/serviceaccounts", "ns", "bot")]
    with pytest.raises(AuthenticationError, match="not found"):
        tokens.authenticate_token(token, [])
    objects[("/serviceaccounts", "ns", "bot")] = SA
    now[0] += 7200
    with pytest.raises(AuthenticationError, match="expired"):
        tokens.authenticate_token(token, [])
    now[0] -= 7200
    tokens.use_keys(load_or_create_key(tmp_path / "other.key"))
    with pytest.raises(AuthenticationError, match="error in cryptographic primitive"):
        tokens.authenticate_token(token, [])
    forged = token.rsplit(".", 1)[0] + ".c2ln"
    with pytest.raises(AuthenticationError, match="error in cryptographic primitive"):
        tokens.authenticate_token(forged, [])
