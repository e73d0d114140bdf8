"""Structured logging for every long-running command (``--log-format json|text``).

Context goes in ``extra=``: ``log.info("reconciled", extra={"controller": c, "key": k})``.
The JSON format writes one object per line (``ts``, ``level``, ``logger``, ``msg``, the
extras, and ``exc`` for tracebacks); the text format appends the extras as ``k=v``.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

__all__ = ["JsonFormatter", "TextFormatter", "setup_logging"]

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_extras(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        elif record.stack_info:
            doc["stack"] = record.stack_info
        return orjson.dumps(doc, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-5s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        extras = _extras(record)
        suffix = "".join(f" {k}={_text_value(v)}" for k, v in extras.items())
        saved = record.msg, record.args
        try:
            if suffix:
                record.msg, record.args = record.getMessage() + suffix, None
            return super().format(record)
        finally:
            record.msg, record.args = saved


def _text_value(v: object) -> str:
    s = str(v)
    return repr(s) if (" " in s or not s) else s


def setup_logging(format: str = "text", level: str = "info", stream: TextIO | None = None) -> None:
    """Configure the root logger once for the process (replacing its handlers).

    ``format`` is ``json`` or ``text``; ``level`` a name like ``info`` or ``debug``.
    """
    fmt = format.lower()
    if fmt not in ("json", "text"):
        raise ValueError(f"log format must be json or text, not {format!r}")
    lvl = logging.getLevelName(level.upper())
    if not isinstance(lvl, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl)
    # Client libraries log each request at INFO; that drowns controller logs.
    for noisy in ("httpx", "httpx2", "httpcore", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(max(lvl, logging.WARNING))
