"""isthmus.kube.client: which configuration a client gets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from isthmus.kube.client import KubeConfigError, load_config, make_client


def _kubeconfig(path: Path, current: str | None = "a") -> Path:
    conf = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "a", "cluster": {"server": "http://127.0.0.1:7001"}},
            {
                "name": "b",
                "cluster": {"server": "https://kube.example.com:6443", "insecure-skip-tls-verify": True},
            },
        ],
        "users": [{"name": "u", "user": {"token": "t0k"}}],
        "contexts": [
            {"name": "a", "context": {"cluster": "a", "user": "u", "namespace": "ns-a"}},
            {"name": "b", "context": {"cluster": "b", "user": "u"}},
        ],
    }
    if current:
        conf["current-context"] = current
    path.write_text(yaml.safe_dump(conf))
    return path


def test_explicit_path_and_context(tmp_path: Path) -> None:
    kc = _kubeconfig(tmp_path / "kc")
    assert load_config(kc).cluster.server == "http://127.0.0.1:7001"
    assert load_config(str(kc)).namespace == "ns-a"
    b = load_config(kc, "b")
    assert (b.context_name, b.cluster.server, b.namespace) == (
        "b",
        "https://kube.example.com:6443",
        "default",
    )


def test_kubeconfig_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kc = _kubeconfig(tmp_path / "kc", current="b")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{kc}:{tmp_path / 'other'}")
    assert load_config().context_name == "b"
    assert load_config(context="a").context_name == "a"


def test_errors_are_user_messages(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="not found"):
        load_config(tmp_path / "missing")
    kc = _kubeconfig(tmp_path / "kc", current=None)
    with pytest.raises(KubeConfigError, match="context"):
        load_config(kc)
    with pytest.raises(KubeConfigError, match="nope"):
        load_config(kc, "nope")
    bad = tmp_path / "bad"
    bad.write_text("clusters: 3\n")
    with pytest.raises(KubeConfigError):
        load_config(bad)


async def test_make_client(tmp_path: Path) -> None:
    kc = _kubeconfig(tmp_path / "kc")
    client = make_client(kc, field_manager="isthmus-test")
    try:
        assert client.namespace == "ns-a"
        assert client.config.cluster.server == "http://127.0.0.1:7001"
    finally:
        await client.close()
    other = make_client(kc, "b", namespace="x")
    try:
        assert other.namespace == "x"
    finally:
        await other.close()
