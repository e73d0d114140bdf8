"""The Pod Security Standards' checks as k8s.io/pod-security-admission v1.32 defines them.

Each check has versions (the first Kubernetes minor it applies from); a policy at version v runs,
per check, the newest version not newer than v. Restricted runs every baseline check except the
ones a restricted check replaces (capabilities, seccomp, volumes). Results keep kube's order
(baseline check IDs sorted, then restricted ones) because users compare the message text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from isthmus.apiserver.apimachinery.errors import go_quote

Obj = dict[str, Any]
Version = tuple[int, int]
# What "latest" evaluates as: the newest check versions this server knows (kube-apiserver v1.32).
MAX_VERSION: Version = (1, 32)

# (reason, detail) of a failed check; None when the check passes.
Result = tuple[str, str] | None
CheckFn = Callable[[Obj, Obj], Result]


@dataclass(frozen=True)
class Versioned:
    minimum: Version
    fn: CheckFn
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    id: str
    level: str  # "baseline" | "restricted"
    versions: tuple[Versioned, ...] = field(default_factory=tuple)


def _d(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def containers(spec: Obj) -> Iterator[Obj]:
    """Init containers, containers, then ephemeral containers, as kube's visitContainers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in _l(spec.get(key)):
            if isinstance(c, dict):
                yield c


def _sc(c: Obj) -> Obj:
    return _d(c.get("securityContext"))


def _name(c: Obj) -> str:
    return str(c.get("name", ""))


def join_quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def pluralize(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _containers_phrase(names: list[str]) -> str:
    return f"{pluralize('container', 'containers', len(names))} {join_quote(names)}"


def _windows(spec: Obj) -> bool:
    return _d(spec.get("os")).get("name") == "windows"


# ---------------------------------------------------------------- baseline

def host_process(meta: Obj, spec: Obj) -> Result:
    bad = [_name(c) for c in containers(spec) if _d(_sc(c).get("windowsOptions")).get("hostProcess") is True]
    setters = ["pod"] if _d(_d(spec.get("securityContext")).get("windowsOptions")).get("hostProcess") is True else []
    if bad:
        setters.append(_containers_phrase(bad))
    if setters:
        return "hostProcess", f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"
    return None


def host_namespaces(meta: Obj, spec: Obj) -> Result:
    used = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k) is True]
    return ("host namespaces", ", ".join(used)) if used else None


def privileged(meta: Obj, spec: Obj) -> Result:
    bad = [_name(c) for c in containers(spec) if _sc(c).get("privileged") is True]
    if bad:
        return "privileged", f"{_containers_phrase(bad)} must not set securityContext.privileged=true"
    return None


BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})


def capabilities_baseline(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    caps: set[str] = set()
    for c in containers(spec):
        added = [str(a) for a in _l(_d(_sc(c).get("capabilities")).get("add")) if str(a) not in BASELINE_CAPABILITIES]
        if added:
            bad.append(_name(c))
            caps.update(added)
    if bad:
        return "non-default capabilities", (f"{_containers_phrase(bad)} must not include {join_quote(sorted(caps))} "
                                            "in securityContext.capabilities.add")
    return None


def host_path_volumes(meta: Obj, spec: Obj) -> Result:
    bad = [str(v.get("name", "")) for v in _l(spec.get("volumes")) if isinstance(v, dict) and "hostPath" in v
           and v["hostPath"] is not None]
    if bad:
        return "hostPath volumes", f"{pluralize('volume', 'volumes', len(bad))} {join_quote(bad)}"
    return None


def host_ports(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    ports: set[str] = set()
    for c in containers(spec):
        used = [str(p.get("hostPort")) for p in _l(c.get("ports")) if isinstance(p, dict) and p.get("hostPort")]
        if used:
            bad.append(_name(c))
            ports.update(used)
    if bad:
        return "hostPort", (f"{_containers_phrase(bad)} {pluralize('uses', 'use', len(bad))} "
                            f"{pluralize('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}")
    return None


APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def _apparmor_bad(profile: Any) -> str | None:
    kind = str(_d(profile).get("type", ""))
    return None if profile is None or kind in ("RuntimeDefault", "Localhost") else kind


def app_armor(meta: Obj, spec: Obj) -> Result:
    setters: list[str] = []
    values: set[str] = set()
    pod_bad = _apparmor_bad(_d(spec.get("securityContext")).get("appArmorProfile"))
    if pod_bad is not None:
        setters.append("pod")
        values.add(pod_bad)
    bad: list[str] = []
    for c in containers(spec):
        kind = _apparmor_bad(_sc(c).get("appArmorProfile"))
        if kind is not None:
            bad.append(_name(c))
            values.add(kind)
    if bad:
        setters.append(_containers_phrase(bad))
    annotations = sorted(f"{k}={go_quote(str(v))}" for k, v in _d(meta.get("annotations")).items()
                         if k.startswith(APPARMOR_ANNOTATION_PREFIX)
                         and not (v == "" or v == "runtime/default" or str(v).startswith("localhost/")))
    listed = sorted(values) + annotations
    if annotations:
        setters.append(pluralize("annotation", "annotations", len(annotations)))
    if setters:
        return (pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed)),
                f"{' and '.join(setters)} must not set AppArmor profile type to {join_quote(listed)}")
    return None


def _selinux(allowed: frozenset[str]) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result:
        types: set[str] = set()
        flags = {"user": False, "role": False}

        def valid(opts: Obj) -> bool:
            ok = True
            if str(opts.get("type", "")) not in allowed:
                ok = False
                types.add(str(opts.get("type", "")))
            for k in ("user", "role"):
                if opts.get(k):
                    ok = False
                    flags[k] = True
            return ok

        setters: list[str] = []
        pod_opts = _d(spec.get("securityContext")).get("seLinuxOptions")
        if isinstance(pod_opts, dict) and not valid(pod_opts):
            setters.append("pod")
        bad = [_name(c) for c in containers(spec)
               if isinstance(_sc(c).get("seLinuxOptions"), dict) and not valid(_sc(c)["seLinuxOptions"])]
        if bad:
            setters.append(_containers_phrase(bad))
        if not setters:
            return None
        data = [f"{pluralize('type', 'types', len(types))} {join_quote(sorted(types))}"] if types else []
        data += [f"{k} may not be set" for k in ("user", "role") if flags[k]]
        return "seLinuxOptions", (f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: "
                                  f"{'; '.join(data)}")
    return check


SELINUX_TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
SELINUX_TYPES_1_31 = SELINUX_TYPES_1_0 | {"container_engine_t"}


def proc_mount(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    kinds: set[str] = set()
    for c in containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(_name(c))
            kinds.add(str(mount))
    if bad:
        return "procMount", f"{_containers_phrase(bad)} must not set securityContext.procMount to {join_quote(sorted(kinds))}"
    return None


SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"


def seccomp_baseline_1_0(meta: Obj, spec: Obj) -> Result:
    annotations = _d(meta.get("annotations"))

    def valid(v: Any) -> bool:
        return v in ("runtime/default", "docker/default") or str(v).startswith("localhost/")

    forbidden: set[str] = set()
    keys = [SECCOMP_POD_ANNOTATION] + [SECCOMP_CONTAINER_ANNOTATION_PREFIX + _name(c) for c in containers(spec)]
    for key in keys:
        if key in annotations and not valid(annotations[key]):
            forbidden.add(f"{key}={go_quote(str(annotations[key]))}")
    if forbidden:
        return "seccompProfile", (f"forbidden {pluralize('annotation', 'annotations', len(forbidden))} "
                                  f"{', '.join(sorted(forbidden))}")
    return None


def _seccomp_valid(profile: Obj) -> bool:
    return profile.get("type") in ("Localhost", "RuntimeDefault")


def _seccomp(restricted: bool) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result:
        setters: list[str] = []
        values: set[str] = set()
        pod_set = False
        pod_profile = _d(spec.get("securityContext")).get("seccompProfile")
        if isinstance(pod_profile, dict):
            if not _seccomp_valid(pod_profile):
                setters.append("pod")
                values.add(str(pod_profile.get("type", "")))
            else:
                pod_set = True
        explicit: list[str] = []
        implicit: list[str] = []
        for c in containers(spec):
            profile = _sc(c).get("seccompProfile")
            if isinstance(profile, dict):
                if not _seccomp_valid(profile):
                    explicit.append(_name(c))
                    values.add(str(profile.get("type", "")))
            elif not pod_set:
                implicit.append(_name(c))
        if explicit:
            setters.append(_containers_phrase(explicit))
        if setters:
            return "seccompProfile", (f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
                                      f"{join_quote(sorted(values))}")
        if restricted and implicit:
            return "seccompProfile", (f"pod or {_containers_phrase(implicit)} must set "
                                      'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"')
        return None
    return check


SYSCTLS_1_0 = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                         "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start"})
SYSCTLS_1_27 = SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
SYSCTLS_1_29 = SYSCTLS_1_27 | {"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                               "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SYSCTLS_1_32 = SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}


def _sysctls(allowed: frozenset[str]) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result:
        bad = [str(s.get("name", "")) for s in _l(_d(spec.get("securityContext")).get("sysctls"))
               if isinstance(s, dict) and str(s.get("name", "")) not in allowed]
        return ("forbidden sysctls", ", ".join(bad)) if bad else None
    return check


# ---------------------------------------------------------------- restricted

def _not_windows(fn: CheckFn) -> CheckFn:
    """The 1.25 versions of restricted checks: Windows pods are exempt from Linux-only fields."""
    def check(meta: Obj, spec: Obj) -> Result:
        return None if _windows(spec) else fn(meta, spec)
    return check


# Volume sources restricted allows; anything else is named by its field (kube's list).
ALLOWED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                             "persistentVolumeClaim", "projected", "secret"})
KNOWN_VOLUMES = ("hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs",
                 "rbd", "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume", "quobyte",
                 "azureDisk", "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos")


def restricted_volumes(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    kinds: set[str] = set()
    for v in _l(spec.get("volumes")):
        if not isinstance(v, dict):
            continue
        sources = {k for k, s in v.items() if k != "name" and s is not None}
        if sources & ALLOWED_VOLUMES:
            continue
        bad.append(str(v.get("name", "")))
        kinds.add(next((k for k in KNOWN_VOLUMES if k in sources), "unknown"))
    if bad:
        return "restricted volume types", (
            f"{pluralize('volume', 'volumes', len(bad))} {join_quote(bad)} {pluralize('uses', 'use', len(bad))} "
            f"{pluralize('restricted volume type', 'restricted volume types', len(kinds))} {join_quote(sorted(kinds))}")
    return None


def allow_privilege_escalation(meta: Obj, spec: Obj) -> Result:
    bad = [_name(c) for c in containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if bad:
        return "allowPrivilegeEscalation != false", (
            f"{_containers_phrase(bad)} must set securityContext.allowPrivilegeEscalation=false")
    return None


def run_as_non_root(meta: Obj, spec: Obj) -> Result:
    setters: list[str] = []
    pod_value = _d(spec.get("securityContext")).get("runAsNonRoot")
    if pod_value is False:
        setters.append("pod")
    explicit: list[str] = []
    implicit: list[str] = []
    for c in containers(spec):
        value = _sc(c).get("runAsNonRoot")
        if value is not None:
            if value is False:
                explicit.append(_name(c))
        elif pod_value is not True:
            implicit.append(_name(c))
    if explicit:
        setters.append(_containers_phrase(explicit))
    if setters:
        return "runAsNonRoot != true", f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return "runAsNonRoot != true", f"pod or {_containers_phrase(implicit)} must set securityContext.runAsNonRoot=true"
    return None


def run_as_user(meta: Obj, spec: Obj) -> Result:
    setters = ["pod"] if _d(spec.get("securityContext")).get("runAsUser") == 0 else []
    bad = [_name(c) for c in containers(spec) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_containers_phrase(bad))
    if setters:
        return "runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0"
    return None


def capabilities_restricted(meta: Obj, spec: Obj) -> Result:
    missing: list[str] = []
    adding: list[str] = []
    caps: set[str] = set()
    for c in containers(spec):
        capabilities = _sc(c).get("capabilities")
        if not isinstance(capabilities, dict):
            missing.append(_name(c))
            continue
        if "ALL" not in [str(x) for x in _l(capabilities.get("drop"))]:
            missing.append(_name(c))
        added = [str(a) for a in _l(capabilities.get("add")) if str(a) != "NET_BIND_SERVICE"]
        if added:
            adding.append(_name(c))
            caps.update(added)
    details = []
    if missing:
        details.append(f'{_containers_phrase(missing)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_containers_phrase(adding)} must not include {join_quote(sorted(caps))} in "
                       "securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


CHECKS: tuple[Check, ...] = (
    Check("allowPrivilegeEscalation", "restricted", (
        Versioned((1, 8), allow_privilege_escalation), Versioned((1, 25), _not_windows(allow_privilege_escalation)))),
    Check("appArmorProfile", "baseline", (Versioned((1, 0), app_armor),)),
    Check("capabilities_baseline", "baseline", (Versioned((1, 0), capabilities_baseline),)),
    Check("capabilities_restricted", "restricted", (
        Versioned((1, 22), capabilities_restricted, ("capabilities_baseline",)),
        Versioned((1, 25), _not_windows(capabilities_restricted), ("capabilities_baseline",)))),
    Check("hostNamespaces", "baseline", (Versioned((1, 0), host_namespaces),)),
    Check("hostPathVolumes", "baseline", (Versioned((1, 0), host_path_volumes),)),
    Check("hostPorts", "baseline", (Versioned((1, 0), host_ports),)),
    Check("privileged", "baseline", (Versioned((1, 0), privileged),)),
    Check("procMount", "baseline", (Versioned((1, 0), proc_mount),)),
    Check("restrictedVolumes", "restricted", (Versioned((1, 0), restricted_volumes, ("hostPathVolumes",)),)),
    Check("runAsNonRoot", "restricted", (Versioned((1, 0), run_as_non_root),)),
    Check("runAsUser", "restricted", (Versioned((1, 23), run_as_user),)),
    Check("seLinuxOptions", "baseline", (
        Versioned((1, 0), _selinux(SELINUX_TYPES_1_0)), Versioned((1, 31), _selinux(SELINUX_TYPES_1_31)))),
    Check("seccompProfile_baseline", "baseline", (
        Versioned((1, 0), seccomp_baseline_1_0), Versioned((1, 19), _seccomp(False)))),
    Check("seccompProfile_restricted", "restricted", (
        Versioned((1, 19), _seccomp(True), ("seccompProfile_baseline",)),
        Versioned((1, 25), _not_windows(_seccomp(True)), ("seccompProfile_baseline",)))),
    Check("sysctls", "baseline", (
        Versioned((1, 0), _sysctls(SYSCTLS_1_0)), Versioned((1, 27), _sysctls(SYSCTLS_1_27)),
        Versioned((1, 29), _sysctls(SYSCTLS_1_29)), Versioned((1, 32), _sysctls(SYSCTLS_1_32)))),
    Check("windowsHostProcess", "baseline", (Versioned((1, 0), host_process),)),
)

_ORDER = sorted(c.id for c in CHECKS if c.level == "baseline") + sorted(c.id for c in CHECKS if c.level == "restricted")
_cache: dict[tuple[str, Version], list[CheckFn]] = {}


def _at(check: Check, version: Version) -> Versioned | None:
    found = None
    for v in check.versions:
        if v.minimum <= version:
            found = v
    return found


def checks_for(level: str, version: Version | None) -> list[CheckFn]:
    """The check functions `level` runs at `version` (None: latest), in kube's order."""
    v = MAX_VERSION if version is None or version > MAX_VERSION else version
    key = (level, v)
    if key in _cache:
        return _cache[key]
    if level not in ("baseline", "restricted"):
        _cache[key] = []
        return []
    active = {c.id: (c, found) for c in CHECKS if (c.level == "baseline" or level == "restricted")
              for found in [_at(c, v)] if found is not None}
    overridden = {o for c, found in active.values() if c.level == "restricted" for o in found.overrides}
    fns = [active[i][1].fn for i in _ORDER if i in active and i not in overridden]
    _cache[key] = fns
    return fns


def evaluate(level: str, version: Version | None, meta: Obj, spec: Obj) -> list[tuple[str, str]]:
    """The failed checks' (reason, detail), in order; empty when the pod meets the level."""
    failed = []
    for fn in checks_for(level, version):
        result = fn(meta, spec)
        if result is not None:
            failed.append(result)
    return failed


def forbidden_detail(failed: list[tuple[str, str]]) -> str:
    """AggregateCheckResult.ForbiddenDetail: `reason (detail), reason (detail)`."""
    return ", ".join(f"{r} ({d})" if d else r for r, d in failed)


def forbidden_reason(failed: list[tuple[str, str]]) -> str:
    return ", ".join(r for r, _ in failed)
