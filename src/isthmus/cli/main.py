"""Entry point: import every command module so it registers on the app."""

from __future__ import annotations

from isthmus.cli import agent as _agent  # noqa: F401
from isthmus.cli import apiserver as _apiserver  # noqa: F401
from isthmus.cli import crds as _crds  # noqa: F401
from isthmus.cli import demo as _demo  # noqa: F401
from isthmus.cli import discovery as _discovery  # noqa: F401
from isthmus.cli import dns as _dns  # noqa: F401
from isthmus.cli import egress as _egress  # noqa: F401
from isthmus.cli import kubelite as _kubelite  # noqa: F401
from isthmus.cli import lb as _lb  # noqa: F401
from isthmus.cli import local as _local  # noqa: F401
from isthmus.cli import mcsvc as _mcsvc  # noqa: F401
from isthmus.cli import pools as _pools  # noqa: F401
from isthmus.cli import proxy as _proxy  # noqa: F401
from isthmus.cli import webhook as _webhook  # noqa: F401
from isthmus.cli.app import app

__all__ = ["app"]
