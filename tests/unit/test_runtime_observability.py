"""Structured logging formats and the metrics/health server."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import aiohttp
import pytest

from isthmus.runtime import HealthServer, WorkQueue, parse_addr, setup_logging

pytestmark = pytest.mark.timeout(10)


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_json_logs_carry_extras_and_tracebacks(restore_root_logger: None) -> None:
    buf = io.StringIO()
    setup_logging("json", "debug", stream=buf)
    log = logging.getLogger("isthmus.test")
    log.debug("reconciled %s", "x", extra={"controller": "c1", "key": "ns/a"})
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        log.exception("failed")
    first, second = (json.loads(line) for line in buf.getvalue().splitlines())
    assert first["msg"] == "reconciled x" and first["level"] == "debug"
    assert first["controller"] == "c1" and first["key"] == "ns/a" and first["logger"] == "isthmus.test"
    assert first["ts"].endswith("Z")
    assert "ZeroDivisionError" in second["exc"]


def test_text_logs_and_levels(restore_root_logger: None) -> None:
    buf = io.StringIO()
    setup_logging("text", "warning", stream=buf)
    log = logging.getLogger("isthmus.test")
    log.info("hidden")
    log.warning("shown", extra={"key": "a b"})
    out = buf.getvalue()
    assert "hidden" not in out
    assert "WARNING isthmus.test: shown key='a b'" in out
    with pytest.raises(ValueError):
        setup_logging("yaml", "info")
    with pytest.raises(ValueError):
        setup_logging("json", "loud")


def test_parse_addr() -> None:
    assert parse_addr("127.0.0.1:9090") == ("127.0.0.1", 9090)
    assert parse_addr(":8080") == ("0.0.0.0", 8080)
    assert parse_addr("[::1]:80") == ("::1", 80)
    with pytest.raises(ValueError):
        parse_addr("localhost")


async def test_health_server_endpoints() -> None:
    srv = HealthServer()
    ready = {"informers": False}
    srv.add_readiness_check("informers-synced", lambda: ready["informers"])
    srv.add_liveness_check("loop", lambda: True)
    q = WorkQueue("t-metrics-queue")
    q.add("a")
    await srv.start("127.0.0.1:0")
    try:
        base = f"http://127.0.0.1:{srv.port}"
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/healthz") as r:
                assert r.status == 200
            async with s.get(f"{base}/readyz") as r:
                assert r.status == 503
                assert "[-]informers-synced failed" in await r.text()
            ready["informers"] = True
            async with s.get(f"{base}/readyz") as r:
                assert r.status == 200
            async with s.get(f"{base}/metrics") as r:
                body = await r.text()
                assert r.status == 200
                assert 'isthmus_workqueue_depth{name="t-metrics-queue"} 1.0' in body
                assert "process_resident_memory_bytes" in body
    finally:
        await srv.stop()
