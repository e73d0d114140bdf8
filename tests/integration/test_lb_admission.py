"""dklb-config admission end to end: the embedded apiserver's in-process DklbConfig plugin, and the
same checks through `isthmus webhook`'s server called by the apiserver as kube-apiserver calls it."""

from __future__ import annotations

import asyncio
import base64
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube.core.exceptions import ApiError
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.core_v1 import Secret, Service
from lightkube.resources.networking_v1 import Ingress

from isthmus.api.lb import DKLB_CONFIG_ANNOTATION, EDGELB_CONTROLLER
from isthmus.cli import admission_plugins
from isthmus.cli.webhook import ensure_secret, patch_ca_bundle
from isthmus.lb.admission import HANDLERS, MUTATE_PATH, VALIDATE_PATH
from isthmus.runtime.webhook import WebhookServer, self_signed
from tests.harness.apiserver import RunningApiServer
from tests.harness.ports import free_port

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


def service(name: str, config: str | None, ports: tuple[int, ...] = (80,), cls: str | None = EDGELB_CONTROLLER) -> Service:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if config is not None:
        meta["annotations"] = {DKLB_CONFIG_ANNOTATION: config}
    klass = {"loadBalancerClass": cls} if cls is not None else {}
    return Service.from_dict({"metadata": meta, "spec": {"type": "LoadBalancer", **klass,
                                                         "ports": [{"name": f"p{p}", "port": p} for p in ports]}})


@pytest.fixture
async def plugin_server(tmp_path: Path) -> AsyncIterator[RunningApiServer]:
    srv = RunningApiServer(tmp_path / "apiserver", admission=admission_plugins.build([]))
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


async def check(client: Any, plugin_style: bool) -> None:
    with pytest.raises(ApiError) as err:
        await client.create(service("bad", "frontends:\n- port: 1\n  servicePort: 81\nsizes: 2\n"))
    msg = err.value.status.message
    assert "metadata.annotations[kubernetes.dcos.io/dklb-config]" in msg
    assert 'unknown field "sizes"' in msg
    assert err.value.status.code == 422
    if plugin_style:
        assert msg.startswith('Service "bad" is invalid')
    else:
        assert msg.startswith('admission webhook "dklb.validate.isthmus.io" denied the request')
    with pytest.raises(ApiError, match="81 is not a port of this Service"):
        await client.create(service("bad", "frontends:\n- port: 1\n  servicePort: 81\n"))
    good = await client.create(service("good", "role: '*'\nsize: 2\n"))
    stored = yaml.safe_load(good.metadata.annotations[DKLB_CONFIG_ANNOTATION])
    assert stored == {"role": "*", "size": 2, "network": "dcos", "cpus": 0.1, "memory": 128,
                      "strategies": {"creation": "IfNotPresent"}, "frontends": []}
    good.metadata.annotations[DKLB_CONFIG_ANNOTATION] = "role: slave_public\n"
    with pytest.raises(ApiError, match="field role is immutable once set"):
        await client.replace(good)
    plain = await client.create(Service.from_dict({"metadata": {"name": "plain", "namespace": "default"},
                                                   "spec": {"ports": [{"port": 80}]}}))
    assert not (plain.metadata.annotations or {})  # not a load balancer: untouched
    with pytest.raises(ApiError, match=r'unknown field "frontends\.tcp"'):
        await client.create(Ingress.from_dict({
            "metadata": {"name": "i", "namespace": "default",
                         "annotations": {DKLB_CONFIG_ANNOTATION: "frontends: {tcp: 1}"}},
            "spec": {"defaultBackend": {"service": {"name": "x", "port": {"number": 80}}}}}))


async def kubectl(srv: RunningApiServer, *args: str, stdin: str = "") -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", srv.kubeconfig, *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(60):
        out, _ = await proc.communicate(stdin.encode())
    return proc.returncode or 0, out.decode()


BAD_BY_KUBECTL = f"""
apiVersion: v1
kind: Service
metadata:
  name: kbad
  namespace: default
  annotations:
    {DKLB_CONFIG_ANNOTATION}: |
      frontends:
      - port: 1
        servicePort: 81
spec:
  type: LoadBalancer
  loadBalancerClass: isthmus.io/edgelb
  ports: [{{name: http, port: 80}}, {{name: alt, port: 8080}}]
"""

GOOD_INGRESS = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: edge
  namespace: default
spec:
  ingressClassName: edgelb
  defaultBackend: {service: {name: web, port: {number: 80}}}
"""


async def check_with_kubectl(srv: RunningApiServer, denial_prefix: str) -> None:
    """What a user sees: kubectl's error line, and the defaults in `kubectl get -o yaml`."""
    rc, out = await kubectl(srv, "apply", "-f", "-", stdin=BAD_BY_KUBECTL)
    assert rc != 0
    assert denial_prefix in out
    assert (f"metadata.annotations[{DKLB_CONFIG_ANNOTATION}]: frontends[0].servicePort: 81 is not a port of "
            "this Service (ports: 80, 8080)") in out
    rc, out = await kubectl(srv, "apply", "-f", "-", stdin=GOOD_INGRESS)
    assert rc == 0, out
    rc, out = await kubectl(srv, "get", "ingress", "edge", "-n", "default", "-o", "yaml")
    stored = yaml.safe_load(yaml.safe_load(out)["metadata"]["annotations"][DKLB_CONFIG_ANNOTATION])
    assert stored["frontends"] == {"http": {"port": 80}} and stored["role"] == "slave_public"


async def test_the_in_process_plugin(plugin_server: RunningApiServer) -> None:
    await check(plugin_server.client(), plugin_style=True)
    await check_with_kubectl(plugin_server, 'Service "kbad" is invalid')


async def test_the_in_process_plugin_takes_class_less_services_only_when_opted_in(tmp_path: Path) -> None:
    """`isthmus apiserver --lb-class-less-services` (the local clusterset's): class-less Services get
    the defaults; without it they are another load balancer's and pass untouched. Another class's
    Service is never looked at."""
    for opted_in in (False, True):
        srv = RunningApiServer(tmp_path / f"apiserver-{opted_in}", admission=admission_plugins.build(
            [], lb_class_less=opted_in))
        await srv.start()
        try:
            client = srv.client()
            plain = await client.create(service("plain", None, cls=None))
            assert (DKLB_CONFIG_ANNOTATION in (plain.metadata.annotations or {})) is opted_in
            other = await client.create(service("cilium", "bogus: 1", cls="io.cilium/l2-announcer"))
            assert other.metadata.annotations == {DKLB_CONFIG_ANNOTATION: "bogus: 1"}
            if opted_in:
                with pytest.raises(ApiError, match='unknown field "bogus"'):
                    await client.create(service("bad", "bogus: 1", cls=None))
            else:
                await client.create(service("bad", "bogus: 1", cls=None))
        finally:
            await srv.close()


def rendered_lb_webhooks(tmp_path: Path, url: str, class_less: bool) -> list[Any]:
    """deploy/member's webhook configurations with deploy/components/lb (and the class-less opt-in),
    as an admin installs them, pointed at `url`."""
    from isthmus.kube.manifests import render
    from tests.harness.lb import lb_overlay

    out = []
    for doc in render(lb_overlay(tmp_path / f"overlay-{class_less}", class_less=class_less)):
        if doc["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": url + path}
            kind = ValidatingWebhookConfiguration if doc["kind"].startswith("Validating") else MutatingWebhookConfiguration
            out.append(kind.from_dict(doc))
    return out


@pytest.mark.parametrize("class_less", [False, True])
async def test_with_the_webhook_down_other_classes_pass_untouched(
        apiserver: RunningApiServer, tmp_path: Path, class_less: bool) -> None:
    """Issue 43, defect 1: the component's real webhook configurations (failurePolicy Fail), their
    server down. A Service of class io.cilium/l2-announcer is admitted untouched, and so is a
    class-less one unless the admin opted in; an edgelb one is ours: refused while nobody answers."""
    client = apiserver.client()
    for config in rendered_lb_webhooks(tmp_path, f"https://127.0.0.1:{free_port()}", class_less):
        await client.create(config)
    cilium = await client.create(service("cilium", None, cls="io.cilium/l2-announcer"))
    assert not (cilium.metadata.annotations or {})
    nginx = await client.create(Ingress.from_dict({
        "metadata": {"name": "n", "namespace": "default", "annotations": {DKLB_CONFIG_ANNOTATION: "bogus: 1"}},
        "spec": {"ingressClassName": "nginx", "defaultBackend": {"service": {"name": "x", "port": {"number": 80}}}}}))
    assert nginx.metadata.annotations == {DKLB_CONFIG_ANNOTATION: "bogus: 1"}
    rc, out = await kubectl(apiserver, "apply", "-f", "-", stdin=BAD_BY_KUBECTL.replace("kbad", "kcilium").replace(
        "isthmus.io/edgelb", "io.cilium/l2-announcer"))
    assert rc == 0 and "service/kcilium created" in out, out
    with pytest.raises(ApiError, match="failed calling webhook") as err:
        await client.create(service("edgelb", None))
    assert err.value.status.code == 500
    if class_less:
        with pytest.raises(ApiError, match="failed calling webhook"):
            await client.create(service("classless", None, cls=None))
    else:
        classless = await client.create(service("classless", None, cls=None))
        assert not (classless.metadata.annotations or {})


async def test_the_plugin_can_be_disabled(tmp_path: Path) -> None:
    srv = RunningApiServer(tmp_path / "apiserver", admission=admission_plugins.build(["DklbConfig"]))
    await srv.start()
    try:
        created = await srv.client().create(service("bad", "bogus: 1"))
        assert created.metadata.annotations[DKLB_CONFIG_ANNOTATION] == "bogus: 1"
    finally:
        await srv.close()


async def test_the_webhook_server_through_the_apiserver(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    certs = self_signed(["127.0.0.1"])
    server = WebhookServer(dict(HANDLERS))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c").write_bytes(certs.cert)
        (Path(tmp) / "k").write_bytes(certs.key)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(f"{tmp}/c", f"{tmp}/k")
        await server.start("127.0.0.1", 0, ctx)
    try:
        rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                  "resources": ["services"]},
                 {"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                  "resources": ["ingresses"]}]

        def hook(name: str, path: str) -> dict[str, Any]:  # no caBundle yet: patch_ca_bundle adds it
            return {"name": name, "rules": rules, "sideEffects": "None", "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail", "timeoutSeconds": 5,
                    "clientConfig": {"url": f"https://127.0.0.1:{server.port}{path}"}}

        await client.create(ValidatingWebhookConfiguration.from_dict(
            {"metadata": {"name": "isthmus-lb"}, "webhooks": [hook("dklb.validate.isthmus.io", VALIDATE_PATH)]}))
        await client.create(MutatingWebhookConfiguration.from_dict(
            {"metadata": {"name": "isthmus-lb"}, "webhooks": [hook("dklb.mutate.isthmus.io", MUTATE_PATH)]}))
        patched = await patch_ca_bundle(client, "isthmus-lb", certs.ca)
        assert patched == ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]
        vwc = await client.get(ValidatingWebhookConfiguration, "isthmus-lb")
        assert base64.b64decode(vwc.webhooks[0].clientConfig.caBundle) == certs.ca
        await check(client, plugin_style=False)
        await check_with_kubectl(apiserver, 'admission webhook "dklb.validate.isthmus.io" denied the request')
    finally:
        await server.stop()


async def test_the_certificate_secret_is_minted_once(apiserver: Any) -> None:
    client = apiserver.client()
    first = await ensure_secret(client, "default", "tls", ["isthmus-lb.isthmus-system.svc"])
    again = await ensure_secret(client, "default", "tls", ["isthmus-lb.isthmus-system.svc"])
    assert first == again
    secret = await client.get(Secret, "tls", namespace="default")
    assert secret.type == "kubernetes.io/tls" and set(secret.data or {}) == {"ca.crt", "tls.crt", "tls.key"}


async def test_isthmus_webhook_bootstraps_its_certificate_and_serves_kubectl(
        apiserver: RunningApiServer, tmp_path: Path) -> None:
    """The real command, as deploy/member/webhook runs it: mint the Secret, patch the CA into both
    configurations (service references, no caBundle yet), then answer the apiserver's calls."""
    client = apiserver.client()
    port = free_port()
    await client.create(Service.from_dict({  # the apiserver dials a service reference at its ClusterIP
        "metadata": {"name": "isthmus-lb", "namespace": "default"},
        "spec": {"clusterIP": "127.0.0.1", "ports": [{"port": port, "protocol": "TCP"}]}}))

    def hook(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"service": {"namespace": "default", "name": "isthmus-lb", "path": path,
                                             "port": port}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                           "resources": ["services"]}]}

    await client.create(ValidatingWebhookConfiguration.from_dict(
        {"metadata": {"name": "isthmus-lb"}, "webhooks": [hook("dklb.validate.isthmus.io", VALIDATE_PATH)]}))
    await client.create(MutatingWebhookConfiguration.from_dict(
        {"metadata": {"name": "isthmus-lb"}, "webhooks": [hook("dklb.mutate.isthmus.io", MUTATE_PATH)]}))
    log = (tmp_path / "webhook.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "webhook", "--kubeconfig", apiserver.kubeconfig,
        "--listen", f"127.0.0.1:{port}", "--tls-secret", "default/isthmus-lb-tls",
        "--service", "default/isthmus-lb", "--webhook-configuration", "isthmus-lb",
        stdout=log, stderr=asyncio.subprocess.STDOUT)
    try:
        for _ in range(300):  # bounded: up to ~30 s for the process to mint, patch and listen
            assert proc.returncode is None, (tmp_path / "webhook.log").read_text()
            mwc = await client.get(MutatingWebhookConfiguration, "isthmus-lb")
            if mwc.webhooks[0].clientConfig.caBundle:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    pass
            await asyncio.sleep(0.1)
        secret = await client.get(Secret, "isthmus-lb-tls", namespace="default")
        assert secret.type == "kubernetes.io/tls"
        vwc = await client.get(ValidatingWebhookConfiguration, "isthmus-lb")
        ca = base64.b64decode(vwc.webhooks[0].clientConfig.caBundle)
        assert ca == base64.b64decode(secret.data["ca.crt"])
        assert base64.b64decode(mwc.webhooks[0].clientConfig.caBundle) == ca
        rc, out = await kubectl(apiserver, "apply", "-f", "-", stdin=BAD_BY_KUBECTL)
        assert rc != 0 and 'admission webhook "dklb.validate.isthmus.io" denied the request' in out
        assert "frontends[0].servicePort: 81 is not a port of this Service (ports: 80, 8080)" in out
        good = await client.create(service("good", "size: 2\n"))
        stored = yaml.safe_load(good.metadata.annotations[DKLB_CONFIG_ANNOTATION])
        assert stored["size"] == 2 and stored["role"] == "slave_public" and stored["network"] == ""
    finally:
        proc.terminate()
        async with asyncio.timeout(20):
            await proc.wait()
        log.close()
