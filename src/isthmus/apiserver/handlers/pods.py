"""The Pod subresources a node serves: ``log``, ``exec``, ``attach``, ``portforward``.

As kube-apiserver (pkg/registry/core/pod/rest/log.go, subresources.go, strategy.go's
LogLocation/streamLocation): the apiserver keeps no logs and runs no processes; it finds the
Pod's node (``spec.nodeName`` → the Node object → its address and
``status.daemonEndpoints.kubeletEndpoint.port``) and proxies the request to that node's kubelet
(in the local clusterset: kube-lite's kubelet endpoint, local/kubelite/kubelet.py).

- ``log`` (GET): the options are validated (422 as kube), the container is defaulted when the Pod
  has one (else 400 naming the choices), a Pod without a node has an empty log; the kubelet's
  answer is streamed (``follow``), its errors turned into Status as kube's response checker does
  (``the server could not find the requested resource ( pods/log x)`` for its 404).
- ``exec``, ``attach`` (GET, POST), ``portforward`` (GET, POST): 400 ``pod x does not have a
  host assigned`` without a node, 400 ``Upgrade request required`` without an upgrade request;
  a WebSocket upgrade the kubelet accepts (kube-lite in runc mode: ``v5.channel.k8s.io``, what
  kubectl 1.30+ asks for) is relayed message by message; otherwise the kubelet's answer is passed
  on as kube's upgrade-aware proxy passes on an answer that is not an upgrade (kube-lite's kubelet
  refuses with a Status saying why). A node that cannot be reached is a 500 ``error dialing
  backend: ...``, as in kube.

Simplified: kubelets are reached over plain HTTP on loopback addresses only (this apiserver
never sends its credentials elsewhere; a runc-mode node's fabric address stands for its kube-lite
on this machine's loopback), with the apiserver's own bearer token; SPDY upgrades are not spliced.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.handlers.common import HandlerContext

__all__ = ["NODE_SUBRESOURCES", "is_node_subresource", "serve"]

Obj = dict[str, Any]

NODE_SUBRESOURCES = frozenset({"log", "exec", "attach", "portforward"})
PREFERRED_ADDRESS_TYPES = ("InternalIP", "Hostname", "InternalDNS", "ExternalIP", "ExternalDNS")
"""kube-apiserver's --kubelet-preferred-address-types, InternalIP first: node names do not resolve here."""
LOG_PARAMS = ("container", "follow", "previous", "sinceSeconds", "sinceTime", "timestamps", "tailLines",
              "limitBytes", "insecureSkipTLSVerifyBackend")
CONNECT_TIMEOUT = 5.0
CLIENT_CHECK_SECONDS = 1.0
MAX_ERROR_BODY = 50_000  # kube's maxReadLength for a kubelet's error body


def is_node_subresource(group: str, version: str, rest: list[str]) -> bool:
    """Whether ``rest`` (the path after /api/v1) is namespaces/<ns>/pods/<name>/<one of ours>."""
    return (group == "" and version == "v1" and len(rest) == 5 and rest[0] == "namespaces"
            and rest[2] == "pods" and rest[4] in NODE_SUBRESOURCES)


async def serve(ctx: HandlerContext, request: web.Request, rest: list[str], *,
                kubelet_token: str | None) -> web.StreamResponse:
    ns, name, sub = rest[1], rest[3], rest[4]
    if sub == "log":
        if request.method != "GET":
            raise errors.method_not_allowed()
        return await _log(ctx, request, ns, name, kubelet_token)
    if request.method not in ("GET", "POST"):
        raise errors.method_not_allowed()
    return await _connect(ctx, request, ns, name, sub, kubelet_token)


# ------------------------------------------------------------------------------------------ helpers


def _pod(ctx: HandlerContext, ns: str, name: str) -> Obj:
    pod = ctx.storage.get("/pods", ns, name)
    if pod is None:
        raise errors.not_found("", "pods", name)
    return pod


def _container(pod: Obj, name: str, asked: str | None, *, streaming: bool) -> str:
    """The container a request is for, as kube's validateContainer / streamLocation choose it."""
    spec = pod.get("spec") or {}
    containers = [str(c.get("name")) for c in spec.get("containers") or []]
    inits = [str(c.get("name")) for c in spec.get("initContainers") or []]
    ephemeral = [str(c.get("name")) for c in spec.get("ephemeralContainers") or []]
    if not asked:
        if len(containers) == 1:
            return containers[0]
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        if streaming:
            msg = f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
            if inits:
                msg += f" or one of the init containers: [{' '.join(inits)}]"
        else:
            msg = f"a container name must be specified for pod {name}, choose one of: [{' '.join(inits + containers + ephemeral)}]"
        raise errors.bad_request(msg)
    if asked not in containers + inits + ephemeral:
        raise errors.bad_request(f"container {asked} is not valid for pod {name}")
    return asked


def _kubelet(ctx: HandlerContext, node_name: str) -> tuple[str, int]:
    """(host, port) of the node's kubelet, as kube's NodeConnectionInfoGetter finds them."""
    node = ctx.storage.get("/nodes", "", node_name)
    if node is None:
        raise errors.not_found("", "nodes", node_name)
    status = node.get("status") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or [] if a.get("address")}
    host = next((addresses[t] for t in PREFERRED_ADDRESS_TYPES if t in addresses), None)
    if host is None:
        known = " ".join(f"{{{a.get('type')} {a.get('address')}}}" for a in status.get("addresses") or [])
        raise _unknown(500, f"no preferred addresses found; known addresses: [{known}]")
    port = int(((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 0)
    if port <= 0:
        raise _unknown(500, f"error dialing backend: node {node_name} publishes no kubelet port "
                            "(status.daemonEndpoints.kubeletEndpoint.Port)")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        if _on_this_machine(host):
            # A runc-mode node: its InternalIP lives in the node's own network namespace, its
            # kubelet endpoint (kube-lite, in the host's) on this machine's loopback.
            return "127.0.0.1", port
        raise _unknown(500, f"error dialing backend: node {node_name}'s address {host} is not a loopback "
                            "address: this apiserver reaches kubelets on this machine only")
    return host, port


def _on_this_machine(host: str) -> bool:
    """A node address of the local clusterset's runc mode (10.255.0.0/16, the fabric, node k of a
    cluster on its k-th /24: see local/network/plan.py), whose kubelet is a kube-lite of this machine."""
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network("10.255.0.0/16")
    except ValueError:
        return False


def _unknown(code: int, message: str) -> ApiError:
    """A Status without a reason: what kube answers for an error that is not an API status."""
    return ApiError(code, "", message)


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        trust_env=False,  # proxy variables must never route a loopback kubelet
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT),
    )


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _checked(code: int, body: str, name: str) -> ApiError:
    """kube's GenericHttpResponseChecker for pods/log: a kubelet's error answer as a Status."""
    if code == 500:
        return errors.internal(body)
    if code == 400:
        return errors.bad_request(body)
    reason, message = {
        404: ("NotFound", "the server could not find the requested resource"),
        401: ("Unauthorized", "the server has asked for the client to provide credentials"),
        403: ("Forbidden", body),
        405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
        422: ("Invalid", "the server rejected our request due to an error in our request"),
        503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    }.get(code, ("", f"the server responded with the status code {code} but did not return more information"))
    if not reason and code > 500:
        reason, message = "InternalError", f"an error on the server ({errors.go_quote(body)}) has prevented the request from succeeding"
    return ApiError(code, reason, f"{message} ( pods/log {name})", {"kind": "pods/log", "name": name})


# ------------------------------------------------------------------------------------------ log


def _log_options(q: Any, name: str) -> None:
    """Decoding (400) and ValidatePodLogOptions (422), before the Pod is looked at, as kube."""
    values: dict[str, int] = {}
    for key in ("sinceSeconds", "tailLines", "limitBytes"):
        raw = q.get(key)
        if raw in (None, ""):
            continue
        try:
            values[key] = int(raw)
        except ValueError:
            raise errors.bad_request(f'strconv.ParseInt: parsing {errors.go_quote(raw)}: invalid syntax') from None
    for key in ("follow", "previous", "timestamps", "insecureSkipTLSVerifyBackend"):
        raw = q.get(key)
        if raw not in (None, "") and raw.lower() not in ("true", "false", "1", "0", "t", "f"):
            raise errors.bad_request(f'strconv.ParseBool: parsing {errors.go_quote(raw)}: invalid syntax')
    causes = []
    if values.get("tailLines", 0) < 0:
        causes.append(errors.cause("tailLines", f"Invalid value: {values['tailLines']}: must be greater than or equal to 0"))
    if "limitBytes" in values and values["limitBytes"] < 1:
        causes.append(errors.cause("limitBytes", f"Invalid value: {values['limitBytes']}: must be greater than 0"))
    if "sinceSeconds" in values and q.get("sinceTime"):
        causes.append(errors.cause("", "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
                                   "FieldValueForbidden"))
    elif "sinceSeconds" in values and values["sinceSeconds"] < 1:
        causes.append(errors.cause("sinceSeconds", f"Invalid value: {values['sinceSeconds']}: must be greater than 0"))
    if causes:
        raise errors.invalid("", "PodLogOptions", name, causes)


async def _log(ctx: HandlerContext, request: web.Request, ns: str, name: str,
               token: str | None) -> web.StreamResponse:
    q = request.query
    _log_options(q, name)
    pod = _pod(ctx, ns, name)
    container = _container(pod, name, q.get("container"), streaming=False)
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:  # kube: no location, an empty log
        return web.Response(status=200, content_type="text/plain", body=b"")
    host, port = _kubelet(ctx, node)
    params = {k: q[k] for k in LOG_PARAMS if k in q and k not in ("container", "insecureSkipTLSVerifyBackend")}
    url = (f"http://{_hostport(host, port)}/containerLogs/{quote(ns, safe='')}/{quote(name, safe='')}/"
           f"{quote(container, safe='')}" + (f"?{urlencode(params)}" if params else ""))
    async with _session() as session:
        try:
            upstream = await session.get(url, headers=_headers(token))
        except (aiohttp.ClientError, OSError) as e:
            raise _unknown(500, f'Get "{url}": {_dial_error(host, port, e)}') from None
        async with upstream:
            if not 200 <= upstream.status <= 206:
                body = (await upstream.content.read(MAX_ERROR_BODY)).decode("utf-8", "replace")
                raise _checked(upstream.status, body, name)
            resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            with contextlib.suppress(aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                while True:
                    try:
                        async with asyncio.timeout(CLIENT_CHECK_SECONDS):
                            chunk = await upstream.content.readany()
                    except TimeoutError:
                        # A followed log may stay silent: aiohttp does not cancel a handler whose
                        # client left, so look at the connection now and then (and drop the node's).
                        if request.transport is None or request.transport.is_closing():
                            return resp
                        continue
                    if not chunk:
                        break
                    await resp.write(chunk)  # the client gone: ConnectionResetError ends the request
            await resp.write_eof()
            return resp


def _dial_error(host: str, port: int, e: BaseException) -> str:
    """Go's wording for a failed dial, which kubectl users know: dial tcp H:P: connect: connection refused."""
    os_error = getattr(e, "os_error", None) or (e if isinstance(e, OSError) else None)
    errno_ = getattr(os_error, "errno", None)
    why = os.strerror(errno_).lower() if errno_ else str(os_error or e)
    return f"dial tcp {_hostport(host, port)}: connect: {why}"


# ------------------------------------------------------------------------------------------ exec, attach, portforward


async def _websocket(request: web.Request, url: str, token: str | None) -> web.StreamResponse | None:
    """A WebSocket upgrade (kubectl 1.30+: v5.channel.k8s.io) the kubelet accepts: both sides'
    messages relayed as they come, in the subprotocol the kubelet chose. None when the kubelet
    does not upgrade (its answer is then passed on as for any other request)."""
    protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    session = _session()
    try:
        upstream = await session.ws_connect(url, protocols=protocols, headers=_headers(token), max_msg_size=0,
                                            autoping=True)
    except (aiohttp.ClientError, OSError):
        await session.close()
        return None
    try:
        client = web.WebSocketResponse(protocols=[upstream.protocol] if upstream.protocol else (), max_msg_size=0)
        await client.prepare(request)

        async def pipe(src: Any, dst: Any) -> None:
            async for msg in src:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    await dst.send_bytes(msg.data)
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    await dst.send_str(msg.data)
                else:
                    break

        tasks = [asyncio.create_task(pipe(client, upstream)), asyncio.create_task(pipe(upstream, client))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        with contextlib.suppress(Exception):
            await client.close()
        return client
    finally:
        with contextlib.suppress(Exception):
            await upstream.close()
        await session.close()


def _is_upgrade(request: web.Request) -> bool:
    """httpstream.IsUpgradeRequest: a Connection header naming Upgrade."""
    return any("upgrade" in v.lower() for v in request.headers.getall("Connection", []))


async def _connect(ctx: HandlerContext, request: web.Request, ns: str, name: str, sub: str,
                   token: str | None) -> web.StreamResponse:
    pod = _pod(ctx, ns, name)
    q = request.query
    if sub == "portforward":
        path = f"portForward/{quote(ns, safe='')}/{quote(name, safe='')}"
    else:
        container = _container(pod, name, q.get("container"), streaming=True)
        path = f"{sub}/{quote(ns, safe='')}/{quote(name, safe='')}/{quote(container, safe='')}"
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    host, port = _kubelet(ctx, node)
    if not _is_upgrade(request):
        raise errors.bad_request("Upgrade request required")
    params = [(k, v) for k, v in q.items() if k != "container"]
    url = f"http://{_hostport(host, port)}/{path}" + (f"?{urlencode(params)}" if params else "")
    if request.headers.get("Upgrade", "").lower() == "websocket":
        relayed = await _websocket(request, url, token)
        if relayed is not None:
            return relayed
    async with _session() as session:
        try:
            upstream = await session.request(request.method, url, headers=_headers(token))
        except (aiohttp.ClientError, OSError) as e:
            raise _unknown(500, f"error dialing backend: {_dial_error(host, port, e)}") from None
        async with upstream:
            body = await upstream.content.read(MAX_ERROR_BODY)
            if upstream.status == 101 or 200 <= upstream.status < 300:
                # Only a kubelet that upgrades would say so; splicing streams is not implemented.
                raise _unknown(500, f"error dialing backend: node {node}'s kubelet accepted an upgrade "
                                    "this apiserver cannot proxy")
            ctype = upstream.headers.get("Content-Type", "text/plain")
            return web.Response(status=upstream.status, body=body, headers={"Content-Type": ctype})
