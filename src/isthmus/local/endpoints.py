"""Where each part of the local clusterset answers, from the state's ports and the address plan:
an apiserver's URL, a part's readiness and metrics endpoints, the web view's URL. Read by bring-up
(up.py) and by status (status/) alike."""

from __future__ import annotations

from isthmus.local import plan
from isthmus.local.plan import APISERVER, BROKER, HOST, PartId
from isthmus.local.state import State

__all__ = ["metrics_addr", "ready_url", "server_url", "ui_url"]


def server_url(state: State, name: str) -> str:
    return f"https://{HOST}:{state.ports[PartId(name, APISERVER).name]}"


def ready_url(state: State, part: PartId) -> str:
    scheme = "https" if part.kind == APISERVER else "http"
    # The registry (runc mode) is asked through the relay's door on the host: its API root answers 200.
    path = "/v2/" if part.kind == plan.REGISTRY else "/readyz"
    return f"{scheme}://{HOST}:{state.ports[plan.metrics_port_name(part)]}{path}"


def metrics_addr(state: State, part: PartId) -> str:
    return f"{HOST}:{state.ports[plan.metrics_port_name(part)]}"


def ui_url(state: State) -> str | None:
    """The web view's URL, or None in a state written before it was a part."""
    port = state.ports.get(PartId(BROKER, plan.UI).name)
    return f"http://{HOST}:{port}/" if port else None
