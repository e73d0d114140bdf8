"""The few network probes diagnose makes besides API requests, each bounded by a short timeout:
a raw GET on the API server (for /version and its Date header), one DNS question over UDP, and a
TCP connect. Callers decide which addresses are probed; nothing here picks one."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx2
from dnslib import QTYPE, DNSRecord
from lightkube import AsyncClient

from isthmus.kube.helpers import describe_error


@dataclass(frozen=True)
class ApiProbe:
    version: str
    """gitVersion of /version."""
    skew: float | None
    """Server clock minus this machine's (seconds; its Date header has a one-second resolution),
    None without a Date header."""
    elapsed: float


async def probe_api(client: AsyncClient) -> ApiProbe:
    """GET /version through the client's own transport (its credentials and TLS settings)."""
    inner: httpx2.AsyncClient = client._client._client  # lightkube internals: its httpx client
    started = time.time()
    resp = await inner.get("/version")
    ended = time.time()
    resp.raise_for_status()
    body: Any = resp.json()
    version = str(body.get("gitVersion", "?")) if isinstance(body, dict) else "?"
    skew = None
    date = resp.headers.get("date")
    if date:
        with contextlib.suppress(TypeError, ValueError):
            server = parsedate_to_datetime(date).timestamp()
            # The header is truncated to whole seconds: compare with the request's midpoint, +0.5 s.
            skew = server + 0.5 - (started + ended) / 2
    return ApiProbe(version, skew, ended - started)


async def raw_get(client: AsyncClient, path: str, params: dict[str, Any] | None = None) -> httpx2.Response:
    """A GET of any API path (pods/log with `previous`, which lightkube's log() lacks)."""
    inner: httpx2.AsyncClient = client._client._client
    return await inner.get(path, params=params)


class _OneAnswer(asyncio.DatagramProtocol):
    def __init__(self, query_id: int) -> None:
        self.query_id = query_id
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if not self.answer.done() and len(data) >= 2 and int.from_bytes(data[:2], "big") == self.query_id:
            self.answer.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.answer.done():
            self.answer.set_exception(exc)


async def dns_query(host: str, port: int, name: str, qtype: str = "A", timeout: float = 1.5) -> DNSRecord:  # noqa: ASYNC109
    """One question over UDP; raises TimeoutError when no answer comes within `timeout`."""
    query = DNSRecord.question(name, qtype)
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(lambda: _OneAnswer(query.header.id),
                                                              remote_addr=(host, port))
    try:
        transport.sendto(query.pack())
        async with asyncio.timeout(timeout):
            data = await protocol.answer
    finally:
        transport.close()
    return DNSRecord.parse(data)


def answer_addresses(record: DNSRecord) -> list[str]:
    return sorted(str(rr.rdata) for rr in record.rr if rr.rtype in (QTYPE.A, QTYPE.AAAA))


async def tcp_connect(host: str, port: int, timeout: float = 1.0) -> str | None:  # noqa: ASYNC109
    """None when a TCP connection opens within `timeout`, else why not."""
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return f"no answer within {timeout:g}s"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as err:
        return err.strerror or describe_error(err)
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return None


def utc_now() -> datetime:
    return datetime.now(UTC)
