"""Egress admission as users meet it: through the embedded apiserver's in-process plugin, and through
`isthmus webhook`'s server called by the apiserver as kube-apiserver calls it (the real-cluster
path, whose lookups are API reads and SubjectAccessReviews). The same messages either way."""

from __future__ import annotations

import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.resources.admissionregistration_v1 import ValidatingWebhookConfiguration
from lightkube.types import PatchType

from isthmus.api.egress import ExternalService, SourceIP, SourceIPClaim, SourceIPClass
from isthmus.cli import admission_plugins
from isthmus.egress.admission import VALIDATE_PATH, webhook_handlers
from isthmus.kube import helpers
from isthmus.kube.resources import resource_for
from isthmus.runtime.webhook import WebhookServer, self_signed
from tests.harness.apiserver import RunningApiServer

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

ClassRes: Any = resource_for(SourceIPClass)
ClaimRes: Any = resource_for(SourceIPClaim)
EsRes: Any = resource_for(ExternalService)
SipRes: Any = resource_for(SourceIP)


def es(name: str, sources: list[dict[str, Any]], target: str = "127.48.0.10",
       ports: list[dict[str, Any]] | None = None) -> Any:
    return EsRes.from_dict({"metadata": {"name": name, "namespace": "default"},
                            "spec": {"targetIP": target, "sources": sources, "ports": ports or [{"port": 7000}]}})


async def as_developer(srv: RunningApiServer, admin: AsyncClient, tmp: Path) -> AsyncClient:
    """A ServiceAccount allowed egress objects in `default` and nothing in `team-b`."""
    for obj in yaml.safe_load_all("""
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: dev, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: egress-user, namespace: default}
rules:
- {apiGroups: [egress.isthmus.io], resources: [externalservices, sourceipclaims], verbs: [create, get]}
- {apiGroups: [""], resources: [services], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dev, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: egress-user}
subjects: [{kind: ServiceAccount, name: dev, namespace: default}]
"""):
        await _create(admin, obj)
    token = await _token(admin)
    return AsyncClient(config=_kubeconfig_with(srv.kubeconfig, token, tmp / "dev.kubeconfig"))


def _kubeconfig_with(source: str, token: str, path: Path) -> KubeConfig:
    cfg = yaml.safe_load(Path(source).read_text())
    cfg["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(cfg))
    return KubeConfig.from_file(str(path))


async def _create(client: AsyncClient, obj: dict[str, Any]) -> None:
    from lightkube.codecs import from_dict

    await client.create(from_dict(obj))


async def _token(admin: AsyncClient) -> str:
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ServiceAccountToken

    request = ServiceAccountToken(metadata=ObjectMeta(name="dev", namespace="default"),
                                  spec=TokenRequestSpec(audiences=[]))
    issued = await admin.create(request, name="dev", namespace="default")  # type: ignore[call-overload]
    return str(issued.status.token)


async def scenarios(srv: RunningApiServer, admin: AsyncClient, tmp: Path) -> None:
    await helpers.install_crds(admin)
    await admin.create(ClassRes.from_dict({"metadata": {"name": "lab"}, "spec": {
        "ranges": [{"start": "127.32.9.1", "end": "127.32.9.9"}], "allowedNamespaces": ["default"]}}))
    with pytest.raises(ApiError) as err:
        await admin.create(es("bad", [{"service": {"name": "app"}, "sourceIP": "127.32.9.1"},
                                      {"service": {"name": "web"}, "sourceIPClaimName": "ns2/theirs"}],
                              target="db.example", ports=[{"port": 7000}, {"port": 7000}, {"port": 0}]))
    msg = err.value.status.message
    assert err.value.status.code == 422
    for said in ('spec.targetIP: Invalid value: "db.example": must be a valid IP address',
                 "spec.sources[0].sourceIP: Forbidden: a source IP cannot be chosen in an ExternalService",
                 'spec.sources[1].sourceIPClaimName: Invalid value: "ns2/theirs": a claim of another namespace',
                 "spec.ports[1]: Duplicate value: TCP/7000",
                 "spec.ports[2].port: Invalid value: 0: must be between 1 and 65535, inclusive"):
        assert said in msg, msg
    with pytest.raises(ApiError) as err:
        await admin.create(ClaimRes.from_dict({"metadata": {"name": "far", "namespace": "default"},
                                               "spec": {"sourceIPClassName": "lab", "sourceIP": "127.32.10.1"}}))
    assert 'spec.sourceIP: Invalid value: "127.32.10.1": outside every range of SourceIPClass' in \
        err.value.status.message
    # Classes never share an address (each counts its own capacity), whoever asks: the other is named.
    with pytest.raises(ApiError) as err:
        await admin.create(ClassRes.from_dict({"metadata": {"name": "gold"}, "spec": {
            "ranges": [{"start": "127.32.8.1", "end": "127.32.8.9"}, {"start": "127.32.9.5", "end": "127.32.9.20"}],
            "allowedNamespaces": ["default"]}}))
    assert err.value.status.code == 422
    assert err.value.status.message.endswith(  # (the webhook path prefixes whose webhook denied it)
        'SourceIPClass.egress.isthmus.io "gold" is invalid: spec.ranges[1]: Invalid value: '
        '"127.32.9.5-127.32.9.20": overlaps SourceIPClass "lab" (127.32.9.1-127.32.9.9): an address can '
        "belong to one class only"), err.value.status.message
    await admin.create(ClassRes.from_dict({"metadata": {"name": "gold"}, "spec": {
        "ranges": [{"start": "127.32.8.1", "end": "127.32.8.9"}], "allowedNamespaces": ["default"]}}))
    with pytest.raises(ApiError) as err:  # nor by growing into another class later
        await admin.patch(ClassRes, "gold", {"spec": {"ranges": [{"start": "127.32.8.1", "end": "127.32.9.1"}]}},
                          patch_type=PatchType.MERGE)
    assert 'spec.ranges[0]: Invalid value: "127.32.8.1-127.32.9.1": overlaps SourceIPClass "lab"' in \
        err.value.status.message
    await admin.patch(ClassRes, "gold", {"spec": {"allowedNamespaces": ["default", "team-b"]}},
                      patch_type=PatchType.MERGE)
    with pytest.raises(ApiError) as err:
        await admin.create(SipRes.from_dict({"metadata": {"name": "chosen"}, "spec": {
            "sourceIP": "127.32.9.4", "sourceIPClassName": "lab"}}))
    assert "a SourceIP is named by its address" in err.value.status.message
    # The author may name a Service of another namespace only if it may get it there.
    dev = await as_developer(srv, admin, tmp)
    try:
        with pytest.raises(ApiError) as err:
            await dev.create(es("cross", [{"service": {"name": "db", "namespace": "team-b"},
                                           "sourceIPClaimName": "mine"}]))
        assert "spec.sources[0].service: Forbidden: you cannot get Service team-b/db" in err.value.status.message
        await dev.create(es("own", [{"service": {"name": "app"}, "sourceIPClaimName": "mine"}]))
    finally:
        await dev.close()
    await admin.create(es("admin-cross", [{"service": {"name": "db", "namespace": "team-b"},
                                           "sourceIPClaimName": "mine"}]))


@pytest.fixture
async def plugin_server(tmp_path: Path) -> AsyncIterator[RunningApiServer]:
    srv = RunningApiServer(tmp_path / "apiserver", admission=admission_plugins.build([]))
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


async def test_the_in_process_plugin(plugin_server: RunningApiServer, tmp_path: Path) -> None:
    await scenarios(plugin_server, plugin_server.client(), tmp_path)


async def test_the_webhook_through_the_apiserver(tmp_path: Path) -> None:
    srv = RunningApiServer(tmp_path / "apiserver", admission=admission_plugins.build([admission_plugins.EGRESS]))
    await srv.start()
    admin = srv.client()
    lookups = srv.client()
    certs = self_signed(["127.0.0.1"])
    server = WebhookServer(webhook_handlers(lookups))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c").write_bytes(certs.cert)
        (Path(tmp) / "k").write_bytes(certs.key)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(f"{tmp}/c", f"{tmp}/k")
        await server.start("127.0.0.1", 0, ctx)
    try:
        import base64

        await admin.create(ValidatingWebhookConfiguration.from_dict({"metadata": {"name": "isthmus-lb"}, "webhooks": [{
            "name": "egress.validate.isthmus.io", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail", "timeoutSeconds": 5,
            "clientConfig": {"url": f"https://127.0.0.1:{server.port}{VALIDATE_PATH}",
                             "caBundle": base64.b64encode(certs.ca).decode()},
            "rules": [{"apiGroups": ["egress.isthmus.io"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE", "UPDATE"],
                       "resources": ["externalservices", "sourceipclaims", "sourceipclasses", "sourceips"]}]}]}))
        await scenarios(srv, admin, tmp_path)
    finally:
        await server.stop()
        await srv.close()


async def test_the_examples_are_accepted(plugin_server: RunningApiServer) -> None:
    """Every object of examples/egress goes through admission as written (in dependency order)."""
    from lightkube.codecs import from_dict

    client = plugin_server.client()
    await helpers.install_crds(client)
    await client.create(ClassRes.from_dict({"metadata": {"name": "isthmus-local"}, "spec": {
        "ranges": [{"start": "127.32.1.1", "end": "127.32.1.254"}], "allowedNamespaces": ["default"]}}))
    root = Path(__file__).parents[2] / "examples" / "egress"
    for name in ("seed-examples.yaml", "apps.yaml", "claims.yaml", "externalservice.yaml"):
        for doc in yaml.safe_load_all((root / name).read_text()):
            if doc["kind"] not in ("Namespace", "SourceIPClass"):
                doc["metadata"].setdefault("namespace", "default")
            await client.create(from_dict(doc))
