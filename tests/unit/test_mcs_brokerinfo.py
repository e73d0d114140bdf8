"""The broker-info document: round trip, clear errors on garbage, kubeconfig, access from a kubeconfig."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from lightkube import KubeConfig

from isthmus.clusterset.brokerinfo import BrokerInfo, access_from_config

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

PLACEHOLDER_SERVER = "http://x"  # never contacted: these tests only decode documents


def _enc(data: object) -> str:
    return base64.b64encode(json.dumps(data).encode()).decode()


def test_round_trip_and_defaults() -> None:
    info = BrokerInfo(server="https://127.0.0.1:6443", ca_pem=PEM, token="t0k", namespace="bk",
                      clusterset_ip_enabled=True, clusterset_ip_cidr_range=["10.0.0.0/8", "243.0.0.0/8"])
    text = info.encode()
    assert "\n" not in text
    assert BrokerInfo.decode(text) == info
    assert BrokerInfo.decode(text.encode()) == info
    assert BrokerInfo.decode(text[:20] + "\n  " + text[20:] + "\n") == info  # pasted with line breaks
    plain = BrokerInfo(server="http://127.0.0.1:1")
    assert BrokerInfo.decode(plain.encode()) == plain
    assert plain.namespace == "isthmus-broker" and plain.clusterset_ip_cidr_range == ["243.0.0.0/8"]
    assert json.loads(base64.b64decode(plain.encode())) == {
        "version": 1, "server": "http://127.0.0.1:1", "namespace": "isthmus-broker",
        "clustersetIPEnabled": False, "clustersetIPCIDRRange": ["243.0.0.0/8"],
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "broker-info is empty"),
        ("not base64 at all!", "broker-info is not a broker-info document (expected base64-encoded JSON)"),
        (base64.b64encode(b"\xff\xfe").decode(), "expected base64-encoded JSON"),
        (_enc([1, 2]), "expected a JSON object"),
        (_enc({"server": "ftp://x"}), "broker-info: 'server' must be an http(s) URL"),
        (_enc({"server": "http://x", "version": 9}), "broker-info version 9 is not supported"),
        (_enc({"server": "http://x", "caPEM": "hello"}), "broker-info: 'caPEM' is not a PEM certificate"),
        (_enc({"server": "http://x", "token": 5}), "broker-info: 'token' must be a non-empty string"),
        (_enc({"server": "http://x", "clustersetIPEnabled": "yes"}), "'clustersetIPEnabled' must be true or false"),
        (_enc({"server": "http://x", "clustersetIPCIDRRange": []}), "must be a non-empty list of CIDRs"),
        (  # a document only: nothing is ever sent anywhere
            _enc({"server": PLACEHOLDER_SERVER, "clustersetIPCIDRRange": ["243.0.0.1/8"]}),
            "has an invalid CIDR '243.0.0.1/8'",
        ),
    ],
)
def test_decode_garbage(text: str, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        BrokerInfo.decode(text)
    assert message in str(exc.value)


def test_decode_binary_garbage() -> None:
    with pytest.raises(ValueError, match="not base64 text"):
        BrokerInfo.decode(b"\x00\xff\xfe")


def test_kubeconfig_and_client() -> None:
    info = BrokerInfo(server="https://127.0.0.1:6443", ca_pem=PEM, token="t0k", namespace="bk")
    kc = info.to_kubeconfig()
    single = KubeConfig.from_dict(kc).get()
    assert single is not None and single.cluster.server == "https://127.0.0.1:6443"
    assert base64.b64decode(single.cluster.certificate_auth_data or "").decode() == PEM
    assert single.user is not None and single.user.token == "t0k" and single.namespace == "bk"
    assert access_from_config(single) == ("https://127.0.0.1:6443", PEM, "t0k")
    anonymous = KubeConfig.from_dict(BrokerInfo(server="http://127.0.0.1:1").to_kubeconfig()).get()
    assert anonymous is not None and access_from_config(anonymous) == ("http://127.0.0.1:1", None, None)


def test_access_from_config_reads_files_relative_to_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text(PEM)
    (tmp_path / "token").write_text("from-file\n")
    conf = {
        "clusters": [{"name": "b", "cluster": {"server": "https://127.0.0.1:9", "certificate-authority": "ca.crt"}}],
        "users": [{"name": "b", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}],
        "current-context": "b",
    }
    single = KubeConfig.from_dict(conf, fname=tmp_path / "kubeconfig").get()
    assert single is not None
    assert access_from_config(single) == ("https://127.0.0.1:9", PEM, "from-file")
    conf["clusters"][0]["cluster"]["certificate-authority"] = "missing.crt"  # type: ignore[index]
    broken = KubeConfig.from_dict(conf, fname=tmp_path / "kubeconfig").get()
    assert broken is not None
    with pytest.raises(ValueError, match="cannot read the broker's CA or token from the kubeconfig"):
        access_from_config(broken)


async def test_client_targets_the_broker_namespace() -> None:
    client = BrokerInfo(server="http://127.0.0.1:1", namespace="bk").client()
    try:
        assert client.namespace == "bk"
    finally:
        await client.close()
