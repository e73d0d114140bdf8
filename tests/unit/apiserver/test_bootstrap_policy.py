"""The bootstrap policy's data and its reconciliation, and ClusterRole aggregation, without a server."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.authorization.bootstrappolicy import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ROLE_BINDINGS,
    ROLES,
)
from isthmus.apiserver.controllers.bootstraprbac import _reconcile_binding, _reconcile_role
from isthmus.apiserver.controllers.clusterroleaggregation import aggregated_rules, selector_matches

Obj = dict[str, Any]


def role(name: str, labels: dict[str, str] | None = None, *rules: Obj, selectors: list[Obj] | None = None) -> Obj:
    out: Obj = {"metadata": {"name": name, "labels": labels or {}}, "rules": list(rules)}
    if selectors is not None:
        out["aggregationRule"] = {"clusterRoleSelectors": selectors}
    return out


def test_every_binding_names_a_bootstrap_role() -> None:
    cluster_roles = {r["metadata"]["name"] for r in CLUSTER_ROLES}
    assert len(cluster_roles) == len(CLUSTER_ROLES)
    for b in CLUSTER_ROLE_BINDINGS:
        assert b["roleRef"]["name"] in cluster_roles, b["metadata"]["name"]
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in ROLES}
    for b in ROLE_BINDINGS:
        assert (b["metadata"]["namespace"], b["roleRef"]["name"]) in roles, b["metadata"]["name"]


def test_selectors() -> None:
    labels = {"a": "1", "b": "2"}
    assert selector_matches({"matchLabels": {"a": "1"}}, labels)
    assert not selector_matches({"matchLabels": {"a": "2"}}, labels)
    assert selector_matches({}, labels)
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]},
                                                  {"key": "c", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["2"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "c", "operator": "Exists"}]}, labels)


def test_aggregation_takes_matching_roles_by_name_each_rule_once() -> None:
    r1, r2, r3 = ({"verbs": ["get"], "resources": [x]} for x in ("a", "b", "c"))
    agg = role("agg", None, selectors=[{"matchLabels": {"x": "1"}}, {"matchLabels": {"y": "1"}}])
    roles = [agg, role("zeta", {"x": "1"}, r2, r1), role("alpha", {"x": "1", "y": "1"}, r1),
             role("beta", {"y": "1"}, r3), role("other", {}, {"verbs": ["*"]})]
    assert aggregated_rules(agg, roles) == [r1, r2, r3]
    assert aggregated_rules(agg, [agg]) == []


def test_reconciliation_adds_only_what_is_missing() -> None:
    wanted = role("r", {"kubernetes.io/bootstrapping": "rbac-defaults"}, {"verbs": ["get"], "apiGroups": [""],
                                                                          "resources": ["pods"]})
    wanted["metadata"]["annotations"] = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    live = role("r", {"mine": "x"}, {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]})
    out = _reconcile_role(live, wanted)
    assert out is not None and out["rules"] == live["rules"]  # covered already
    assert out["metadata"]["labels"] == {"mine": "x", "kubernetes.io/bootstrapping": "rbac-defaults"}
    assert _reconcile_role(out, wanted) is None
    agg = role("a", None, selectors=[{"matchLabels": {"k": "v"}}])
    live_agg = role("a", None, {"verbs": ["x"]}, selectors=[{"matchLabels": {"mine": "v"}}])
    out = _reconcile_role(live_agg, agg)
    assert out is not None and out["aggregationRule"]["clusterRoleSelectors"] == [
        {"matchLabels": {"mine": "v"}}, {"matchLabels": {"k": "v"}}]
    assert out["rules"] == [{"verbs": ["x"]}]  # the aggregation controller's, not reconciliation's
    binding: Obj = {"metadata": {"name": "b"}, "subjects": [{"kind": "User", "name": "u"}]}
    live_b: Obj = {"metadata": {"name": "b"}, "subjects": [{"kind": "Group", "name": "g"}]}
    out = _reconcile_binding(live_b, binding)
    assert out is not None and out["subjects"] == [{"kind": "Group", "name": "g"}, {"kind": "User", "name": "u"}]
