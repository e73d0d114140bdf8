"""`isthmus controller-manager --use-service-account-credentials` against an apiserver enforcing the
RBAC of deploy/member: the manager's own account only asks for tokens, and each controller inside
works as its own ServiceAccount (kube-controller-manager's flag of the same name)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
import yaml
from lightkube import ApiError
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Secret, Service, ServiceAccount

from isthmus.kube.client import client_for, load_config
from isthmus.kube.helpers import install_crds
from isthmus.kube.manifests import apply, render
from isthmus.kube.tokens import ServiceAccountToken, request_token
from tests.harness.apiserver import RunningApiServer
from tests.harness.lb import lb_overlay
from tests.harness.polling import eventually
from tests.harness.ports import free_port

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

NS = "isthmus-system"
TOKEN = "admin-token"
ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


@pytest.fixture
async def installed(tmp_path: Path) -> AsyncIterator[RunningApiServer]:
    """An RBAC-enforcing apiserver with deploy/member applied (accounts, roles, CRDs; no pods run)."""
    run = RunningApiServer(tmp_path / "apiserver", token=TOKEN, tls=True)
    await run.start()
    admin = run.client()
    try:
        await asyncio.wait_for(install_crds(admin), 60)  # deploy/crds/*: deploy/member carries none
        # With load balancing opted in (deploy/components/lb): the manager runs the translator too.
        member = lb_overlay(tmp_path / "overlay")
        await asyncio.wait_for(apply(admin, render(member), field_manager="test"), 60)
        yield run
    finally:
        await run.close()


def kubeconfig_as(run: RunningApiServer, token: str, path: Path) -> Path:
    """The admin kubeconfig (server, CA) with `token` as its only credential."""
    doc = yaml.safe_load(Path(run.kubeconfig).read_text())
    for user in doc["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_each_controller_account_is_reached_only_through_the_managers_token_rights(
        installed: RunningApiServer) -> None:
    config = load_config(installed.kubeconfig)
    admin = client_for(config)
    manager_token = ServiceAccountToken(admin, NS, "isthmus-controller-manager")
    await manager_token.fetch()
    manager = client_for(config, auth=manager_token)
    lb_token = ServiceAccountToken(manager, NS, "isthmus-lb")
    await lb_token.fetch()
    assert lb_token.lifetime is not None and lb_token.lifetime.refresh_at > time.time() + 2000
    lb = client_for(config, auth=lb_token)
    try:
        # The translator's own rights, and no more.
        assert "kubernetes" in [s.metadata.name async for s in lb.list(Service, namespace="default")]
        with pytest.raises(ApiError) as denied:
            [s async for s in lb.list(Secret, namespace=NS)]
        assert denied.value.status.code == 403
        assert "system:serviceaccount:isthmus-system:isthmus-lb" in str(denied.value.status.message)
        # The manager itself can read nothing, and gets no token of an account not named in its role.
        with pytest.raises(ApiError) as denied:
            [s async for s in manager.list(Service, namespace="default")]
        assert denied.value.status.code == 403
        with pytest.raises(ApiError) as denied:
            await request_token(manager, NS, "isthmus-agent")
        assert denied.value.status.code == 403
        # The token is the account's: the apiserver's TokenReview says who it is.
        review = await admin.create(TokenReview.from_dict(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
             "spec": {"token": lb_token.bearer_header().removeprefix("Bearer ")}}))
        assert review.to_dict()["status"]["user"]["username"] == "system:serviceaccount:isthmus-system:isthmus-lb"
    finally:
        for c in (lb, manager, admin):
            await c.close()


@contextlib.asynccontextmanager
async def manager_process(kubeconfig: Path, *args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str, Path]]:
    port = free_port()
    log = kubeconfig.parent / "manager.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "POD_NAMESPACE": NS}
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "isthmus", "controller-manager", "--kubeconfig", str(kubeconfig),
            "--metrics-addr", f"127.0.0.1:{port}", "--identity", "manager-0", *args,
            stdout=out, stderr=asyncio.subprocess.STDOUT, env=env)
    try:
        yield proc, f"http://127.0.0.1:{port}", log
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def status_of(url: str) -> int:
    try:
        async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
            return r.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def test_the_manager_runs_its_controllers_as_their_accounts_and_hands_their_leases_back(
        installed: RunningApiServer, tmp_path: Path) -> None:
    config = load_config(installed.kubeconfig)
    admin = client_for(config)
    try:
        token, _ = await request_token(admin, NS, "isthmus-controller-manager")
        kubeconfig = kubeconfig_as(installed, token, tmp_path / "manager.yaml")
        async with manager_process(kubeconfig, "--controllers=*,-mcsvc", "--use-service-account-credentials",
                                   "--cluster-name", "c1") as (proc, base, log):

            async def leading() -> bool:
                holders = []
                for name in ("isthmus-lb", "isthmus-egress-operator"):
                    try:
                        holders.append((await admin.get(Lease, name, namespace=NS)).spec.holderIdentity)
                    except ApiError:
                        return False
                return holders == ["manager-0", "manager-0"]

            # The manager's own account may not write Leases: held Leases were written by the
            # controllers' accounts.
            await eventually(leading, what=f"both controllers lead ({log.read_text()[-2000:]})")
            assert await eventually(lambda: _ok(base + "/readyz"), what="ready") == 200
            with pytest.raises(ApiError):  # left out: never ran
                await admin.get(Lease, "isthmus-mcsvc", namespace=NS)
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
        for name in ("isthmus-lb", "isthmus-egress-operator"):
            assert (await admin.get(Lease, name, namespace=NS)).spec.holderIdentity is None
    finally:
        await admin.close()


async def _ok(url: str) -> int:
    return 200 if await status_of(url) == 200 else 0


async def test_a_manager_without_token_rights_stays_alive_not_ready_and_says_why(
        installed: RunningApiServer, tmp_path: Path) -> None:
    config = load_config(installed.kubeconfig)
    admin = client_for(config)
    try:
        await admin.create(ServiceAccount.from_dict({"metadata": {"name": "nobody", "namespace": NS}}))
        token, _ = await request_token(admin, NS, "nobody")
        kubeconfig = kubeconfig_as(installed, token, tmp_path / "nobody.yaml")
        async with manager_process(kubeconfig, "--controllers=lb", "--use-service-account-credentials",
                                   "--cluster-name", "c1") as (proc, base, log):
            await eventually(lambda: _ok(base + "/healthz"), what="alive")

            async def said() -> bool:
                return "cannot get a token for system:serviceaccount:isthmus-system:isthmus-lb" in log.read_text()

            await eventually(said, what="the reason in the log")
            assert await status_of(base + "/readyz") != 200
            assert proc.returncode is None
    finally:
        await admin.close()


async def test_bad_flags_exit_2_with_the_reason(tmp_path: Path) -> None:
    for args, message in ((["--controllers", "lb,dns"], "unknown controller dns"),
                          (["--controllers", "lb,-lb"], "leaves no controller"),
                          (["--controllers", "lb"], "--cluster-name is needed by the lb controller")):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "isthmus", "controller-manager", *args, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        out, _ = await proc.communicate()
        assert proc.returncode == 2 and message in out.decode(), (args, out)


async def test_up_removes_the_deployments_the_controller_manager_replaced(installed: RunningApiServer) -> None:
    """A state dir made by an older version holds isthmus-lb, isthmus-mcsvc and isthmus-egress-operator
    Deployments; `up` applies this version's manifests (which only add) and then deletes those."""
    from lightkube.resources.apps_v1 import Deployment

    from isthmus.local import components, plan

    config = load_config(installed.kubeconfig)
    admin = client_for(config)
    try:
        template = {"metadata": {"labels": {"app": "old"}},
                    "spec": {"containers": [{"name": "c", "image": "isthmus"}]}}
        for name in ("isthmus-lb", "isthmus-egress-operator"):
            await admin.create(Deployment.from_dict({
                "metadata": {"name": name, "namespace": NS},
                "spec": {"selector": {"matchLabels": {"app": "old"}}, "template": template}}))
        assert await components.remove_superseded(Path(installed.kubeconfig)) == ["isthmus-lb",
                                                                                  "isthmus-egress-operator"]
        names = {d.metadata.name async for d in admin.list(Deployment, namespace=NS)}
        assert not names & set(plan.SUPERSEDED_DEPLOYMENTS)
        assert plan.DEPLOYMENTS[plan.CONTROLLER_MANAGER] in names  # this version's own stay
        assert await components.remove_superseded(Path(installed.kubeconfig)) == []  # nothing left: no-op
    finally:
        await admin.close()
