"""The words the status readers report in: a part's health, the phase of a clusterset whose
supervisor is gone, and a failure said in one short line."""

from __future__ import annotations

__all__ = [
    "HEALTH_DOWN",
    "HEALTH_FAILED",
    "HEALTH_READY",
    "HEALTH_RESTARTING",
    "HEALTH_STANDBY",
    "HEALTH_STARTING",
    "PHASE_UNSUPERVISED",
    "short",
]

PHASE_UNSUPERVISED = "unsupervised"
"""Parts run but no supervisor does: nothing restarts them; `down` stops them."""

HEALTH_READY = "ready"
HEALTH_STARTING = "starting"
HEALTH_RESTARTING = "restarting"
HEALTH_FAILED = "failed"
HEALTH_DOWN = "down"
HEALTH_STANDBY = "standby"
"""Started on first use (the web view): the supervisor listens for it and no process runs yet."""


def short(e: BaseException) -> str:
    """An error in one line of at most 200 characters, its type first."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:200] if text else type(e).__name__
