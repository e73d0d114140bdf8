"""The apiserver's HTTP/1.1 connections on the wire: plain requests on the lean protocol, the rest
handed to aiohttp mid-connection, and the corner cases of both (httpserver.py)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from isthmus.apiserver import httpserver
from tests.harness.apiserver import RunningApiServer

CM_PATH = "/api/v1/namespaces/default/configmaps"
_DATE = re.compile(rb"\r\nDate: [^\r]+")


def _cm(name: str) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                       "data": {"k": "v"}}).encode()


def _post(name: str, extra: str = "") -> bytes:
    body = _cm(name)
    return (f"POST {CM_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _get(path: str, extra: str = "", method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


async def _head(r: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    raw = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
    lines = raw.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), headers


async def _answer(r: asyncio.StreamReader, head_only: bool = False) -> Answer:
    status, headers = await _head(r)
    if head_only:
        return Answer(status, headers, b"")
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int((await r.readuntil(b"\r\n")).strip(), 16)
            chunk = await r.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
        return Answer(status, headers, body)
    return Answer(status, headers, await asyncio.wait_for(r.readexactly(int(headers.get("content-length", 0))), 10))


async def _conn(srv: RunningApiServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", srv.server.port)


async def _closed(r: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(r.read(1), 10) == b""


async def test_pipelined_requests_are_answered_in_order(apiserver: RunningApiServer) -> None:
    r, w = await _conn(apiserver)
    w.write(_post("one") + _get(f"{CM_PATH}/one") + _post("two") + _get(f"{CM_PATH}/missing") + _get(CM_PATH))
    answers = [await _answer(r) for _ in range(5)]
    assert [a.status for a in answers] == [201, 200, 201, 404, 200]
    assert answers[1].json()["metadata"]["name"] == "one"
    assert [i["metadata"]["name"] for i in answers[4].json()["items"]] == ["one", "two"]
    w.close()


async def test_a_request_arriving_a_byte_at_a_time(apiserver: RunningApiServer) -> None:
    r, w = await _conn(apiserver)
    for b in _post("slow"):
        w.write(bytes([b]))
        await w.drain()
    a = await _answer(r)
    assert (a.status, a.json()["metadata"]["name"]) == (201, "slow")
    w.close()


async def test_a_watch_after_plain_requests_on_one_connection(apiserver: RunningApiServer) -> None:
    """client-go reuses an idle keep-alive connection for a watch: the connection moves to aiohttp
    with the watch's bytes, and streams."""
    r, w = await _conn(apiserver)
    w.write(_post("before"))
    created = await _answer(r)
    assert created.status == 201
    rv = created.json()["metadata"]["resourceVersion"]
    w.write(_get(f"{CM_PATH}?watch=1&resourceVersion={rv}"))
    status, headers = await _head(r)
    assert (status, headers["transfer-encoding"]) == (200, "chunked")
    r2, w2 = await _conn(apiserver)
    w2.write(_post("after"))
    assert (await _answer(r2)).status == 201
    size = int((await asyncio.wait_for(r.readuntil(b"\r\n"), 10)).strip(), 16)
    event = json.loads(await r.readexactly(size))
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "after")
    w.close()
    w2.close()


async def test_lean_answers_match_aiohttps(apiserver: RunningApiServer) -> None:
    """The same request served both ways (an unused `watch` word sends it to aiohttp) answers the
    same status, headers and body."""
    r, w = await _conn(apiserver)
    w.write(_post("same"))
    assert (await _answer(r)).status == 201
    w.write(_get(f"{CM_PATH}/same"))
    lean = await _answer(r)
    w.write(_get(f"{CM_PATH}/same?nowatch=x"))  # an unknown parameter kube ignores; aiohttp serves it
    other = await _answer(r)
    w.write(_get(f"{CM_PATH}/same"))  # the connection stays aiohttp's, and keeps working
    again = await _answer(r)
    assert lean.status == other.status == again.status == 200
    assert lean.body == other.body == again.body
    assert lean.headers.keys() == other.headers.keys()
    assert {k: v for k, v in lean.headers.items() if k != "date"} == \
        {k: v for k, v in other.headers.items() if k != "date"}
    w.close()


@pytest.mark.parametrize("status", [200, 201, 204, 409])
@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("keep_alive", [True, False])
def test_a_json_answer_is_written_as_aiohttps_response_would_be(status: int, method: str, keep_alive: bool) -> None:
    """JsonAnswer skips aiohttp's response machinery: its bytes are those _encode writes for the
    web.Response that json_response made before, warnings (with a line break to fold, non-ASCII) included."""
    body = json.dumps({"kind": "ConfigMap", "data": {"k": "v"}}).encode()
    request = httpserver.LeanRequest(method, CM_PATH, CIMultiDictProxy(CIMultiDict()), b"", None)  # type: ignore[arg-type]
    for warnings in ([], ["unknown field \"spec.x\"", "line\r\nbreak é"]):
        reference = web.Response(body=body, status=status, content_type="application/json")
        for w in warnings:
            reference.headers.add("Warning", f'299 - "{w}"')
        answer = httpserver.JsonAnswer(body, status, warnings)
        ours = answer.encode(method == "HEAD", keep_alive)
        theirs = httpserver._encode(request, reference, keep_alive)
        assert _DATE.sub(b"", ours) == _DATE.sub(b"", theirs) and _DATE.search(ours)  # the second may turn between
        assert answer.status == status and answer.body == body
        assert list(answer.headers.items()) == list(reference.headers.items())


async def test_malformed_requests_get_400_and_the_connection_closes(apiserver: RunningApiServer) -> None:
    r, w = await _conn(apiserver)
    w.write(b"GET /api HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
    a = await _answer(r)
    assert a.status == 400 and a.headers["connection"] == "close"
    assert await _closed(r)
    r, w = await _conn(apiserver)
    w.write(b"GET /api HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd")
    assert (await _answer(r)).status == 400
    assert await _closed(r)


async def test_connection_close_and_head(apiserver: RunningApiServer) -> None:
    r, w = await _conn(apiserver)
    w.write(_get("/version", method="HEAD"))
    head = await _answer(r, head_only=True)
    assert int(head.headers["content-length"]) > 0  # the length the body would have, and no body
    w.write(_get("/version", "Connection: close\r\n"))
    a = await _answer(r)
    assert (a.status, a.headers["connection"]) == (200, "close")
    assert "gitVersion" in a.json()
    assert await _closed(r)


async def test_bodies_aiohttp_still_serves(tmp_path: Path) -> None:
    """Over the size limit (kube's 413), chunked, and `Expect: 100-continue`."""
    srv = RunningApiServer(tmp_path / "apiserver", max_body_bytes=2000)
    await srv.start()
    try:
        r, w = await _conn(srv)
        big = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                          "data": {"k": "v" * 5000}}).encode()
        w.write(f"POST {CM_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(big)}\r\n\r\n".encode() + big)
        a = await _answer(r)
        assert (a.status, a.json()["reason"]) == (413, "RequestEntityTooLarge")

        r, w = await _conn(srv)
        body = _cm("chunked")
        w.write(f"POST {CM_PATH} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                + f"{len(body[:10]):x}\r\n".encode() + body[:10] + b"\r\n"
                + f"{len(body[10:]):x}\r\n".encode() + body[10:] + b"\r\n0\r\n\r\n")
        a = await _answer(r)
        assert (a.status, a.json()["metadata"]["name"]) == (201, "chunked")

        r, w = await _conn(srv)
        body = _cm("expected")
        w.write(f"POST {CM_PATH} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode())
        assert await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
        w.write(body)
        a = await _answer(r)
        assert (a.status, a.json()["metadata"]["name"]) == (201, "expected")
    finally:
        await srv.close()


async def test_idle_connections_are_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpserver, "IDLE_SECONDS", 0.5)
    srv = RunningApiServer(tmp_path / "apiserver")
    await srv.start()
    try:
        r, w = await _conn(srv)
        w.write(_get("/version"))
        assert (await _answer(r)).status == 200
        assert await _closed(r)
    finally:
        await srv.close()


async def test_a_head_larger_than_the_limit_is_refused(apiserver: RunningApiServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpserver, "MAX_HEAD_BYTES", 1000)
    r, w = await _conn(apiserver)
    w.write(b"GET /api HTTP/1.1\r\nX-Big: " + b"a" * 1100)
    a = await _answer(r)
    assert a.status == 431
    assert await _closed(r)


async def test_content_types_are_read_the_same_every_time(apiserver: RunningApiServer) -> None:
    """Parsed Content-Type values are remembered: YAML stays YAML, parameters stay parameters."""
    r, w = await _conn(apiserver)
    yaml_body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  k: v\n"
    for i in range(2):
        for ctype, body in (("application/yaml", yaml_body % f"y{i}".encode()),
                            ("application/json; charset=utf-8", _cm(f"j{i}")),
                            ("Application/JSON", _cm(f"u{i}"))):
            w.write(f"POST {CM_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            a = await _answer(r)
            assert a.status == 201, (ctype, a.body)
    body = yaml_body % b"t"
    w.write(f"POST {CM_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    assert (await _answer(r)).status == 400  # not JSON, and not declared YAML
    w.close()


async def test_one_task_answers_a_connections_requests_and_ends_with_it(apiserver: RunningApiServer) -> None:
    """A keep-alive connection's requests are answered by one task of its own, which ends when the
    connection does (whether idle or with a request on the way)."""
    await asyncio.sleep(0.05)
    before = {t for t in asyncio.all_tasks() if "_work" in repr(t.get_coro())}
    r, w = await _conn(apiserver)
    workers = set()
    for i in range(3):
        w.write(_post(f"t{i}") + _get(f"{CM_PATH}/t{i}"))
        assert [(await _answer(r)).status for _ in range(2)] == [201, 200]
        workers |= {t for t in asyncio.all_tasks() if "_work" in repr(t.get_coro())} - before
    assert len(workers) == 1, "one worker for the connection, whatever the number of its requests"
    w.close()
    await w.wait_closed()
    for _ in range(100):
        if all(t.done() for t in workers):
            break
        await asyncio.sleep(0.01)
    assert all(t.done() for t in workers), "the worker ends with its connection"


_TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!#$%&'*+^`|~",
                 min_size=1, max_size=12)
_VALUE = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\x7f")
                          | st.sampled_from([" ", "\t", ","]), max_size=6)
                  | st.sampled_from(["close", "Close", "keep-alive", " close ", "closed", "1", "12"]),
                  max_size=4).map("".join)


@settings(max_examples=400, deadline=None)
@given(method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
       target=st.text(alphabet="abcxyz/?=&%-_.~0123456789é", max_size=30),
       headers=st.lists(st.tuples(st.one_of(_TOKEN, st.sampled_from(["Connection", "connection", "Content-Length"])),
                                  _VALUE), max_size=8))
def test_a_head_is_read_as_llhttp_reports_it(method: str, target: str, headers: list[tuple[str, str]]) -> None:
    """The lean protocol reads a head llhttp accepted in one pass: the same method, target, header
    names and values (leading blanks dropped, trailing ones kept) and keep-alive as llhttp's own
    callbacks report."""
    import httptools

    lines = [f"{method} /{target} HTTP/1.1"] + [f"{n}:{v}" for n, v in headers]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()

    class Oracle:
        def __init__(self) -> None:
            self.url, self.headers, self.keep_alive = b"", [], True

        def on_url(self, url: bytes) -> None:
            self.url += url

        def on_header(self, name: bytes, value: bytes) -> None:
            self.headers.append((name.decode("latin-1"), value.decode("utf-8", "surrogateescape")))

        def on_headers_complete(self) -> None:
            self.keep_alive = parser.should_keep_alive()

    oracle = Oracle()
    parser = httptools.HttpRequestParser(oracle)
    try:
        parser.feed_data(head)
    except httptools.HttpParserError:
        return  # refused: the lean protocol answers 400 before reading the head
    proto = httpserver.LeanProtocol.__new__(httpserver.LeanProtocol)
    line_end = head.find(b"\r\n")
    length = proto._split_head(head, line_end)
    assert proto._method == parser.get_method().decode()
    assert proto._target == oracle.url.decode("utf-8", "surrogateescape")
    # llhttp leaves out a header whose value is empty; Go's server and aiohttp keep it
    assert [h for h in proto._headers if h[1]] == [h for h in oracle.headers if h[1]]
    assert proto._keep_alive == oracle.keep_alive
    lengths = [v for n, v in oracle.headers if n.lower() == "content-length"]
    assert length == (int(lengths[0]) if lengths else 0)
