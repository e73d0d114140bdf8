"""The in-process ApiServer's safety rules: who may read without a token, and data dirs that
held a database never starting empty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from isthmus.apiserver.server import ApiServer
from isthmus.apiserver.storage.datadir import DataDirError
from tests.harness.apiserver import RunningApiServer

TOKEN = "s3cret-token"
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep", "namespace": "default"}}


async def _get(srv: RunningApiServer, path: str, auth: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": auth} if auth is not None else {}
    async with aiohttp.ClientSession() as s, s.get(srv.url + path, headers=headers) as r:
        text = await r.text()
        return r.status, json.loads(text) if r.content_type == "application/json" else text


@pytest.fixture
async def secured(tmp_path: Path) -> Any:
    srv = RunningApiServer(tmp_path / "apiserver", token=TOKEN, anonymous_auth=True)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


async def test_without_anonymous_auth_every_request_needs_credentials(tmp_path: Path) -> None:
    """kube with --anonymous-auth=false: no credentials is 401 everywhere, /healthz included."""
    srv = RunningApiServer(tmp_path / "apiserver", token=TOKEN)
    await srv.start()
    try:
        for path in ("/healthz", "/livez", "/readyz", "/version", "/api"):
            status, body = await _get(srv, path)
            assert (status, body["reason"]) == (401, "Unauthorized"), path
        assert (await _get(srv, "/readyz", f"Bearer {TOKEN}")) == (200, "ok")
    finally:
        await srv.close()


async def test_anonymous_requests_get_only_public_info(secured: RunningApiServer) -> None:
    """With --anonymous-auth, RBAC's system:public-info-viewer: health and version are public,
    everything else is kube's 403 (discovery is for authenticated users)."""
    for path in ("/healthz", "/livez", "/readyz", "/version"):
        status, _ = await _get(secured, path)
        assert status == 200, path
    for path in ("/", "/api", "/apis", "/openapi/v2"):
        status, body = await _get(secured, path)
        assert (status, body["kind"], body["reason"], body["code"]) == (403, "Status", "Forbidden", 403), path
        assert body["message"] == f'forbidden: User "system:anonymous" cannot get path "{path}"'
    status, body = await _get(secured, "/api/v1/namespaces/default/secrets")
    assert (status, body["message"]) == (403, 'secrets is forbidden: User "system:anonymous" cannot list resource '
                                              '"secrets" in API group "" in the namespace "default"')


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
async def test_bearer_scheme_is_case_insensitive(secured: RunningApiServer, scheme: str) -> None:
    status, body = await _get(secured, "/api/v1/namespaces", f"{scheme} {TOKEN}")
    assert status == 200 and body["kind"] == "NamespaceList"


async def test_wrong_or_other_credentials_are_401(secured: RunningApiServer) -> None:
    """A wrong token fails even on public paths (as kube); a non-bearer header counts as anonymous,
    whom RBAC then refuses (403) beyond the public paths."""
    assert (await _get(secured, "/healthz", "Bearer wrong"))[0] == 401
    assert (await _get(secured, "/version", "bearer wrong"))[0] == 401
    assert (await _get(secured, "/api/v1/namespaces", f"Basic {TOKEN}"))[0] == 403
    assert (await _get(secured, "/healthz", f"Basic {TOKEN}"))[0] == 200
    assert (await _get(secured, "/api/v1/namespaces", "Bearer"))[0] == 403


async def _initialised(data: Path) -> None:
    srv = RunningApiServer(data)
    await srv.start()
    try:
        async with aiohttp.ClientSession() as s:
            r = await s.post(f"{srv.url}/api/v1/namespaces/default/configmaps", json=CM)
            assert r.status == 201
    finally:
        await srv.close()


async def _start_error(data: Path, **kwargs: Any) -> str:
    srv = ApiServer(data_dir=data, **kwargs)
    with pytest.raises(DataDirError) as e:
        await srv.start()
    assert not srv._started
    return str(e.value)


async def test_missing_database_after_initialisation_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "d"
    await _initialised(data)
    (data / "state.db").unlink()
    msg = await _start_error(data)
    assert msg == (f"database {data}/state.db is missing, but data dir {data} was initialised before "
                   f"({data}/initialized.json exists): restore it from a backup, or start once with "
                   "--reinitialize to begin with an empty database")
    assert not (data / "state.db").exists()


async def test_older_data_dir_without_marker_is_protected_too(tmp_path: Path) -> None:
    """A data dir from before the marker existed: an empty state.db is refused; a good one is adopted."""
    data = tmp_path / "d"
    await _initialised(data)
    (data / "initialized.json").unlink()
    good = (data / "state.db").read_bytes()
    (data / "state.db").write_bytes(b"")
    assert (await _start_error(data)).startswith(f"database {data}/state.db is empty (0 bytes): restore it")

    (data / "state.db").write_bytes(good)
    srv = RunningApiServer(data)
    await srv.start()
    try:
        assert srv.store.get("/configmaps", "default", "keep") is not None
        assert (data / "initialized.json").stat().st_mode & 0o777 == 0o600
    finally:
        await srv.close()


async def test_leftover_wal_without_database_is_refused(tmp_path: Path) -> None:
    """A WAL holds committed writes: starting fresh next to it would replay them into a new file."""
    data = tmp_path / "d"
    data.mkdir()
    (data / "state.db-wal").write_bytes(b"\0" * 32)
    assert (await _start_error(data)).startswith(f"database {data}/state.db is missing, but data dir {data} was "
                                                 f"initialised before ({data}/state.db-wal exists)")


async def test_reinitialize_starts_empty_and_keeps_the_unusable_file(tmp_path: Path) -> None:
    data = tmp_path / "d"
    await _initialised(data)
    (data / "state.db").write_bytes(b"garbage" * 100)
    srv = RunningApiServer(data, reinitialize=True)
    await srv.start()
    try:
        assert srv.store.get("/configmaps", "default", "keep") is None
        assert srv.store.get("/namespaces", "", "default") is not None
    finally:
        await srv.close()
    kept = [p for p in data.iterdir() if p.name.startswith("state.db.unusable-")]
    assert [p.read_bytes() for p in kept] == [b"garbage" * 100]


async def test_reinitialize_leaves_a_healthy_database_alone(tmp_path: Path) -> None:
    data = tmp_path / "d"
    await _initialised(data)
    srv = RunningApiServer(data, reinitialize=True)
    await srv.start()
    try:
        assert srv.store.get("/configmaps", "default", "keep") is not None
    finally:
        await srv.close()
    assert not [p for p in data.iterdir() if "unusable" in p.name]
