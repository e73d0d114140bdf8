"""/healthz, /livez and /readyz as kube-apiserver answers them (k8s.io/apiserver/pkg/server/healthz).

Each is a list of named checks. All passing: `ok` (with `?verbose`, one `[+]<check> ok` line each
and `<name> check passed`). One failing: 500, always verbose, `[-]<check> failed: reason withheld`
and `<name> check failed`; the reason goes to the log, not to whoever asks. `/<name>/<check>`
runs one check (`ok`, or 500 `internal server error: <reason>`); `?exclude=<check>` leaves one out.

kube's `etcd` check is the storage's here, under kube's name (as k3s names its SQLite one), so that
probes and tools written for kube read it: it fails once the store's files were changed under the
server (storage/store.py, Store.failure), and the server then refuses every write. kube fails all three
endpoints when its storage fails, and so does this server: a supervisor restarting it on /livez
gets a clear refusal to start on the damaged database rather than a server that goes on
acknowledging writes it cannot keep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from aiohttp import web
from multidict import MultiMapping

log = logging.getLogger(__name__)

ENDPOINTS = ("healthz", "livez", "readyz")
# The checks each endpoint lists, in kube's order for the ones this server has.
CHECKS: Mapping[str, tuple[str, ...]] = {
    "healthz": ("ping", "log", "etcd"),
    "livez": ("ping", "log", "etcd"),
    "readyz": ("ping", "log", "etcd", "etcd-readiness"),
}
PATHS = frozenset(f"/{e}" for e in ENDPOINTS) | frozenset(f"/{e}/{c}" for e in ENDPOINTS for c in CHECKS[e])
_PLAIN = "text/plain"


def respond(path: str, query: MultiMapping[str], storage_failure: Callable[[], str | None]) -> web.Response:
    """The answer to one of PATHS. storage_failure: why the store refuses writes (None: it keeps them)."""
    endpoint, _, only = path[1:].partition("/")

    def problem(check: str) -> str | None:
        return storage_failure() if check in ("etcd", "etcd-readiness") else None

    if only:
        reason = problem(only)
        if reason is None:
            return web.Response(text="ok", content_type=_PLAIN)
        return web.Response(status=500, text=f"internal server error: {reason}\n", content_type=_PLAIN)
    excluded = set(query.getall("exclude", []))
    lines: list[str] = []
    failed: list[str] = []
    for check in CHECKS[endpoint]:
        if check in excluded:
            continue
        reason = problem(check)
        if reason is None:
            lines.append(f"[+]{check} ok")
        else:
            lines.append(f"[-]{check} failed: reason withheld")
            failed.append(f"{check}: {reason}")
    if failed:
        log.debug("%s check failed: %s", endpoint, "; ".join(failed))  # the store logged the cause once
        return web.Response(status=500, text="\n".join(lines) + f"\n{endpoint} check failed\n", content_type=_PLAIN)
    if "verbose" not in query:
        return web.Response(text="ok", content_type=_PLAIN)
    return web.Response(text="\n".join(lines) + f"\n{endpoint} check passed\n", content_type=_PLAIN)
