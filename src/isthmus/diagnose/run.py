"""One diagnosis: probe every context at once (API, clock, membership), read the broker once,
then run every context's checks concurrently, each bounded by `CHECK_TIMEOUT`, so an unreachable
cluster costs a few seconds and never holds up the others. `diagnose_until` repeats it until
everything passes (`--wait`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx2
from lightkube import ALL_NS, ApiError, AsyncClient
from lightkube.config.kubeconfig import SingleConfig
from lightkube.resources.core_v1 import Node

from isthmus.api.mcs import BROKER_NAME, Broker, Cluster
from isthmus.clusterset.brokerinfo import as_seen_from, reaches_broker
from isthmus.clusterset.control import ClustersetError, get_if_kind, list_if_kind
from isthmus.clusterset.membership import membership
from isthmus.diagnose import checks as c
from isthmus.diagnose.model import Check, Diagnosis, Status, TargetReport, failed
from isthmus.diagnose.net import probe_api, raw_get, utc_now
from isthmus.kube.client import client_for, context_names, load_config
from isthmus.kube.helpers import describe_error, list_all

REQUEST_TIMEOUT = httpx2.Timeout(4.0, connect=3.0)
PROBE_TIMEOUT = 6.0
"""The first requests to a context (version, membership, broker objects, CIDRs)."""
CHECK_TIMEOUT = 8.0
"""One check (a few requests, DNS questions, up to 64 VIP connects in parallel)."""


@dataclass(frozen=True)
class ContextRef:
    name: str
    config: SingleConfig


def select_contexts(kubeconfig: str | None, contexts: list[str] | None) -> list[ContextRef]:
    """The named contexts, else every context of the kubeconfig. Raises KubeConfigError (a user
    error) for an unreadable kubeconfig or an unknown context."""
    names = list(dict.fromkeys(contexts or context_names(kubeconfig)))
    if not names:  # in a pod: its own cluster, through the in-cluster account
        config = load_config(kubeconfig, None)
        return [ContextRef(config.context_name or "in-cluster", config)]
    return [ContextRef(n, load_config(kubeconfig, n)) for n in names]


def _error(err: BaseException) -> str:
    if isinstance(err, ApiError) and err.status is not None:
        return f"{err.status.code} {err.status.reason or ''}: {err.status.message}".replace("  ", " ")
    if isinstance(err, TimeoutError):
        return "no answer in time"
    return describe_error(err)


async def _probe(t: c.Target) -> None:
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            t.api = await probe_api(t.client)
    except Exception as err:
        t.api_error = _error(err)
        return
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            try:
                t.cluster_id, t.broker_info = await membership(t.client)
            except (ClustersetError, ApiError) as err:
                t.membership_error = str(err) if isinstance(err, ClustersetError) else _error(err)
            with contextlib.suppress(ApiError):  # a member's own credentials may not list Brokers
                brokers = await list_if_kind(t.client, Broker, ALL_NS)
                t.broker_namespaces = sorted({b.namespace for b in brokers if b.namespace})
            if t.cluster_id is not None:
                await _read_cidrs(t)
    except Exception as err:
        t.membership_error = t.membership_error or _error(err)


async def _read_cidrs(t: c.Target) -> None:
    """The ranges a cluster's API publishes: Nodes' pod CIDRs, ServiceCIDR objects (Kubernetes
    1.33+; absent elsewhere, and then unknown)."""
    with contextlib.suppress(ApiError):
        for node in await list_all(t.client, Node):
            spec = node.spec
            cidrs = (spec.podCIDRs or ([spec.podCIDR] if spec.podCIDR else [])) if spec is not None else []
            t.cidrs += [("pod", cidr) for cidr in cidrs]
    with contextlib.suppress(Exception):
        resp = await raw_get(t.client, "/apis/networking.k8s.io/v1/servicecidrs")
        if resp.status_code == 200:
            for item in resp.json().get("items") or []:
                for cidr in (item.get("spec") or {}).get("cidrs") or []:
                    t.cidrs.append(("service", cidr))


async def _read_broker(targets: list[c.Target]) -> tuple[c.BrokerView | None, AsyncClient | None]:
    """The broker the members joined (the first member's broker-info), read with a broker context's
    credentials when the kubeconfig has one, else with the member's own; or, with no member, the
    first broker context. Returns the client diagnose opened itself (to close)."""
    member = next((t for t in targets if t.broker_info is not None), None)
    own: AsyncClient | None = None
    if member is not None and member.broker_info is not None:
        info = member.broker_info
        target = next((t for t in targets if info.namespace in t.broker_namespaces and reaches_broker(t.config, info)),
                      None)
        if target is not None:
            view = c.BrokerView(info.namespace, info.server, target.context,
                                skew=target.api.skew if target.api else None, via_file=target.config.fname)
            client = target.client
        else:
            view = c.BrokerView(info.namespace, info.server, f"broker-info of {member.context}")
            client = own = as_seen_from(info, [t.config for t in targets]).client(timeout=REQUEST_TIMEOUT)
    else:
        target = next((t for t in targets if t.broker_namespaces), None)
        if target is None:
            return None, None
        view = c.BrokerView(target.broker_namespaces[0], target.server, target.context,
                            skew=target.api.skew if target.api else None, via_file=target.config.fname)
        client = target.client
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            if own is not None:
                with contextlib.suppress(Exception):
                    view.skew = (await probe_api(client)).skew
            view.broker = await get_if_kind(client, Broker, BROKER_NAME, view.namespace)
            view.clusters = {cl.name: cl for cl in await list_all(client, Cluster, namespace=view.namespace)}
    except Exception as err:
        view.error = _error(err)
    return view, own


Step = Callable[[c.Target, c.Env], Check | Awaitable[Check]]


def _steps(t: c.Target) -> list[tuple[str, Step]]:
    """Which checks a context gets, in print order."""
    steps: list[tuple[str, Step]] = [("clock", c.check_clock), ("crds", c.check_crds)]
    if t.cluster_id is not None:
        steps += [("join", c.check_join), ("about", c.check_about), ("heartbeat", c.check_heartbeat),
                  ("agent", c.check_agent), ("dns", c.check_dns), ("vips", c.check_vips),
                  ("exports", c.check_exports)]
    if t.broker_namespaces:
        steps.append(("broker", c.check_broker))
    steps += [("components", c.check_components), ("pools", c.check_pools),
              ("multiclusterservices", c.check_mcs), ("egress", c.check_egress)]
    return steps


async def _run_step(name: str, step: Step, t: c.Target, env: c.Env) -> Check:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            result = step(t, env)
            return await result if isinstance(result, Awaitable) else result
    except TimeoutError:
        return failed(name, f"no result within {CHECK_TIMEOUT:g}s (the API server or a probe is too slow)",
                      env.kubectl(t, "get", "--raw", "/readyz?verbose"))
    except Exception as err:
        return failed(name, f"could not check: {_error(err)}", env.kubectl(t, "auth", "can-i", "--list"))


async def _check_target(t: c.Target, env: c.Env) -> TargetReport:
    report = TargetReport(t.context, t.context, t.server, t.roles, t.cluster_id, [c.check_api(t, env)])
    if t.api is None:
        report.checks.append(Check("others", Status.SKIP, "not run: the API server is unreachable"))
        return report
    if not t.roles:
        if t.explicit:
            report.checks += [c.check_clock(t, env), c.check_join(t, env)]
        else:
            report.checks.append(Check("clusterset", Status.SKIP,
                                       f"not part of a clusterset ({t.membership_error or 'no Broker'}): not checked"))
        return report
    report.checks += await asyncio.gather(*(_run_step(name, step, t, env) for name, step in _steps(t)))
    return report


def _order(t: c.Target) -> tuple[int, str]:
    return (0 if t.broker_namespaces else 1 if t.cluster_id else 2, t.context)


async def diagnose(refs: list[ContextRef], *, kubeconfig: str | None, explicit: bool) -> Diagnosis:
    """Check every context of `refs` (see the module docstring). `explicit`: the user named them."""
    targets = [c.Target(r.name, r.config, client_for(r.config, timeout=REQUEST_TIMEOUT), explicit) for r in refs]
    own: AsyncClient | None = None
    try:
        await asyncio.gather(*(_probe(t) for t in targets))
        broker, own = await _read_broker(targets)
        env = c.Env(kubeconfig, broker, utc_now())
        targets.sort(key=_order)
        reports = list(await asyncio.gather(*(_check_target(t, env) for t in targets)))
        if broker is not None or not explicit:
            reports.append(TargetReport("clusterset", None, broker.server if broker else None, [], None,
                                        [c.check_members(targets, env), c.check_cidrs(targets, env)]))
        return Diagnosis(env.now, reports)
    finally:
        for client in [*(t.client for t in targets), *([own] if own else [])]:
            with contextlib.suppress(Exception):
                await client.close()


async def diagnose_until(
    refs: list[ContextRef], *, kubeconfig: str | None, explicit: bool, timeout: float,  # noqa: ASYNC109
    interval: float = 2.0, on_round: Callable[[Diagnosis], None] | None = None,
) -> Diagnosis:
    """Diagnose again every `interval` seconds until nothing fails or `timeout` has passed; the
    last diagnosis is returned either way."""
    deadline = time.monotonic() + timeout
    while True:
        result = await diagnose(refs, kubeconfig=kubeconfig, explicit=explicit)
        if result.ok or time.monotonic() + interval >= deadline:
            return result
        if on_round is not None:
            on_round(result)
        await asyncio.sleep(interval)
