"""Entry point: import every command module so it registers on the app."""

from __future__ import annotations

from isthmus.cli import apiserver as _apiserver  # noqa: F401
from isthmus.cli.app import app

try:  # registered by the api/kube layer
    from isthmus.cli import crds as _crds  # noqa: F401
except ImportError:  # pragma: no cover - during bring-up only
    pass

__all__ = ["app"]
