"""A diff of two objects in the shape github.com/google/go-cmp's cmp.Diff prints Go structs.

kube appends such a diff to some validation errors (a Pod update that changes an immutable field:
`core.PodSpec{ ... }`) so the user sees what differed. go-cmp's report is deliberately unstable
(it randomizes spaces so nobody parses it); this gives its layout — `- `/`+ ` lines for a changed
field, `... // N identical fields` for runs of equal ones, nested structs and slices opened as
`Field: T{` — from the JSON objects we store, with Go's field names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from isthmus.apiserver.apimachinery.errors import go_quote

# JSON names whose Go field name is not the JSON name capitalized (Go's initialisms).
_GO_NAMES = {
    "dnsPolicy": "DNSPolicy", "dnsConfig": "DNSConfig", "os": "OS", "hostIP": "HostIP", "podIP": "PodIP",
    "hostIPC": "HostIPC", "hostPID": "HostPID", "setHostnameAsFQDN": "SetHostnameAsFQDN", "fsGroup": "FSGroup",
    "runAsUser": "RunAsUser", "tty": "TTY", "stdinOnce": "StdinOnce", "httpGet": "HTTPGet",
    "tcpSocket": "TCPSocket", "grpc": "GRPC", "uid": "UID", "apiVersion": "APIVersion", "seLinuxOptions":
    "SELinuxOptions", "nfs": "NFS", "iscsi": "ISCSI", "configMapKeyRef": "ConfigMapKeyRef",
}


def go_field(name: str) -> str:
    """The Go field name of a JSON key (kube's types name their fields so)."""
    return _GO_NAMES.get(name) or (name[:1].upper() + name[1:])


class Shape:
    """What the report needs to know of the Go types: type names and which keys are maps or pointers."""

    def __init__(self, types: Mapping[str, str] | None = None, maps: frozenset[str] = frozenset(),
                 pointers: frozenset[str] = frozenset(), order: Mapping[str, list[str]] | None = None) -> None:
        self.types = dict(types or {})  # JSON key → Go type as cmp names it ("[]core.Container")
        self.maps = maps  # JSON keys holding a Go map: their keys print quoted
        self.pointers = pointers  # JSON keys of pointer-to-scalar fields: cmp prints `&30`
        self.order = dict(order or {})  # Go type → its fields' JSON names in struct order


def go_value(value: Any, key: str, shape: Shape) -> str:
    """A value as cmp prints it in a removed or added line (types elided, as cmp does inside a literal)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = str(value)
    elif isinstance(value, str):
        text = go_quote(value)
    elif isinstance(value, dict):
        if key in shape.maps:
            inner = ", ".join(f"{go_quote(str(k))}: {go_value(v, '', shape)}" for k, v in value.items())
        else:
            inner = ", ".join(f"{go_field(k)}: {go_value(v, k, shape)}" for k, v in value.items())
        return "{" + inner + "}"
    elif isinstance(value, list):
        return "{" + ", ".join(go_value(v, key, shape) for v in value) + "}"
    else:
        text = go_quote(str(value))
    return "&" + text if key in shape.pointers else text


def _fields(n: int) -> str:
    return f"... // {n} identical field" + ("" if n == 1 else "s")


def _elements(n: int) -> str:
    return f"... // {n} identical element" + ("" if n == 1 else "s")


class _Report:
    def __init__(self, shape: Shape, equal: Callable[[Any, Any], bool]) -> None:
        self.shape = shape
        self.equal = equal
        self.lines: list[str] = []

    def line(self, mark: str, depth: int, text: str) -> None:
        self.lines.append(f"{mark} " + "\t" * depth + text)

    def changed(self, depth: int, label: str, key: str, old: Any, new: Any) -> None:
        """A field (label "Name: ") or element (label "") that differs."""
        if isinstance(old, dict) and isinstance(new, dict) and key not in self.shape.maps:
            self.line(" ", depth, f"{label}{self.shape.types.get(key, '')}{{")
            self.struct(depth + 1, old, new, self.shape.types.get(key, ""))
            self.line(" ", depth, "},")
            return
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            self.line(" ", depth, f"{label}{self.shape.types.get(key, '')}{{")
            self.elements(depth + 1, key, old, new)
            self.line(" ", depth, "},")
            return
        self.line("-", depth, f"{label}{go_value(old, key, self.shape)},")
        self.line("+", depth, f"{label}{go_value(new, key, self.shape)},")

    def struct(self, depth: int, old: Mapping[str, Any], new: Mapping[str, Any], type_name: str) -> None:
        order = list(self.shape.order.get(type_name, []))
        order += [k for k in [*old, *new] if k not in order]
        seen: set[str] = set()
        same = 0
        for key in order:
            if key in seen:
                continue
            seen.add(key)
            a, b = old.get(key), new.get(key)
            if self.equal(a, b):
                same += 1
                continue
            if same:
                self.line(" ", depth, _fields(same))
                same = 0
            self.changed(depth, f"{go_field(key)}: ", key, a, b)
        if same:
            self.line(" ", depth, _fields(same))

    def elements(self, depth: int, key: str, old: list[Any], new: list[Any]) -> None:
        elem_type = self.shape.types.get(key, "").removeprefix("[]")
        same = 0
        for a, b in zip(old, new, strict=True):
            if self.equal(a, b):
                same += 1
                continue
            if same:
                self.line(" ", depth, _elements(same))
                same = 0
            if isinstance(a, dict) and isinstance(b, dict):
                self.line(" ", depth, "{")
                self.struct(depth + 1, a, b, elem_type)
                self.line(" ", depth, "},")
            else:
                self.changed(depth, "", key, a, b)
        if same:
            self.line(" ", depth, _elements(same))


def cmp_diff(type_name: str, old: Mapping[str, Any], new: Mapping[str, Any], shape: Shape,
             equal: Callable[[Any, Any], bool]) -> str:
    """cmp.Diff(old, new) of two structs of Go type `type_name`, ending in a newline as cmp's does."""
    report = _Report(shape, equal)
    report.line(" ", 0, f"{type_name}{{")
    report.struct(1, old, new, type_name)
    report.line(" ", 0, "}")
    return "\n".join(report.lines) + "\n"
