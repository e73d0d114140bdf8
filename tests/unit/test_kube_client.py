"""isthmus.kube.client: which configuration a client gets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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


def _write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def _merge_files(tmp_path: Path) -> tuple[Path, Path]:
    a = _write(tmp_path / "a" / "config", {
        "current-context": "c1",
        "clusters": [{"name": "x", "cluster": {"server": "http://127.0.0.1:7001"}}],
        "users": [{"name": "u", "user": {"token": "from-a"}}],
        "contexts": [{"name": "c1", "context": {"cluster": "x", "user": "u"}}],
    })
    b = _write(tmp_path / "b" / "config", {
        "current-context": "c2",  # a set it first: ignored
        "clusters": [
            {"name": "x", "cluster": {"server": "http://127.0.0.1:7999"}},  # a defines x first: ignored
            {"name": "far", "cluster": {"server": "https://127.0.0.1:7002", "certificate-authority": "ca.crt"}},
        ],
        "users": [{"name": "u", "user": {"token": "from-b"}}, {"name": "v", "user": {"tokenFile": "token"}}],
        "contexts": [
            {"name": "c2", "context": {"cluster": "x", "user": "u", "namespace": "ns-b"}},
            {"name": "c3", "context": {"cluster": "far", "user": "v"}},
        ],
    })
    return a, b


def test_kubeconfig_list_is_merged_as_kubectl_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _merge_files(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{a}:{tmp_path / 'missing'}:{b}")
    assert load_config().context_name == "c1"  # the first current-context wins
    c2 = load_config(context="c2")  # only b has it
    assert (c2.cluster.server, c2.namespace, c2.user.token if c2.user else None) == (
        "http://127.0.0.1:7001", "ns-b", "from-a",  # x and u: the first file that names them wins
    )
    c3 = load_config(context="c3")
    assert c3.cluster.server == "https://127.0.0.1:7002"
    # Relative file references are relative to the file that holds them.
    assert c3.cluster.certificate_auth == str(b.parent / "ca.crt")
    assert c3.user is not None and c3.user.token_file == str(b.parent / "token")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_merge_agrees_with_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _merge_files(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{a}:{tmp_path / 'missing'}:{b}")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "KUBECONFIG": os.environ["KUBECONFIG"]}
    for context in ("c1", "c2", "c3"):
        view = json.loads(subprocess.run(
            ["kubectl", "config", "view", "--minify", "--context", context, "-o", "json"],
            env=env, capture_output=True, text=True, check=True,
        ).stdout)
        ours = load_config(context=context)
        assert ours.cluster.server == view["clusters"][0]["cluster"]["server"], context
        assert ours.namespace == view["contexts"][0]["context"].get("namespace", "default"), context


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [\n  - bad: {\n", "is not valid YAML: expected the node content, but found '-' (line 2, column 3)"),
        ("- just\n- a list\n", "is not a kubeconfig: expected a mapping with clusters, users and contexts, found list"),
        ("apiVersion: v1\ncontexts: [{name: a, context: {cluster: a}}]\ncurrent-context: a\n", "defines no clusters"),
        ("clusters: 3\n", "clusters must be a list, not int"),
        ("clusters: [{cluster: {server: x}}]\n", "clusters[0] has no name"),
        (
            "clusters: [{name: a, cluster: {server: http://127.0.0.1:1}}]\n"
            "contexts: [{name: a, context: {cluster: b}}]\ncurrent-context: a\n",
            "context 'a' names cluster 'b', which kubeconfig",
        ),
        (
            "clusters: [{name: a, cluster: {server: http://127.0.0.1:1, insecure-skip-tls-verify: maybe}}]\n"
            "contexts: [{name: a, context: {cluster: a}}]\ncurrent-context: a\n",
            "cluster 'a': Expected `bool`, got `str`",
        ),
    ],
)
def test_malformed_kubeconfigs_are_one_line_errors_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "kc"
    bad.write_text(text)
    with pytest.raises(KubeConfigError) as exc:
        load_config(bad)
    assert message in str(exc.value) and str(bad) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_in_cluster_from_the_serviceaccount_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No kubeconfig: the ServiceAccount files, where kube-lite tells its processes they are."""
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("tok-1\n")
    (sa / "namespace").write_text("isthmus")
    (sa / "ca.crt").write_text("not read until a connection is made")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.setenv("ISTHMUS_SERVICEACCOUNT_DIR", str(sa))
    config = load_config()
    assert config.cluster.server == "https://127.0.0.1:6443"
    assert config.cluster.certificate_auth == str(sa / "ca.crt")
    assert config.context.namespace == "isthmus"
    assert config.user.token_file == str(sa / "token")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT")
    with pytest.raises(KubeConfigError, match="not running in a cluster"):
        load_config()


async def test_token_file_is_read_again_when_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As client-go, a rotated token (the kubelet rewrites the file) is used once the file is looked at
    again (here at every request; by default once a second, see the next test)."""
    from aiohttp import web

    from isthmus.kube.client import TokenFileAuth

    monkeypatch.setattr(TokenFileAuth, "CHECK_SECONDS", 0.0)

    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "default"}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    token = tmp_path / "token"
    token.write_text("first")
    conf = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"tokenFile": str(token)}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    (tmp_path / "kc").write_text(yaml.safe_dump(conf))
    from lightkube.resources.core_v1 import Namespace

    client = make_client(tmp_path / "kc")
    try:
        await client.get(Namespace, "default")
        tmp = tmp_path / "token.new"
        tmp.write_text("second\n")
        os.replace(tmp, token)  # as the kubelet writes it: a new file renamed over the old one
        await client.get(Namespace, "default")
    finally:
        await client.close()
        await runner.cleanup()
    assert seen == ["Bearer first", "Bearer second"]


def test_token_file_is_looked_at_once_a_second_at_most(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy client does not stat the file per request; a rotation shows within the second, and a
    forced read (after a 401) sees it at once."""
    from isthmus.kube import client as kube_client

    now = [100.0]
    monkeypatch.setattr(kube_client.time, "monotonic", lambda: now[0])
    token = tmp_path / "token"
    token.write_text("first")
    auth = kube_client.TokenFileAuth(str(token))
    assert auth.bearer_header() == "Bearer first"
    tmp = tmp_path / "token.new"
    tmp.write_text("second")
    os.replace(tmp, token)
    now[0] += 0.5
    assert auth.bearer_header() == "Bearer first"
    assert auth.bearer_header(force=True) == "Bearer second"
    tmp.write_text("third")
    os.replace(tmp, token)
    now[0] += 1.0
    assert auth.bearer_header() == "Bearer third"
