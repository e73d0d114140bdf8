"""ServiceAccount and Priority admission's pure parts: how the token volume is mounted, which class
is the default, what the system classes must be."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.admission.priority import default_class, known_system_class_error
from isthmus.apiserver.admission.serviceaccount import MOUNT_PATH, mount_token, should_automount


def test_every_container_mounts_one_new_volume_unless_it_mounts_the_path_itself() -> None:
    spec: dict[str, Any] = {"initContainers": [{"name": "i"}], "containers": [
        {"name": "a"}, {"name": "b", "volumeMounts": [{"name": "mine", "mountPath": MOUNT_PATH}]}],
        "volumes": [{"name": "mine", "emptyDir": {}}]}
    mount_token(spec)
    (vol,) = [v for v in spec["volumes"] if v["name"].startswith("kube-api-access-")]
    mount = {"name": vol["name"], "readOnly": True, "mountPath": MOUNT_PATH}
    assert spec["initContainers"][0]["volumeMounts"] == [mount] and spec["containers"][0]["volumeMounts"] == [mount]
    assert spec["containers"][1]["volumeMounts"] == [{"name": "mine", "mountPath": MOUNT_PATH}]


def test_an_existing_token_volume_is_reused_and_none_is_added_when_nobody_needs_it() -> None:
    spec: dict[str, Any] = {"containers": [{"name": "a"}], "volumes": [{"name": "kube-api-access-abcde",
                                                                         "projected": {"sources": []}}]}
    mount_token(spec)
    assert [v["name"] for v in spec["volumes"]] == ["kube-api-access-abcde"]
    assert spec["containers"][0]["volumeMounts"][0]["name"] == "kube-api-access-abcde"
    taken: dict[str, Any] = {"containers": [{"name": "a", "volumeMounts": [{"name": "x", "mountPath": MOUNT_PATH}]}]}
    mount_token(taken)
    assert "volumes" not in taken


def test_the_pods_automount_choice_wins_over_the_service_accounts() -> None:
    assert should_automount({}, {}) is True
    assert should_automount({"automountServiceAccountToken": False}, {}) is False
    assert should_automount({"automountServiceAccountToken": False}, {"automountServiceAccountToken": True}) is True


def test_default_class_and_system_classes() -> None:
    classes = [{"metadata": {"name": "a"}, "value": 5, "globalDefault": True},
               {"metadata": {"name": "b"}, "value": 3, "globalDefault": True},
               {"metadata": {"name": "c"}, "value": 1}]
    assert default_class(classes) == classes[1]  # several (a race): the lowest value, as kube picks
    assert default_class(classes[2:]) is None
    assert known_system_class_error("system-node-critical", 2000001000, False) is None
    assert known_system_class_error("system-node-critical", 1, False) == \
        "value of system-node-critical PriorityClass must be 2000001000"
    assert known_system_class_error("system-cluster-critical", 2000000000, True) == \
        "globalDefault of system-cluster-critical PriorityClass must be false"
    assert known_system_class_error("system-x", 1, False) == "system-x is not a known system priority class"
