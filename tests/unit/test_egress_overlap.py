"""SourceIPClasses never share an address: admission refuses a new overlap (naming the other class)
but lets an admin edit a class that overlapped before; where two slipped through, the older keeps
the shared addresses."""

from __future__ import annotations

from typing import Any

from isthmus.api.egress import SourceIPClass
from isthmus.egress import binding
from isthmus.egress.admission import validate_class


def klass(name: str, *ranges: tuple[str, str], created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"apiVersion": "egress.isthmus.io/v1alpha1", "kind": "SourceIPClass",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"ranges": [{"start": a, "end": b} for a, b in ranges], "allowedNamespaces": ["default"]}}


LAB = klass("lab", ("127.32.9.1", "127.32.9.9"))


def test_a_new_overlap_is_refused_on_the_range_naming_the_other_class() -> None:
    new = klass("gold", ("10.0.0.1", "10.0.0.5"), ("127.32.9.9", "127.32.9.12"))
    assert validate_class(new, None, [LAB]) == [(
        "spec.ranges[1]", 'Invalid value: "127.32.9.9-127.32.9.12": overlaps SourceIPClass "lab" '
        "(127.32.9.1-127.32.9.9): an address can belong to one class only")]
    assert validate_class(klass("gold", ("127.32.9.10", "127.32.9.12")), None, [LAB]) == []  # adjacent is fine
    assert validate_class(klass("v6", ("::1", "::ffff")), None, [LAB]) == []  # another family
    assert validate_class(LAB, LAB, [LAB]) == []  # itself, on update


def test_an_update_is_refused_only_for_the_overlap_it_adds() -> None:
    old = klass("gold", ("127.32.9.5", "127.32.9.12"))  # overlapped lab before the rule
    edited = {**old, "spec": {**old["spec"], "allowedNamespaces": ["default", "shop"]}}
    assert validate_class(edited, old, [LAB]) == []
    shrunk = klass("gold", ("127.32.9.8", "127.32.9.12"))
    assert validate_class(shrunk, old, [LAB]) == []
    grown = klass("gold", ("127.32.9.2", "127.32.9.12"))
    assert [f for f, _ in validate_class(grown, old, [LAB])] == ["spec.ranges[0]"]


def test_the_older_class_keeps_the_shared_addresses() -> None:
    older = SourceIPClass.from_dict(klass("b-old", ("127.32.9.3", "127.32.9.4"), created="2026-01-01T00:00:00Z"))
    newer = SourceIPClass.from_dict(klass("a-new", ("127.32.9.1", "127.32.9.6"), created="2026-01-01T00:00:05Z"))
    assert [c.name for c in binding.older_classes(newer, [older, newer])] == ["b-old"]
    assert binding.older_classes(older, [older, newer]) == []
    assert [(str(s.first), str(s.last)) for s in binding.owned_spans(newer, [older])] == [
        ("127.32.9.1", "127.32.9.2"), ("127.32.9.5", "127.32.9.6")]
    assert binding.capacity(newer, [older]) == 4 and binding.capacity(older) == 2
    assert binding.first_free(newer, {"127.32.9.1", "127.32.9.2"}, [older]) == "127.32.9.5"
    refusal = binding.check_claim(newer, "a-new", "default", "127.32.9.3", [older])
    assert refusal is not None and "belongs to SourceIPClass 'b-old'" in refusal.message
