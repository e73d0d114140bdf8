"""meta.k8s.io/v1 Table responses (what `kubectl get` asks for), and what printers share.

Like kube-apiserver:
- each kind's strategy gives its columns and rows (built-in kinds: the columns of kube's printers,
  pkg/printers/internalversion, computed in Go there and here); the server always prints the wide
  columns, kubectl hides priority>0 ones;
- their Age cell is already humanized ("5m", "3d4h"), as kube's translateTimestampSince does;
- CRDs get Name + additionalPrinterColumns, or Name + Age when the version declares none
  (apiextensions' serveDefaultColumnsIfEmpty): `JSONPathPrinter`; `date` cells are humanized too;
- CustomResourceDefinitions themselves use kube's default table convertor: Name, Created At (RFC3339).
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any, Protocol

Obj = dict[str, Any]
Column = dict[str, Any]


class Printer(Protocol):
    """What a Table is made with: a strategy's columns and rows (registry/strategy.py's Strategy)."""

    def table_columns(self) -> list[Column]: ...

    def table_row(self, obj: Obj, now: float) -> list[Any]: ...


class Printed(Protocol):
    """A served type as to_table reads it (registry/resources.py's ResourceInfo): its strategy."""

    @property
    def strategy(self) -> Printer: ...

NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may "
    "allow a client to request the generation of an appropriate name automatically. Name is primarily intended "
    "for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
CREATED_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. "
    "It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def col(name: str, typ: str = "string", desc: str = "", fmt: str = "", priority: int = 0) -> Column:
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": priority}


NAME_COLUMN = col("Name", "string", NAME_DESC, "name")
AGE_COLUMN = col("Age", "string", CREATED_DESC)


# ---------------------------------------------------------------- columns, time and cell helpers for printers


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def since(value: Any, now: float) -> str:
    """translateTimestampSince: '<unknown>' for a missing timestamp."""
    ts = parse_time(value)
    if ts is None:
        return "<unknown>"
    return human_duration(now - ts)


def dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def as_list(val: Any) -> list[Any]:
    return val if isinstance(val, list) else []


def dicts(val: Any) -> list[Obj]:
    return [x for x in as_list(val) if isinstance(x, dict)]


def age(obj: Obj, now: float) -> str:
    return since(dig(obj, "metadata", "creationTimestamp"), now)


def name_of(obj: Obj) -> str:
    return str(dig(obj, "metadata", "name") or "")


def labels_string(selector: Any) -> str:
    if not isinstance(selector, dict) or not selector:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def label_selector_string(sel: Any) -> str:
    """metav1.LabelSelectorAsSelector(...).String(); an empty selector prints as <none>."""
    if not isinstance(sel, dict):
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for req in dicts(sel.get("matchExpressions")):
        key, op, values = req.get("key", ""), req.get("operator", ""), sorted(req.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) if parts else "<none>"


def containers_images(spec: Any) -> tuple[str, str]:
    cs = dicts(dig(spec, "containers"))
    return ",".join(str(c.get("name", "")) for c in cs), ",".join(str(c.get("image", "")) for c in cs)


def more(items: list[str], total: int, limit: int) -> str:
    text = ",".join(items)
    return f"{text} + {total - limit} more..." if total > limit else text


def lb_addresses(ingress: Any, wide: bool = True) -> str:
    addrs = [str(i.get("ip") or i.get("hostname") or "") for i in dicts(ingress)]
    addrs = [a for a in addrs if a]
    text = ",".join(addrs)
    if not wide and len(text) > 16:
        return text[:13] + "..."
    return text


# ---------------------------------------------------------------- JSONPath (the subset CRD columns use)

_TOKEN = re.compile(r"""\.\.|\.(?P<field>[^.\[\]]+)|\[(?P<bracket>(?:'[^']*'|"[^"]*"|[^\]])*)\]""")
_FILTER = re.compile(r"""^\?\(\s*@((?:\.[\w\-/]+|\['[^']*'\])+)\s*(?:(==|!=|<=|>=|<|>)\s*(.+?))?\s*\)$""")


class JSONPath:
    """kube's JSONPath for printer columns: `.a.b`, `['a.b']`, `[0]`, `[-1]`, `[*]`, `[1:3]`, and filters
    `[?(@.type=="Ready")]`. Missing keys give no result (AllowMissingKeys)."""

    def __init__(self, expr: str) -> None:
        text = expr.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1].strip()
        if text.startswith("$"):
            text = text[1:]
        if text and not text.startswith((".", "[")):
            text = "." + text
        self.steps: list[tuple[str, Any]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ValueError(f"unrecognized column definition {expr!r}")
            pos = m.end()
            if m.group(0) == "..":
                self.steps.append(("recurse", None))
                # a following name is matched at any depth
                m2 = re.match(r"[^.\[\]]+", text[pos:])
                if m2:
                    self.steps.append(("field", m2.group(0)))
                    pos += m2.end()
            elif m.group("field") is not None:
                self.steps.append(("field", m.group("field")))
            else:
                self.steps.append(self._bracket(m.group("bracket").strip(), expr))

    @staticmethod
    def _bracket(inner: str, expr: str) -> tuple[str, Any]:
        if inner == "*":
            return ("all", None)
        if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
            return ("field", inner[1:-1])
        if inner.startswith("?"):
            fm = _FILTER.fullmatch(inner)
            if fm is None:
                raise ValueError(f"unrecognized column definition {expr!r}")
            path = JSONPath(fm.group(1))
            literal: Any = None
            if fm.group(3) is not None:
                raw = fm.group(3).strip()
                if raw[:1] in "'\"":
                    literal = raw[1:-1]
                else:
                    try:
                        literal = json.loads(raw)
                    except ValueError:
                        literal = raw
            return ("filter", (path, fm.group(2), literal))
        if ":" in inner:
            parts = [p.strip() for p in inner.split(":")]
            nums = [int(p) if p else None for p in parts[:2]]
            return ("slice", (nums[0], nums[1] if len(nums) > 1 else None))
        try:
            return ("index", int(inner))
        except ValueError as exc:
            raise ValueError(f"unrecognized column definition {expr!r}") from exc

    def find(self, obj: Any) -> list[Any]:
        current = [obj]
        for op, arg in self.steps:
            nxt: list[Any] = []
            for v in current:
                nxt.extend(_step(v, op, arg))
            current = nxt
        return current


def _step(v: Any, op: str, arg: Any) -> list[Any]:
    if op == "field":
        return [v[arg]] if isinstance(v, dict) and arg in v else []
    if op == "index":
        if isinstance(v, list) and -len(v) <= arg < len(v):
            return [v[arg]]
        return []
    if op == "all":
        if isinstance(v, list):
            return list(v)
        return list(v.values()) if isinstance(v, dict) else []
    if op == "slice":
        return list(v[arg[0] : arg[1]]) if isinstance(v, list) else []
    if op == "recurse":
        out: list[Any] = []
        stack = [v]
        while stack:
            cur = stack.pop(0)
            out.append(cur)
            if isinstance(cur, dict):
                stack.extend(cur.values())
            elif isinstance(cur, list):
                stack.extend(cur)
        return out
    if op == "filter":
        path, cmp, literal = arg
        items = v if isinstance(v, list) else [v]
        return [item for item in items if _matches(path.find(item), cmp, literal)]
    return []


def _matches(found: list[Any], cmp: str | None, literal: Any) -> bool:
    if cmp is None:
        return bool(found)
    if not found:
        return False
    val = found[0]
    if cmp == "==":
        return bool(val == literal or str(val) == str(literal))
    if cmp == "!=":
        return bool(val != literal and str(val) != str(literal))
    try:
        a, b = float(val), float(literal)
    except (TypeError, ValueError):
        return False
    return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[cmp]


def _text(value: Any) -> str:
    """jsonpath PrintResults: maps and lists as compact JSON, scalars as Go's %v."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cell(col_type: str, value: Any, now: float) -> Any:
    """apiextensions' cellForJSONValue; `string` columns print anything."""
    if value is None:
        return None
    if col_type == "string":
        return _text(value)
    if col_type == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        return None
    if col_type == "number":
        if isinstance(value, bool):
            return None
        return float(value) if isinstance(value, (int, float)) else None
    if col_type == "boolean":
        return value if isinstance(value, bool) else None
    if col_type == "date":
        if not isinstance(value, str):
            return None
        ts = parse_time(value)
        return "<invalid>" if ts is None else human_duration(now - ts)
    return None


class JSONPathPrinter:
    """Name + columns in CRD additionalPrinterColumns shape ({name, type, jsonPath, description?,
    priority?, format?}), each cell its JSONPath's first result; Name + Age when there are none."""

    def __init__(self, printer_columns: list[dict[str, Any]]) -> None:
        cols = printer_columns or [
            {
                "name": "Age",
                "type": "date",
                "jsonPath": ".metadata.creationTimestamp",
                "description": CREATED_DESC,
            }
        ]
        self.columns: list[Column] = [NAME_COLUMN]
        self._paths: list[tuple[str, JSONPath | None]] = []
        for c in cols:
            jp = str(c.get("jsonPath") or "")
            try:
                path: JSONPath | None = JSONPath(jp)
            except ValueError:
                path = None
            desc = str(c.get("description") or f"Custom resource definition column (in JSONPath format): {jp}")
            self.columns.append(
                col(
                    str(c.get("name") or ""),
                    str(c.get("type") or "string"),
                    desc,
                    str(c.get("format") or ""),
                    int(c.get("priority") or 0),
                )
            )
            self._paths.append((str(c.get("type") or "string"), path))

    def row(self, obj: Obj, now: float) -> list[Any]:
        cells: list[Any] = [name_of(obj)]
        for col_type, path in self._paths:
            found = path.find(obj) if path is not None else []
            cells.append(_cell(col_type, found[0], now) if found else None)
        return cells


# ---------------------------------------------------------------- public


def to_table(
    info: Printed,
    objects: list[dict[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    continue_token: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Columns and cells from the kind's strategy (table_columns, table_row), NAME first;
    rows[].object is a PartialObjectMetadata (includeObject=Metadata), the full object (Object)
    or absent (None)."""
    t = time.time() if now is None else now
    strategy = info.strategy
    columns = [dict(c) for c in strategy.table_columns()]
    rows: list[dict[str, Any]] = [{"cells": strategy.table_row(obj, t)} for obj in objects]
    for row, obj in zip(rows, objects, strict=True):
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": rows,
    }
