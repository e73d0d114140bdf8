"""A broker reached at another address than members use (runc mode: members dial the fabric's
10.255.0.1, this machine 127.0.0.1) is found by its CA, and this machine's address is used with the
member's own credentials: nothing dials the members' address from here."""

from __future__ import annotations

import base64
from pathlib import Path

from lightkube import KubeConfig

from isthmus.apiserver.authentication.tls import ensure_certs
from isthmus.clusterset.brokerinfo import BrokerInfo, as_seen_from, reaches_broker


def _config(server: str, ca: bytes) -> object:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "b",
           "clusters": [{"name": "b", "cluster": {"server": server,
                                                  "certificate-authority-data": base64.b64encode(ca).decode()}}],
           "users": [{"name": "b", "user": {"token": "admin"}}],
           "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}]}
    return KubeConfig.from_dict(doc).get()


def test_the_broker_is_found_by_its_ca_and_reached_at_this_machines_address(tmp_path: Path) -> None:
    ca = ensure_certs(tmp_path / "broker", ["127.0.0.1"])[0].read_bytes()
    other = ensure_certs(tmp_path / "other", ["127.0.0.1"])[0].read_bytes()
    members_url = "https://" + ".".join(["10", "255", "0", "1"]) + ":24661"  # only written, never dialled
    info = BrokerInfo(server=members_url, ca_pem=ca.decode(), token="member-token")
    local = _config("https://127.0.0.1:24661", ca)
    stranger = _config("https://127.0.0.1:9999", other)
    assert reaches_broker(local, info)  # type: ignore[arg-type]
    assert not reaches_broker(stranger, info)  # type: ignore[arg-type]
    seen = as_seen_from(info, [stranger, local])  # type: ignore[list-item]
    assert seen.server == "https://127.0.0.1:24661" and seen.token == "member-token" and seen.ca_pem == info.ca_pem
    assert as_seen_from(info, [stranger]) == info  # type: ignore[list-item]
