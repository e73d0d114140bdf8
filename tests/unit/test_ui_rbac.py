"""deploy/ui's ClusterRole against the web view: every kind it watches is granted get, list and
watch (the object view gets one), Events can be listed, and nothing is granted that writes."""

from __future__ import annotations

from typing import Any

import yaml

from isthmus.kube.manifests import deploy_dir
from isthmus.ui.kinds import KINDS

ROLE = deploy_dir() / "ui" / "clusterrole.yaml"


def granted() -> dict[tuple[str, str], set[str]]:
    role: dict[str, Any] = yaml.safe_load(ROLE.read_text())
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "isthmus-ui-viewer"
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs.setdefault((group, resource), set()).update(rule["verbs"])
    return verbs


def test_every_watched_kind_is_readable() -> None:
    verbs = granted()
    for kind in KINDS:
        info = kind.resource._api_info
        assert {"get", "list", "watch"} <= verbs.get((info.resource.group, info.plural), set()), kind.kind
    assert "list" in verbs[("", "events")]


def test_read_only() -> None:
    assert set().union(*granted().values()) <= {"get", "list", "watch"}
    assert ("", "secrets") not in granted()


def test_kustomization_lists_the_role() -> None:
    kustomization = yaml.safe_load((deploy_dir() / "ui" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["clusterrole.yaml"]
