"""metadata.labels validation: pairs already found valid are remembered, and nothing else is."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.apimachinery.meta import validate_metadata


def _causes(labels: Any) -> list[str]:
    return [c["field"] + ": " + c["message"].split(":")[0]
            for c in validate_metadata({"name": "a", "labels": labels}, name_rule="subdomain", namespaced=True)]


def test_a_remembered_valid_pair_does_not_vouch_for_its_key_or_value_elsewhere() -> None:
    assert _causes({"app": "web", "example.com/tier": "front"}) == []
    assert _causes({"app": "web", "example.com/tier": "front"}) == []  # remembered: still valid
    assert _causes({"app": "not valid"}) == ["metadata.labels: Invalid value"]  # same key, another value
    assert _causes({"Not_Valid/app": "web"}) == ["metadata.labels: Invalid value"]  # same value, another key


def test_values_that_are_not_strings_are_refused_and_never_remembered() -> None:
    for _ in range(2):
        assert _causes({"app": {"x": 1}, "tier": ["a"], "n": 1}) == [
            "metadata.labels.app: Invalid value", "metadata.labels.tier: Invalid value",
            "metadata.labels.n: Invalid value"]
