"""A diff of two objects in the shape github.com/google/go-cmp's cmp.Diff prints Go structs.

kube appends such a diff to some validation errors (a Pod update that changes an immutable field:
`core.PodSpec{ ... }`) so the user sees what differed. go-cmp's report is deliberately unstable
(it randomizes spaces so nobody parses it); this gives its layout — `- `/`+ ` lines for a changed
field, `... // N identical fields` for runs of equal ones, nested structs and slices opened as
`Field: T{` — from the JSON objects we store, with Go's field names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
                 pointers: frozenset[str] = frozenset(), order: Mapping[str, list[str]] | None = None,
                 zeros: Mapping[str, str] | None = None) -> None:
        self.types = dict(types or {})  # JSON key → Go type as cmp names it ("[]core.Container")
        self.maps = maps  # JSON keys holding a Go map: their keys print quoted
        self.pointers = pointers  # JSON keys of pointer-to-scalar fields: cmp prints `&30`
        self.order = dict(order or {})  # Go type → its fields' JSON names in struct order
        self.zeros = dict(zeros or {})  # JSON key → how cmp prints its Go zero value when absent (else nil)


def go_value(value: Any, key: str, shape: Shape) -> str:
    """A value as cmp prints it in a removed or added line (types elided, as cmp does inside a literal)."""
    if value is None:
        return shape.zeros.get(key, "nil")
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


_CONTEXT = 2  # go-cmp's numContextRecords: equal records shown on each side of a difference


def _identical(n: int, what: str) -> str:
    return f"... // {n} identical {what}" + ("" if n == 1 else "s")


@dataclass
class _Line:
    mark: str  # " ", "-" or "+"
    depth: int
    label: str  # "Name:" of a field, "" for an element or a closing brace
    text: str
    aligned: bool  # a one-line record: its value is aligned with its neighbours'


class _Report:
    def __init__(self, shape: Shape, equal: Callable[[Any, Any], bool]) -> None:
        self.shape = shape
        self.equal = equal
        self.lines: list[_Line] = []

    def line(self, mark: str, depth: int, text: str, label: str = "", aligned: bool = False) -> None:
        self.lines.append(_Line(mark, depth, label, text, aligned))

    def changed(self, depth: int, label: str, key: str, old: Any, new: Any) -> None:
        """A field (label "Name:") or element (label "") that differs."""
        opened = f"{label} " if label else ""
        if isinstance(old, dict) and isinstance(new, dict) and key not in self.shape.maps:
            self.line(" ", depth, f"{opened}{self.shape.types.get(key, '')}{{")
            self.struct(depth + 1, old, new, self.shape.types.get(key, ""))
            self.line(" ", depth, "},")
            return
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            self.line(" ", depth, f"{opened}{self.shape.types.get(key, '')}{{")
            self.elements(depth + 1, key, old, new)
            self.line(" ", depth, "},")
            return
        self.line("-", depth, f"{go_value(old, key, self.shape)},", label, aligned=bool(label))
        self.line("+", depth, f"{go_value(new, key, self.shape)},", label, aligned=bool(label))

    def equal_run(self, depth: int, run: list[tuple[str, Any]], first: bool, last: bool, what: str) -> None:
        """go-cmp's context: up to two equal records after the previous difference and before the
        next, the rest as `... // N identical fields` (a single one is shown rather than elided)."""
        n = len(run)
        lo = 0 if first else min(_CONTEXT, n)
        hi = 0 if last else min(_CONTEXT, n - lo)
        if n - lo - hi == 1:
            hi += 1
        for key, value in run[:lo]:
            self.context(depth, key, value, what)
        if n - lo - hi:
            self.line(" ", depth, _identical(n - lo - hi, what))
        for key, value in run[n - hi:]:
            self.context(depth, key, value, what)

    def context(self, depth: int, key: str, value: Any, what: str) -> None:
        if what == "field":
            self.line(" ", depth, f"{go_value(value, key, self.shape)},", f"{go_field(key)}:", aligned=True)
        else:
            self.line(" ", depth, f"{go_value(value, key, self.shape)},")

    def struct(self, depth: int, old: Mapping[str, Any], new: Mapping[str, Any], type_name: str) -> None:
        order = list(self.shape.order.get(type_name, []))
        order += [k for k in dict.fromkeys([*old, *new]) if k not in order]
        self._records(depth, [(k, old.get(k), new.get(k)) for k in order], "field", "")

    def elements(self, depth: int, key: str, old: list[Any], new: list[Any]) -> None:
        self._records(depth, [(key, a, b) for a, b in zip(old, new, strict=True)], "element",
                      self.shape.types.get(key, "").removeprefix("[]"))

    def _records(self, depth: int, records: list[tuple[str, Any, Any]], what: str, elem_type: str) -> None:
        run: list[tuple[str, Any]] = []
        seen_diff = False
        for key, a, b in records:
            if self.equal(a, b):
                run.append((key, a))
                continue
            if run:
                self.equal_run(depth, run, first=not seen_diff, last=False, what=what)
                run = []
            seen_diff = True
            if what == "field":
                self.changed(depth, f"{go_field(key)}:", key, a, b)
            elif isinstance(a, dict) and isinstance(b, dict):
                self.line(" ", depth, "{")
                self.struct(depth + 1, a, b, elem_type)
                self.line(" ", depth, "},")
            else:
                self.changed(depth, "", key, a, b)
        if run:
            self.equal_run(depth, run, first=not seen_diff, last=True, what=what)

    def render(self) -> str:
        """The lines, each run of one-line records of one depth with its values aligned as cmp does."""
        out: list[str] = []
        i = 0
        while i < len(self.lines):
            j = i
            while (j < len(self.lines) and self.lines[j].aligned and self.lines[j].depth == self.lines[i].depth
                   and self.lines[i].aligned):
                j += 1
            group = self.lines[i:j] if j > i else [self.lines[i]]
            width = max(len(ln.label) for ln in group)
            for ln in group:
                head = (ln.label.ljust(width) + " ") if ln.aligned else ""
                out.append(f"{ln.mark} " + "\t" * ln.depth + head + ln.text)
            i += len(group)
        return "\n".join(out) + "\n"


def cmp_diff(type_name: str, old: Mapping[str, Any], new: Mapping[str, Any], shape: Shape,
             equal: Callable[[Any, Any], bool]) -> str:
    """cmp.Diff(old, new) of two structs of Go type `type_name`, ending in a newline as cmp's does."""
    report = _Report(shape, equal)
    report.line(" ", 0, f"{type_name}{{")
    report.struct(1, old, new, type_name)
    report.line(" ", 0, "}")
    return report.render()
