"""The OCI spec kube-lite writes for a container: each securityContext setting, argv, env, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from isthmus.local.kubelite.containers import ContainerConfigError
from isthmus.local.kubelite.oci import (
    DEFAULT_CAPABILITIES,
    CreateContainerError,
    ImageConfig,
    SysctlForbiddenError,
    container_argv,
    container_env,
    known_capabilities,
    runtime_spec,
)
from isthmus.local.kubelite.volumes import Mount

UID = "0b5e2a44-1111-2222-3333-444455556666"


def pod_of(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "shop", "uid": UID},
            "spec": {"containers": [container], **spec}}


def spec_for(container: dict[str, Any] | None = None, image: ImageConfig | None = None, *,
             rootfs: Path | None = None, mounts: list[Any] | None = None, **pod_spec: Any) -> dict[str, Any]:
    c = {"name": "app", "image": "busybox", **(container or {})}
    img = image or ImageConfig(cmd=["sh"])
    return runtime_spec(pod=pod_of(c, **pod_spec), container=c, image=img, argv=["sh"], env=["PATH=/bin"],
                        mounts=mounts or [], rootfs=rootfs or Path("/nonexistent-rootfs"),
                        netns_path="/run/netns/pod", cgroups_path="/kubepods/x", hostname="web",
                        memory_capacity=8 * 2**30, devices=lambda: [{"path": "/dev/null", "type": "c"}])


# --- image config, argv, env -------------------------------------------------------------------


def test_image_config_from_the_config_blob_or_its_inner_object() -> None:
    inner = {"Entrypoint": ["/ep"], "Cmd": ["a"], "Env": ["A=1"], "WorkingDir": "/w", "User": "10:20"}
    for doc in (inner, {"architecture": "amd64", "config": inner}):
        assert ImageConfig.from_oci_config(doc) == ImageConfig(["/ep"], ["a"], ["A=1"], "/w", "10:20")
    assert ImageConfig.from_oci_config({"config": {}}) == ImageConfig()


IMG = ImageConfig(entrypoint=["/ep", "-x"], cmd=["serve", "--port=80"])


@pytest.mark.parametrize(("container", "argv"), [
    ({}, ["/ep", "-x", "serve", "--port=80"]),
    ({"args": ["run"]}, ["/ep", "-x", "run"]),
    ({"command": ["/bin/sh"]}, ["/bin/sh"]),
    ({"command": ["/bin/sh"], "args": ["-c", "true"]}, ["/bin/sh", "-c", "true"]),
])
def test_argv_follows_kube_command_and_args_rules(container: dict[str, Any], argv: list[str]) -> None:
    assert container_argv(container, IMG) == argv


def test_argv_expands_only_what_kube_gives() -> None:
    def expand(s: str) -> str:
        return s.replace("$(PORT)", "8080")

    assert container_argv({"args": ["--port=$(PORT)"]}, IMG, expand=expand) == ["/ep", "-x", "--port=8080"]
    assert container_argv({}, ImageConfig(cmd=["$(PORT)"]), expand=expand) == ["$(PORT)"]


def test_an_empty_entrypoint_is_cleared_and_nothing_to_run_is_containerds_error() -> None:
    assert container_argv({}, ImageConfig(entrypoint=[""], cmd=["sh"])) == ["sh"]
    with pytest.raises(CreateContainerError) as e:
        container_argv({}, ImageConfig(), container_id="abc")
    assert str(e.value) == 'failed to generate container "abc" spec: failed to generate spec: no command specified'
    assert e.value.reason == "CreateContainerError"


def test_env_image_first_kube_overrides_by_name_default_path() -> None:
    assert container_env([], {}) == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    env = container_env(["PATH=/opt/bin", "LANG=C", "A=image"], {"A": "kube", "B": "2"}, hostname="web-0")
    assert env == ["PATH=/opt/bin", "HOSTNAME=web-0", "LANG=C", "A=kube", "B=2"]


# --- process -----------------------------------------------------------------------------------


def test_defaults_are_containerds() -> None:
    s = spec_for()
    p = s["process"]
    assert s["ociVersion"] == "1.0.2"
    assert p["user"] == {"uid": 0, "gid": 0, "additionalGids": [0]}
    assert p["cwd"] == "/"
    assert p["noNewPrivileges"] is False  # kube's default: allowPrivilegeEscalation unset
    caps = p["capabilities"]
    assert caps["bounding"] == caps["effective"] == caps["permitted"] == list(DEFAULT_CAPABILITIES)
    assert caps["inheritable"] == [] and caps["ambient"] == []
    assert s["root"] == {"path": "/nonexistent-rootfs", "readonly": False}
    assert s["hostname"] == "web"
    assert "seccomp" not in s["linux"]  # kubelet's SeccompDefault off: Unconfined
    assert s["linux"]["maskedPaths"][:3] == ["/proc/acpi", "/proc/asound", "/proc/kcore"]
    assert "/proc/sys" in s["linux"]["readonlyPaths"]


def test_working_dir_pod_over_image() -> None:
    assert spec_for(image=ImageConfig(cmd=["sh"], working_dir="/srv"))["process"]["cwd"] == "/srv"
    assert spec_for({"workingDir": "/app"}, ImageConfig(cmd=["sh"], working_dir="/srv"))["process"]["cwd"] == "/app"


def test_allow_privilege_escalation_false_sets_no_new_privileges() -> None:
    assert spec_for({"securityContext": {"allowPrivilegeEscalation": False}})["process"]["noNewPrivileges"] is True
    assert spec_for({"securityContext": {"allowPrivilegeEscalation": True}})["process"]["noNewPrivileges"] is False


def test_run_as_user_and_group_container_over_pod() -> None:
    s = spec_for({"securityContext": {"runAsUser": 1001}},
                 securityContext={"runAsUser": 5, "runAsGroup": 7, "supplementalGroups": [100, 7], "fsGroup": 2000})
    assert s["process"]["user"] == {"uid": 1001, "gid": 7, "additionalGids": [7, 100, 2000]}


def write_rootfs(tmp_path: Path) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0::/root:/bin/sh\nnginx:x:101:102::/:/bin/false\n")
    (etc / "group").write_text("root:x:0:\nnginx:x:102:\nwww:x:33:nginx,other\n")
    return tmp_path


def test_image_user_numeric_and_named(tmp_path: Path) -> None:
    rootfs = write_rootfs(tmp_path)
    assert spec_for(image=ImageConfig(cmd=["sh"], user="1000:3000"), rootfs=rootfs)["process"]["user"] == \
        {"uid": 1000, "gid": 3000, "additionalGids": [3000]}
    # A uid with a passwd entry takes its gid and its groups.
    assert spec_for(image=ImageConfig(cmd=["sh"], user="101"), rootfs=rootfs)["process"]["user"] == \
        {"uid": 101, "gid": 102, "additionalGids": [102, 33]}
    assert spec_for(image=ImageConfig(cmd=["sh"], user="nginx:www"), rootfs=rootfs)["process"]["user"] == \
        {"uid": 101, "gid": 33, "additionalGids": [33]}
    # runAsUser replaces the image's user and its group.
    assert spec_for({"securityContext": {"runAsUser": 7}}, ImageConfig(cmd=["sh"], user="101:5"),
                    rootfs=rootfs)["process"]["user"]["gid"] == 0


def test_unknown_user_or_group_name_is_refused(tmp_path: Path) -> None:
    rootfs = write_rootfs(tmp_path)
    with pytest.raises(CreateContainerError, match="unable to find user ghost: no matching entries in passwd file"):
        spec_for(image=ImageConfig(cmd=["sh"], user="ghost"), rootfs=rootfs)
    with pytest.raises(CreateContainerError, match="unable to find group ghosts: no matching entries in group file"):
        spec_for(image=ImageConfig(cmd=["sh"], user="nginx:ghosts"), rootfs=rootfs)


POD_REF = f'"web_shop({UID})"'


def test_run_as_non_root_refusals_have_kubes_messages() -> None:
    with pytest.raises(ContainerConfigError) as e:
        spec_for({"securityContext": {"runAsNonRoot": True}})
    assert str(e.value) == f"container has runAsNonRoot and image will run as root (pod: {POD_REF}, container: app)"
    with pytest.raises(ContainerConfigError) as e:
        spec_for(image=ImageConfig(cmd=["sh"], user="nginx"), securityContext={"runAsNonRoot": True})
    assert str(e.value) == ("container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user "
                            f"is non-root (pod: {POD_REF}, container: app)")
    with pytest.raises(ContainerConfigError) as e:
        spec_for({"securityContext": {"runAsNonRoot": True, "runAsUser": 0}})
    assert str(e.value) == f"container's runAsUser breaks non-root policy (pod: {POD_REF}, container: app)"


def test_run_as_non_root_passes_for_a_non_root_user() -> None:
    assert spec_for({"securityContext": {"runAsNonRoot": True, "runAsUser": 65532}})["process"]["user"]["uid"] == 65532
    s = spec_for(image=ImageConfig(cmd=["sh"], user="65532"), securityContext={"runAsNonRoot": True})
    assert s["process"]["user"]["uid"] == 65532


# --- capabilities ------------------------------------------------------------------------------


def caps_of(capabilities: dict[str, Any]) -> list[str]:
    s = spec_for({"securityContext": {"capabilities": capabilities}})
    c = s["process"]["capabilities"]
    assert c["bounding"] == c["effective"] == c["permitted"]
    assert c["inheritable"] == [] and c["ambient"] == []
    return list(c["bounding"])


def test_capabilities_add_and_drop_with_or_without_prefix() -> None:
    assert caps_of({"add": ["NET_ADMIN"], "drop": ["CAP_KILL", "mknod"]}) == [
        c for c in DEFAULT_CAPABILITIES if c not in ("CAP_KILL", "CAP_MKNOD")] + ["CAP_NET_ADMIN"]
    assert caps_of({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}) == ["CAP_NET_BIND_SERVICE"]
    assert caps_of({"drop": ["ALL"]}) == []
    assert caps_of({"add": ["ALL"]}) == known_capabilities()
    assert caps_of({"add": ["ALL"], "drop": ["ALL"]}) == []
    assert caps_of({"add": ["ALL"], "drop": ["SYS_ADMIN"]}) == [c for c in known_capabilities() if c != "CAP_SYS_ADMIN"]


def test_privileged_gets_everything_and_no_confinement() -> None:
    s = spec_for({"securityContext": {"privileged": True, "seccompProfile": {"type": "RuntimeDefault"}}})
    assert s["process"]["capabilities"]["bounding"] == known_capabilities()
    assert "seccomp" not in s["linux"]
    assert s["linux"]["maskedPaths"] == [] and s["linux"]["readonlyPaths"] == []
    assert s["linux"]["devices"] == [{"path": "/dev/null", "type": "c"}]
    assert s["linux"]["resources"]["devices"] == [{"allow": True, "access": "rwm"}]
    sys_mount = next(m for m in s["mounts"] if m["destination"] == "/sys")
    assert "ro" not in sys_mount["options"]


def test_read_only_root_filesystem() -> None:
    assert spec_for({"securityContext": {"readOnlyRootFilesystem": True}})["root"]["readonly"] is True


# --- seccomp -----------------------------------------------------------------------------------


def test_runtime_default_seccomp_container_or_pod_level() -> None:
    for s in (spec_for({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}),
              spec_for(securityContext={"seccompProfile": {"type": "RuntimeDefault"}})):
        prof = s["linux"]["seccomp"]
        assert prof["defaultAction"] == "SCMP_ACT_ERRNO" and prof["defaultErrnoRet"] == 1
        allowed = prof["syscalls"][0]["names"]
        assert "read" in allowed and "unshare" not in allowed and "mount" not in allowed and "keyctl" not in allowed
        clone = next(r for r in prof["syscalls"] if r["names"] == ["clone"])
        assert clone["args"][0]["op"] == "SCMP_CMP_MASKED_EQ"
    # The container's Unconfined beats the pod's RuntimeDefault.
    s = spec_for({"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
                 securityContext={"seccompProfile": {"type": "RuntimeDefault"}})
    assert "seccomp" not in s["linux"]


def test_runtime_default_widens_with_capabilities() -> None:
    s = spec_for({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}, "seccompProfile": {"type": "RuntimeDefault"}}})
    prof = s["linux"]["seccomp"]
    assert "mount" in prof["syscalls"][0]["names"] and "unshare" in prof["syscalls"][0]["names"]
    assert not any(r["names"] == ["clone"] for r in prof["syscalls"][1:])


def test_localhost_seccomp_profile_loaded_or_refused(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps({"defaultAction": "SCMP_ACT_LOG"}))
    c = {"name": "app", "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}}
    s = runtime_spec(pod=pod_of(c), container=c, image=ImageConfig(cmd=["sh"]), argv=["sh"], env=[], mounts=[],
                     rootfs="/r", netns_path=None, cgroups_path="/x", hostname="h", seccomp_root=tmp_path)
    assert s["linux"]["seccomp"] == {"defaultAction": "SCMP_ACT_LOG"}
    c["securityContext"]["seccompProfile"]["localhostProfile"] = "missing.json"
    with pytest.raises(CreateContainerError) as e:
        runtime_spec(pod=pod_of(c), container=c, image=ImageConfig(cmd=["sh"]), argv=["sh"], env=[], mounts=[],
                     rootfs="/r", netns_path=None, cgroups_path="/x", hostname="h", seccomp_root=tmp_path)
    assert str(e.value) == (f'failed to generate seccomp spec opts: cannot load seccomp profile "{tmp_path}/missing.json": '
                            f"open {tmp_path}/missing.json: no such file or directory")


def test_seccomp_without_runtime_support_is_refused_not_ignored() -> None:
    c = {"name": "app", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}
    with pytest.raises(CreateContainerError, match="seccomp is not supported"):
        runtime_spec(pod=pod_of(c), container=c, image=ImageConfig(cmd=["sh"]), argv=["sh"], env=[], mounts=[],
                     rootfs="/r", netns_path=None, cgroups_path="/x", hostname="h", seccomp=False)


# --- sysctls -----------------------------------------------------------------------------------


def test_namespaced_sysctls_pass_through() -> None:
    sysctls = [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}, {"name": "kernel.shm_rmid_forced", "value": "1"},
               {"name": "kernel.sem", "value": "250 32000 100 128"}, {"name": "fs/mqueue/msg_max", "value": "20"}]
    s = spec_for(securityContext={"sysctls": sysctls})
    assert s["linux"]["sysctl"] == {"net.ipv4.ip_unprivileged_port_start": "0", "kernel.shm_rmid_forced": "1",
                                    "kernel.sem": "250 32000 100 128", "fs.mqueue.msg_max": "20"}


@pytest.mark.parametrize(("sysctl", "pod_spec", "message"), [
    ("kernel.hostname", {}, 'forbidden sysctl: "kernel.hostname" not allowlisted'),
    ("vm.swappiness", {}, 'forbidden sysctl: "vm.swappiness" not allowlisted'),
    ("net.core.somaxconn", {"hostNetwork": True}, 'forbidden sysctl: "net.core.somaxconn" not allowed with host net enabled'),
    ("kernel.msgmax", {"hostIPC": True}, 'forbidden sysctl: "kernel.msgmax" not allowed with host ipc enabled'),
])
def test_forbidden_sysctls_refused_with_kubelets_message(sysctl: str, pod_spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SysctlForbiddenError) as e:
        spec_for(securityContext={"sysctls": [{"name": sysctl, "value": "1"}]}, **pod_spec)
    assert str(e.value) == message
    assert e.value.reason == "SysctlForbidden"


# --- resources, namespaces, mounts, annotations ------------------------------------------------


def test_memory_and_cpu_as_the_kubelet_computes_them() -> None:
    r = spec_for({"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1500m", "memory": "128Mi"}}})
    res = r["linux"]["resources"]
    assert res["memory"]["limit"] == 128 * 2**20
    assert res["cpu"] == {"shares": 256, "period": 100000, "quota": 150000}
    assert r["process"]["oomScoreAdj"] == 1000 - (1000 * 64 * 2**20) // (8 * 2**30)  # Burstable
    # A limit alone is also the request (API defaulting): Guaranteed.
    g = spec_for({"resources": {"limits": {"cpu": "1m", "memory": "1Gi"}}})
    assert g["linux"]["resources"]["cpu"] == {"shares": 2, "period": 100000, "quota": 1000}
    assert g["process"]["oomScoreAdj"] == -997
    b = spec_for()
    assert b["linux"]["resources"]["cpu"] == {"shares": 2, "period": 100000}
    assert "memory" not in b["linux"]["resources"]
    assert b["process"]["oomScoreAdj"] == 1000  # BestEffort


def test_namespaces() -> None:
    ns = {n["type"]: n.get("path") for n in spec_for()["linux"]["namespaces"]}
    assert ns == {"mount": None, "pid": None, "ipc": None, "uts": None, "network": "/run/netns/pod"}
    host = {n["type"] for n in spec_for(hostPID=True, hostIPC=True)["linux"]["namespaces"]}
    assert host == {"mount", "uts", "network"}


def test_default_mounts_and_volume_mounts() -> None:
    s = spec_for(mounts=[Mount("/data", "/var/vol/data", options=["rbind", "rprivate", "ro"]),
                         Mount("/dev/shm", "/pods/x/shm")])
    dests = [m["destination"] for m in s["mounts"]]
    assert dests == ["/proc", "/dev", "/dev/pts", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/data", "/dev/shm"]
    cgroup = next(m for m in s["mounts"] if m["destination"] == "/sys/fs/cgroup")
    assert cgroup["type"] == "cgroup" and "ro" in cgroup["options"]
    assert s["mounts"][-2] == {"destination": "/data", "type": "bind", "source": "/var/vol/data",
                               "options": ["rbind", "rprivate", "ro"]}
    # A volume on /dev replaces every default under it.
    dests = [m["destination"] for m in spec_for(mounts=[Mount("/dev", "/x")])["mounts"]]
    assert dests == ["/proc", "/sys", "/sys/fs/cgroup", "/dev"]


def test_annotations_name_the_container_and_its_sandbox() -> None:
    a = spec_for()["annotations"]
    assert a["io.kubernetes.cri.container-name"] == "app"
    assert a["io.kubernetes.cri.container-type"] == "container"
    assert a["io.kubernetes.cri.sandbox-name"] == "web"
    assert a["io.kubernetes.cri.sandbox-namespace"] == "shop"
    assert a["io.kubernetes.cri.sandbox-uid"] == UID
    assert a["io.kubernetes.cri.image-name"] == "busybox"
