"""Pod Security Standards checks and namespace policy labels, with the messages kube's own tests
(k8s.io/pod-security-admission/policy) expect."""

from __future__ import annotations

from typing import Any

import pytest

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.admission.podsecurity.checks import (
    capabilities_restricted,
    evaluate,
    forbidden_detail,
    run_as_non_root,
)
from isthmus.apiserver.admission.podsecurity.plugin import (
    PodSecurity,
    evaluate_pods_in_namespace,
    is_significant_pod_update,
)
from isthmus.apiserver.admission.podsecurity.policy import LevelVersion, policy_from_labels
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.authentication.authenticators import ADMIN
from isthmus.apiserver.registry.resources import ResourceInfo

P = "pod-security.kubernetes.io/"


def detail(level: str, spec: dict[str, Any], meta: dict[str, Any] | None = None,
           version: tuple[int, int] | None = None) -> str:
    return forbidden_detail(evaluate(level, version, meta or {}, spec))


def test_restricted_on_a_bare_pod_names_the_four_failures_in_kubes_order() -> None:
    spec = {"containers": [{"name": "c"}]}
    assert detail("restricted", spec) == (
        'allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
        '"Localhost")')
    assert detail("baseline", spec) == "" and detail("privileged", {"hostNetwork": True}) == ""


def test_baseline_checks() -> None:
    assert detail("baseline", {"hostNetwork": True, "hostPID": True, "hostIPC": True}) == \
        "host namespaces (hostNetwork=true, hostPID=true, hostIPC=true)"
    assert detail("baseline", {"containers": [
        {"name": "a"}, {"name": "d", "securityContext": {"privileged": True}},
        {"name": "e", "securityContext": {"privileged": True}}]}) == \
        'privileged (containers "d", "e" must not set securityContext.privileged=true)'
    assert detail("baseline", {"containers": [{"name": "a", "securityContext": {"capabilities": {
        "add": ["FOO", "BAR", "CHOWN"]}}}]}) == \
        'non-default capabilities (container "a" must not include "BAR", "FOO" in securityContext.capabilities.add)'
    assert detail("baseline", {"containers": [{"name": "a", "ports": [{"hostPort": 8080}, {"hostPort": 80}]},
                                              {"name": "b", "ports": [{"containerPort": 1}]}]}) == \
        'hostPort (container "a" uses hostPorts 80, 8080)'
    assert detail("baseline", {"volumes": [{"name": "a", "hostPath": {"path": "/"}}, {"name": "b", "emptyDir": {}}]}) \
        == 'hostPath volumes (volume "a")'
    assert detail("baseline", {"securityContext": {"sysctls": [{"name": "a"}, {"name": "net.ipv4.tcp_rmem"},
                                                               {"name": "b"}]}}) == "forbidden sysctls (a, b)"
    assert detail("baseline", {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem"}]}},
                  version=(1, 31)) == "forbidden sysctls (net.ipv4.tcp_rmem)"
    assert detail("baseline", {"containers": [{"name": "d", "securityContext": {"procMount": "Unmasked"}}]}) == \
        'procMount (container "d" must not set securityContext.procMount to "Unmasked")'
    assert detail("baseline", {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}) == \
        'forbidden AppArmor profile (pod must not set AppArmor profile type to "Unconfined")'
    assert detail("baseline", {}, meta={"annotations": {
        "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/b": "runtime/default"}}) == \
        ('forbidden AppArmor profile (annotation must not set AppArmor profile type to '
         '"container.apparmor.security.beta.kubernetes.io/e="unconfined"")')
    assert detail("baseline", {"securityContext": {"seLinuxOptions": {"type": "bar", "user": "u"}}}) == \
        'seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "bar"; user may not be set)'
    assert detail("baseline", {"containers": [{"name": "a", "securityContext": {
        "seccompProfile": {"type": "Unconfined"}}}]}) == \
        'seccompProfile (container "a" must not set securityContext.seccompProfile.type to "Unconfined")'
    assert detail("baseline", {"securityContext": {"windowsOptions": {"hostProcess": True}}}) == \
        "hostProcess (pod must not set securityContext.windowsOptions.hostProcess=true)"


def test_restricted_checks_replace_their_baseline_counterparts() -> None:
    ok = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
          "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "securityContext": ok}]}
    assert detail("restricted", spec) == ""
    spec["containers"][0]["securityContext"] = {**ok, "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}
    assert detail("restricted", spec) == \
        'unrestricted capabilities (container "c" must not include "NET_ADMIN" in securityContext.capabilities.add)'
    spec["containers"][0]["securityContext"] = {**ok, "runAsUser": 0}
    spec["volumes"] = [{"name": "h", "hostPath": {"path": "/"}}, {"name": "n", "nfs": {}}, {"name": "p", "projected": {}}]
    assert detail("restricted", spec) == ('restricted volume types (volumes "h", "n" use restricted volume types '
                                          '"hostPath", "nfs"), runAsUser=0 (container "c" must not set runAsUser=0)')
    # runAsUser joined restricted in v1.23
    assert "runAsUser" not in detail("restricted", spec, version=(1, 22))
    windows = {"os": {"name": "windows"}, "containers": [{"name": "c", "securityContext": {"runAsNonRoot": True}}]}
    assert detail("restricted", windows) == ""


def test_namespace_labels_make_a_policy_and_invalid_ones_are_field_errors() -> None:
    p, errs = policy_from_labels({P + "enforce": "baseline", P + "enforce-version": "v1.30"})
    assert errs == [] and str(p.enforce) == "baseline:v1.30" and str(p.warn) == "baseline:v1.30"
    assert str(p.audit) == "privileged:latest"
    p, _ = policy_from_labels({P + "enforce": "baseline", P + "warn": "restricted"})
    assert str(p.warn) == "restricted:latest"
    p, errs = policy_from_labels({P + "enforce": "bogus", P + "audit": "x", P + "warn-version": "v2.0"})
    assert p.enforce.level == "restricted" and p.audit.level == "privileged"  # closed for enforce, open for audit
    assert [(e["field"], e["message"]) for e in errs] == [
        ("metadata.labels[pod-security.kubernetes.io/enforce]",
         'Invalid value: "bogus": must be one of privileged, baseline, restricted'),
        ("metadata.labels[pod-security.kubernetes.io/audit]",
         'Invalid value: "x": must be one of privileged, baseline, restricted'),
        ("metadata.labels[pod-security.kubernetes.io/warn-version]", 'Invalid value: "v2.0": must be "latest" or "v1.x"')]
    assert policy_from_labels({})[0].fully_privileged()


def test_only_container_and_image_changes_are_significant_updates() -> None:
    old = {"spec": {"containers": [{"name": "c", "image": "a"}], "hostNetwork": True}}
    assert not is_significant_pod_update({"metadata": {"labels": {"x": "y"}}, **old}, old)
    assert is_significant_pod_update({"spec": {"containers": [{"name": "c", "image": "b"}]}}, old)
    assert is_significant_pod_update({"spec": {**old["spec"], "ephemeralContainers": [{"name": "e"}]}}, old)


def test_existing_pod_warnings_group_by_violation() -> None:
    pods = [{"metadata": {"name": n}, "spec": spec} for n, spec in (
        ("b", {"hostNetwork": True}), ("a", {"hostNetwork": True}), ("c", {"hostPID": True, "volumes": [{"name": "v", "hostPath": {}}]}), ("d", {}))]
    assert evaluate_pods_in_namespace("ns", LevelVersion("baseline"), pods) == [
        'existing pods in namespace "ns" violate the new PodSecurity enforce level "baseline:latest"',
        "a (and 1 other pod): host namespaces", "c: host namespaces, hostPath volumes"]


def _namespace_request(operation: str, labels: dict[str, str],
                       old_labels: dict[str, str] | None = None) -> AdmissionRequest:
    info = ResourceInfo(group="", version="v1", plural="namespaces", singular="namespace", kind="Namespace",
                        namespaced=False)
    old = {"metadata": {"name": "n", "labels": old_labels}} if old_labels is not None else None
    return AdmissionRequest(operation, info, "", "", "n", {"metadata": {"name": "n", "labels": labels}}, old, ADMIN)


async def test_a_namespace_keeping_labels_that_were_already_invalid_may_be_updated() -> None:
    class Reads:
        reader = None
        lister = None

    plugin = PodSecurity(Reads())
    bad = {P + "enforce": "nope"}
    await plugin.validate_namespace(_namespace_request("UPDATE", {**bad, "team": "a"}, bad))  # unchanged errors
    with pytest.raises(ApiError) as e:
        await plugin.validate_namespace(_namespace_request("UPDATE", {P + "enforce": "nah"}, bad))
    assert e.value.code == 422
    with pytest.raises(ApiError):
        await plugin.validate_namespace(_namespace_request("CREATE", bad))


def test_kubes_own_multi_container_cases() -> None:
    caps = {"containers": [
        {"name": "a", "securityContext": {"capabilities": {"add": ["FOO", "BAR"]}}},
        {"name": "b", "securityContext": {"capabilities": {"add": ["BAR", "BAZ"]}}},
        {"name": "c", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}}}]}
    assert capabilities_restricted({}, caps) == ("unrestricted capabilities", (
        'containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers "a", "b", "c" must not '
        'include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add'))
    non_root = {"securityContext": {"runAsNonRoot": True}, "containers": [
        {"name": "a"}, {"name": "b", "securityContext": {"runAsNonRoot": True}},
        {"name": "c", "securityContext": {"runAsNonRoot": False}},
        {"name": "d", "securityContext": {"runAsNonRoot": False}}]}
    assert run_as_non_root({}, non_root) == (
        "runAsNonRoot != true", 'containers "c", "d" must not set securityContext.runAsNonRoot=false')
    selinux = {"securityContext": {"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}}, "containers": [
        {"name": "a", "securityContext": {"seLinuxOptions": {"type": "container_t"}}},
        {"name": "d", "securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}},
        {"name": "e", "securityContext": {"seLinuxOptions": {"type": "bar"}}},
        {"name": "f", "securityContext": {"seLinuxOptions": {"user": "bar"}}},
        {"name": "g", "securityContext": {"seLinuxOptions": {"role": "baz"}}}]}
    assert detail("baseline", selinux) == (
        'seLinuxOptions (pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: '
        'types "bar", "foo"; user may not be set; role may not be set)')
    assert "container_engine_t" in detail("baseline", selinux, version=(1, 30))  # allowed from v1.31
