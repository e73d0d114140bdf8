"""The traffic preference DNS and the proxy steer by (api.mcs.effective_preference): the ServiceImport's
trafficDistribution, overridden by isthmus.io/affinity (docs/dns.md, docs/proxy.md "Traffic preference")."""

from __future__ import annotations

import pytest

from isthmus.api.mcs import (
    AFFINITY_ANNOTATION,
    effective_preference,
    unknown_traffic_distribution,
)


def ann(value: str | None) -> dict[str, str] | None:
    return None if value is None else {AFFINITY_ANNOTATION: value}


@pytest.mark.parametrize("distribution", ["PreferClose", "PreferSameZone", "PreferSameNode"])
def test_every_kube_distribution_means_this_cluster_first(distribution: str) -> None:
    assert effective_preference(None, distribution) == "local"
    assert effective_preference({}, distribution) == "local"
    assert effective_preference({"other": "x"}, distribution) == "local"


def test_no_distribution_and_no_annotation_is_no_preference() -> None:
    assert effective_preference(None, None) == ""
    assert effective_preference({}, "") == ""


@pytest.mark.parametrize("distribution", ["preferclose", "PreferSameRegion", " PreferClose", "Local"])
def test_a_distribution_isthmus_does_not_read_is_no_preference(distribution: str) -> None:
    """Exact spelling, as kube's Service validation has it: anything else steers nothing."""
    assert effective_preference(None, distribution) == ""


@pytest.mark.parametrize(
    ("annotation", "want"), [("local", "local"), ("remote", "remote"), ("none", ""), (" Remote ", "remote")]
)
def test_a_known_annotation_wins_over_the_distribution(annotation: str, want: str) -> None:
    """The annotation is the explicit form: `none` switches PreferClose off, `remote` reverses it."""
    assert effective_preference(ann(annotation), "PreferClose") == want
    assert effective_preference(ann(annotation), None) == want


@pytest.mark.parametrize("annotation", ["nearby", "", "  "])
def test_an_unknown_or_empty_annotation_leaves_the_distribution_in_charge(annotation: str) -> None:
    assert effective_preference(ann(annotation), "PreferClose") == "local"
    assert effective_preference(ann(annotation), None) == ""


def test_unknown_distribution_is_reported_only_when_it_decides() -> None:
    assert unknown_traffic_distribution(None, "PreferSameRegion") == "PreferSameRegion"
    assert unknown_traffic_distribution(ann("nearby"), "PreferSameRegion") == "PreferSameRegion"
    assert unknown_traffic_distribution(ann("none"), "PreferSameRegion") is None  # overridden: irrelevant
    assert unknown_traffic_distribution(ann("local"), "PreferSameRegion") is None
    for fine in ("PreferClose", "PreferSameZone", "PreferSameNode", "", None):
        assert unknown_traffic_distribution(None, fine) is None, fine
