"""The OCI runtime spec (``config.json``) of one container, as containerd's CRI plugin writes it.

kube-lite in runc mode hands runc what a kubelet + containerd would: the kubelet's decisions
(which user, ``runAsNonRoot``, the QoS class's OOM score, CPU shares and quota from requests and
limits, which sysctls a pod may set) and containerd's spec on top of them (its default mounts,
capability set, masked paths, ``RuntimeDefault`` seccomp profile, how image ``USER``/``ENV``/
``ENTRYPOINT``/``CMD`` combine with the Pod's). Everything here is pure but the two reads a
runtime does from the image's rootfs (``/etc/passwd`` and ``/etc/group``, to resolve a user name)
and, for privileged containers, the host's device nodes. docs/runc.md lists every setting and
every place this differs from containerd.

Errors carry kube's text and the container status ``reason`` a kubelet would show:
:class:`ContainerConfigError` (``CreateContainerConfigError``: runAsNonRoot) and its subclasses
:class:`CreateContainerError` (containerd refused the spec) and :class:`SysctlForbiddenError`
(the kubelet's admission refuses the whole Pod: ``SysctlForbidden``).
"""

from __future__ import annotations

import json
import os
import platform
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from isthmus.local.kubelite.containers import ContainerConfigError, quantity

__all__ = [
    "DEFAULT_CAPABILITIES",
    "DEFAULT_PATH",
    "ContainerConfigError",
    "CreateContainerError",
    "ImageConfig",
    "SysctlForbiddenError",
    "check_sysctls",
    "container_argv",
    "container_env",
    "default_seccomp_profile",
    "qos_class",
    "runtime_spec",
]

OCI_VERSION = "1.0.2"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Obj = Mapping[str, Any]


class CreateContainerError(ContainerConfigError):
    """containerd could not build the spec: the kubelet shows ``CreateContainerError``."""

    reason = "CreateContainerError"


class SysctlForbiddenError(ContainerConfigError):
    """The kubelet's sysctl admission refused the Pod: it fails with reason ``SysctlForbidden``."""

    reason = "SysctlForbidden"


# --- the image --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageConfig:
    """What of an OCI image's config a runtime uses to start a container."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    working_dir: str = ""
    user: str = ""

    @classmethod
    def from_oci_config(cls, doc: Mapping[str, Any]) -> ImageConfig:
        """From an image config blob (``{"config": {...}}``) or its inner ``config`` object."""
        inner = doc.get("config") if isinstance(doc.get("config"), Mapping) else doc
        c: Mapping[str, Any] = inner or {}
        return cls(
            entrypoint=[str(x) for x in c.get("Entrypoint") or []],
            cmd=[str(x) for x in c.get("Cmd") or []],
            env=[str(x) for x in c.get("Env") or []],
            working_dir=str(c.get("WorkingDir") or ""),
            user=str(c.get("User") or ""),
        )


def container_argv(container: Obj, image: ImageConfig, *, expand: Callable[[str], str] = str,
                   container_id: str = "") -> list[str]:
    """The process's argv: kube's ``command`` replaces ENTRYPOINT and drops CMD, ``args`` alone
    replace CMD, neither keeps ENTRYPOINT + CMD (containerd's WithProcessArgs, moby's rule).
    ``expand`` is the kubelet's ``$(VAR)`` expansion, applied to command and args only."""
    command = [expand(str(c)) for c in container.get("command") or []]
    args = [expand(str(a)) for a in container.get("args") or []]
    if not command:
        if not args:
            args = list(image.cmd)
        # An ENTRYPOINT of [""] is moby's way to clear it.
        if image.entrypoint != [""]:
            command = list(image.entrypoint)
    argv = [*command, *args]
    if not argv:
        raise CreateContainerError(
            f'failed to generate container "{container_id}" spec: failed to generate spec: no command specified')
    return argv


def _set_env(env: list[str], entry: str) -> None:
    """containerd's replaceOrAppendEnvValues: a later value of a name replaces it in place."""
    name = entry.split("=", 1)[0]
    for i, existing in enumerate(env):
        if existing.split("=", 1)[0] == name:
            env[i] = entry
            return
    env.append(entry)


def container_env(image_env: Iterable[str], kube_env: Mapping[str, str] | Iterable[tuple[str, str]], *,
                  hostname: str | None = None) -> list[str]:
    """The process environment: containerd's default PATH, ``HOSTNAME``, the image's ``ENV``, then
    the kubelet's variables, each later one replacing a name already set."""
    env = [f"PATH={DEFAULT_PATH}"]
    if hostname is not None:
        _set_env(env, f"HOSTNAME={hostname}")
    for e in image_env:
        _set_env(env, e)
    pairs = kube_env.items() if isinstance(kube_env, Mapping) else kube_env
    for k, v in pairs:
        _set_env(env, f"{k}={v}")
    return env


# --- users ------------------------------------------------------------------------------------


def _pod_ref(pod: Obj) -> str:
    """kubelet's format.Pod: ``name_namespace(uid)``."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('name', '')}_{meta.get('namespace') or 'default'}({meta.get('uid', '')})"


def _effective(pod: Obj, container: Obj, key: str) -> Any:
    """A securityContext field that the container may set and the Pod defaults."""
    csc = container.get("securityContext") or {}
    if csc.get(key) is not None:
        return csc[key]
    return ((pod.get("spec") or {}).get("securityContext") or {}).get(key)


def _read_db(rootfs: Path | None, name: str) -> list[list[str]]:
    """``/etc/passwd`` or ``/etc/group`` of the image, colon-split; absent (or a symlink, which we
    will not follow out of the rootfs) reads as empty, as in an image without those files."""
    if rootfs is None:
        return []
    path = rootfs / "etc" / name
    try:
        if path.is_symlink():
            return []
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def _is_int(s: str) -> bool:
    return s.isdigit()


@dataclass(frozen=True)
class User:
    uid: int
    gid: int
    additional_gids: list[int]


def resolve_user(userstr: str, rootfs: Path | None) -> User:
    """containerd's WithUser + WithAdditionalGIDs for ``user[:group]`` (names read from the rootfs)."""
    user_part, _, group_part = userstr.partition(":")
    passwd = _read_db(rootfs, "passwd")
    groups = _read_db(rootfs, "group")
    name: str | None = None
    if user_part == "":
        uid, gid = 0, 0
    elif _is_int(user_part):
        uid = int(user_part)
        entry = next((p for p in passwd if len(p) > 3 and p[2] == user_part), None)
        # A uid without an /etc/passwd entry runs with gid 0, as containerd's WithUserID.
        gid = int(entry[3]) if entry and _is_int(entry[3]) else 0
        name = entry[0] if entry else None
    else:
        entry = next((p for p in passwd if len(p) > 3 and p[0] == user_part), None)
        if entry is None or not _is_int(entry[2]) or not _is_int(entry[3]):
            raise CreateContainerError(
                f"unable to find user {user_part}: no matching entries in passwd file")
        uid, gid, name = int(entry[2]), int(entry[3]), user_part
    if group_part:
        if _is_int(group_part):
            gid = int(group_part)
        else:
            g = next((g for g in groups if len(g) > 2 and g[0] == group_part), None)
            if g is None or not _is_int(g[2]):
                raise CreateContainerError(
                    f"unable to find group {group_part}: no matching entries in group file")
            gid = int(g[2])
    extra = [gid]
    if name:
        for g in groups:
            if len(g) > 3 and g[0] != name and name in g[3].split(",") and _is_int(g[2]) \
                    and int(g[2]) not in extra:
                extra.append(int(g[2]))
    return User(uid, gid, extra)


def _user_string(pod: Obj, container: Obj, image: ImageConfig) -> str:
    """The kubelet fills runAsUser from the image when unset; containerd then resolves the pair."""
    run_as_user = _effective(pod, container, "runAsUser")
    run_as_group = _effective(pod, container, "runAsGroup")
    image_user, _, image_group = image.user.partition(":")
    user = str(run_as_user) if run_as_user is not None else (image_user or "0")
    if run_as_group is not None:
        group = str(run_as_group)
    else:
        # Only the image's own USER keeps its group: runAsUser alone takes the gid from passwd.
        group = image_group if run_as_user is None else ""
    return f"{user}:{group}" if group else user


def verify_run_as_non_root(pod: Obj, container: Obj, image: ImageConfig) -> None:
    """kubelet's verifyRunAsNonRoot, with its messages."""
    if not _effective(pod, container, "runAsNonRoot"):
        return
    cname = container.get("name", "")
    run_as_user = _effective(pod, container, "runAsUser")
    if run_as_user is not None:
        if int(run_as_user) == 0:
            raise ContainerConfigError(
                f'container\'s runAsUser breaks non-root policy (pod: "{_pod_ref(pod)}", container: {cname})')
        return
    user = image.user.split(":", 1)[0]
    if user == "" or (_is_int(user) and int(user) == 0):
        raise ContainerConfigError(
            f'container has runAsNonRoot and image will run as root (pod: "{_pod_ref(pod)}", container: {cname})')
    if not _is_int(user):
        raise ContainerConfigError(
            f"container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is "
            f'non-root (pod: "{_pod_ref(pod)}", container: {cname})')


# --- capabilities -----------------------------------------------------------------------------

DEFAULT_CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
)
"""containerd's default set (oci.defaultUnixCaps)."""

_ALL_CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
    "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
)
"""In kernel number order (capability.h), so the running kernel's ``cap_last_cap`` cuts it."""


def known_capabilities() -> list[str]:
    """Every capability this kernel knows that kube-lite itself holds: containerd's
    WithAllCurrentCapabilities (runc cannot grant what its caller lacks; this host's bounding set
    may be narrower than the kernel's list)."""
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = len(_ALL_CAPABILITIES) - 1
    held = (1 << (last + 1)) - 1
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                held = int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return [c for i, c in enumerate(_ALL_CAPABILITIES[: last + 1]) if held >> i & 1]


def _cap(name: Any) -> str:
    n = str(name).upper()
    return n if n.startswith("CAP_") else f"CAP_{n}"


def capability_set(container: Obj) -> list[str]:
    """containerd CRI's WithCapabilities: add ALL, then drop ALL, then the named adds, then drops."""
    sc = container.get("securityContext") or {}
    if sc.get("privileged"):
        return known_capabilities()
    caps = list(DEFAULT_CAPABILITIES)
    spec = sc.get("capabilities") or {}
    add = [str(c).upper() for c in spec.get("add") or []]
    drop = [str(c).upper() for c in spec.get("drop") or []]
    if "ALL" in add:
        caps = known_capabilities()
    if "ALL" in drop:
        caps = []
    for c in add:
        if c != "ALL" and _cap(c) not in caps:
            caps.append(_cap(c))
    dropped = {_cap(c) for c in drop if c != "ALL"}
    return [c for c in caps if c not in dropped]


# --- seccomp ----------------------------------------------------------------------------------

_BASE_SYSCALLS = """
accept accept4 access adjtimex alarm bind brk cachestat capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64
clock_nanosleep clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2
dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait
epoll_wait_old eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2 fadvise64
fadvise64_64 fallocate fanotify_mark fchdir fchmod fchmodat fchmodat2 fchown fchown32 fchownat
fcntl fcntl64 fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstat64
fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex futex_requeue futex_time64
futex_wait futex_waitv futex_wake futimesat getcpu getcwd getdents getdents64 getegid getegid32
geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp
getpid getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32 getrlimit
get_robust_list getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday
getuid getuid32 getxattr inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel
ioctl io_destroy io_getevents io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup
io_submit ipc kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown
lchown32 lgetxattr link linkat listen listxattr llistxattr _llseek lremovexattr lseek lsetxattr
lstat lstat64 madvise map_shadow_stack membarrier memfd_create memfd_secret mincore mkdir mkdirat
mknod mknodat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl
msgget msgrcv msgsnd msync munlock munlockall munmap nanosleep newfstatat _newselect open openat
openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll
ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6
pselect6_time64 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv recvfrom
recvmmsg recvmmsg_time64 recvmsg remap_file_pages removexattr rename renameat renameat2
restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn
rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity
sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler
sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam
sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop semtimedop_time64
send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid
setgid32 setgroups setgroups32 setitimer setpgid setpriority setregid setregid32 setresgid
setresgid32 setresuid setresuid32 setreuid setreuid32 setrlimit set_robust_list setsid
setsockopt set_thread_area set_tid_address setuid setuid32 setxattr shmat shmctl shmdt shmget
shutdown sigaltstack signalfd signalfd4 sigprocmask sigreturn socket socketcall socketpair splice
stat stat64 statfs statfs64 statx symlink symlinkat sync sync_file_range syncfs sysinfo tee
tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_gettime64
timer_settime timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime
timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat utime
utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev
process_vm_readv process_vm_writev ptrace
"""
"""Allowed for every container (the kernel here is newer than 4.8, the floor for the ptrace line)."""

_CAP_SYSCALLS: dict[str, tuple[str, ...]] = {
    "CAP_DAC_READ_SEARCH": ("open_by_handle_at",),
    "CAP_SYS_ADMIN": ("bpf", "clone", "clone3", "fanotify_init", "fsconfig", "fsmount", "fsopen",
                      "fspick", "lookup_dcookie", "mount", "mount_setattr", "move_mount",
                      "name_to_handle_at", "open_tree", "perf_event_open", "quotactl",
                      "quotactl_fd", "setdomainname", "sethostname", "setns", "syslog", "umount",
                      "umount2", "unshare"),
    "CAP_SYS_BOOT": ("reboot",),
    "CAP_SYS_CHROOT": ("chroot",),
    "CAP_SYS_MODULE": ("delete_module", "init_module", "finit_module"),
    "CAP_SYS_PACCT": ("acct",),
    "CAP_SYS_PTRACE": ("kcmp", "pidfd_getfd", "process_madvise"),
    "CAP_SYS_RAWIO": ("iopl", "ioperm"),
    "CAP_SYS_TIME": ("settimeofday", "stime", "clock_settime", "clock_settime64"),
    "CAP_SYS_TTY_CONFIG": ("vhangup",),
    "CAP_SYS_NICE": ("get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"),
    "CAP_SYSLOG": ("syslog",),
    "CAP_BPF": ("bpf",),
    "CAP_PERFMON": ("perf_event_open",),
}
"""Syscalls a capability unlocks, as containerd's and moby's default profiles group them."""

_CLONE_NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET: what clone may not ask without SYS_ADMIN."""

_ARCHES = {
    "x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    "aarch64": ["SCMP_ARCH_ARM", "SCMP_ARCH_AARCH64"],
}

_ERRNO_EPERM, _ERRNO_ENOSYS = 1, 38


def default_seccomp_profile(capabilities: Sequence[str]) -> dict[str, Any]:
    """containerd's RuntimeDefault shape: deny (EPERM) by default, an allowlist, more syscalls for
    the capabilities the container holds, ``clone`` without namespace flags unless SYS_ADMIN,
    ``clone3`` answered ENOSYS (so libcs fall back to the filterable ``clone``), ``personality``
    only for the harmless personas. Syscalls unknown to this libseccomp are skipped by runc."""
    caps = set(capabilities)
    allowed = _BASE_SYSCALLS.split()
    for cap, names in _CAP_SYSCALLS.items():
        if cap in caps:
            allowed.extend(n for n in names if n not in allowed)
    syscalls: list[dict[str, Any]] = [{"names": allowed, "action": "SCMP_ACT_ALLOW"}]
    for persona in (0x0, 0x0008, 0x20000, 0x20008, 0xFFFFFFFF):
        syscalls.append({"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                         "args": [{"index": 0, "value": persona, "op": "SCMP_CMP_EQ"}]})
    if platform.machine() in ("x86_64", "i686"):
        syscalls.append({"names": ["arch_prctl", "modify_ldt"], "action": "SCMP_ACT_ALLOW"})
    if "CAP_SYS_ADMIN" not in caps:
        syscalls.append({"names": ["clone"], "action": "SCMP_ACT_ALLOW",
                         "args": [{"index": 0, "value": _CLONE_NAMESPACE_FLAGS, "valueTwo": 0,
                                   "op": "SCMP_CMP_MASKED_EQ"}]})
        syscalls.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": _ERRNO_ENOSYS})
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": _ERRNO_EPERM,
        "architectures": _ARCHES.get(platform.machine(), []),
        "syscalls": syscalls,
    }


def _seccomp(pod: Obj, container: Obj, caps: Sequence[str], *, supported: bool,
             localhost_root: Path | None) -> dict[str, Any] | None:
    sc = container.get("securityContext") or {}
    if sc.get("privileged"):
        return None
    profile = _effective(pod, container, "seccompProfile") or {}
    kind = str(profile.get("type") or "Unconfined")
    if kind == "Unconfined":
        return None
    if not supported:
        raise CreateContainerError("failed to generate seccomp spec opts: seccomp is not supported")
    if kind == "RuntimeDefault":
        return default_seccomp_profile(caps)
    if kind == "Localhost":
        root = localhost_root or Path("/var/lib/kubelet/seccomp")
        path = root / str(profile.get("localhostProfile") or "")
        try:
            loaded = json.loads(path.read_text())
        except FileNotFoundError:
            raise CreateContainerError(
                f'failed to generate seccomp spec opts: cannot load seccomp profile "{path}": '
                f"open {path}: no such file or directory") from None
        except (OSError, ValueError) as e:
            raise CreateContainerError(
                f'failed to generate seccomp spec opts: cannot load seccomp profile "{path}": {e}') from None
        if not isinstance(loaded, dict):
            raise CreateContainerError(
                f'failed to generate seccomp spec opts: cannot load seccomp profile "{path}": not an object')
        return loaded
    raise CreateContainerError(f'failed to generate seccomp spec opts: unknown seccomp profile type "{kind}"')


# --- sysctls ----------------------------------------------------------------------------------

_SYSCTL_EXACT = {"kernel.sem": "ipc"}
_SYSCTL_PREFIXES = (("kernel.shm", "ipc"), ("kernel.msg", "ipc"), ("fs.mqueue.", "ipc"), ("net.", "net"))
"""The namespaced sysctls: kube-lite acts as a kubelet started with ``--allowed-unsafe-sysctls``
naming all of them (the safe set is a subset)."""


def _normalize_sysctl(name: str) -> str:
    """kube's sysctl.NormalizeName: ``a/b.c/d`` (slash-separated) is ``a.b/c.d``."""
    first_dot, first_slash = name.find("."), name.find("/")
    if first_slash != -1 and (first_dot == -1 or first_slash < first_dot):
        return name.translate(str.maketrans("./", "/."))
    return name


def check_sysctls(pod: Obj) -> dict[str, str]:
    """The kubelet's sysctl admission: the Pod's sysctls as ``linux.sysctl``, or
    :class:`SysctlForbiddenError` with its message."""
    spec = pod.get("spec") or {}
    out: dict[str, str] = {}
    for s in (spec.get("securityContext") or {}).get("sysctls") or []:
        name = _normalize_sysctl(str(s.get("name") or ""))
        ns = _SYSCTL_EXACT.get(name) or next((n for p, n in _SYSCTL_PREFIXES if name.startswith(p)), None)
        if ns is None:
            raise SysctlForbiddenError(f'forbidden sysctl: "{name}" not allowlisted')
        if (ns == "net" and spec.get("hostNetwork")) or (ns == "ipc" and spec.get("hostIPC")):
            raise SysctlForbiddenError(f'forbidden sysctl: "{name}" not allowed with host {ns} enabled')
        out[name] = str(s.get("value") if s.get("value") is not None else "")
    return out


# --- resources --------------------------------------------------------------------------------

MIN_SHARES, MAX_SHARES, QUOTA_PERIOD, MIN_QUOTA = 2, 262144, 100000, 1000


def _resource(container: Obj, which: str, name: str) -> Decimal | None:
    res = container.get("resources") or {}
    raw = (res.get(which) or {}).get(name)
    if raw is None and which == "requests":
        raw = (res.get("limits") or {}).get(name)  # API defaulting: requests default to limits
    return quantity(raw) if raw is not None else None


def qos_class(pod: Obj) -> str:
    """kube's QoS class (v1qos.GetPodQOS) from cpu and memory requests/limits."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    any_set, guaranteed = False, True
    for c in containers:
        for name in ("cpu", "memory"):
            req, lim = _resource(c, "requests", name), _resource(c, "limits", name)
            if req is not None or lim is not None:
                any_set = True
            if lim is None or req != lim:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def oom_score_adj(pod: Obj, container: Obj, memory_capacity: int) -> int:
    """kubelet's GetContainerOOMScoreAdjust."""
    if (pod.get("spec") or {}).get("priority", 0) >= 2_000_000_000:
        return -997  # system-critical pods
    qos = qos_class(pod)
    if qos == "Guaranteed":
        return -997
    if qos == "BestEffort":
        return 1000
    request = int(_resource(container, "requests", "memory") or 0)
    adj = 1000 - (1000 * request) // max(memory_capacity, 1)
    if adj < 3:
        return 3
    return 999 if adj == 1000 else adj


def linux_resources(container: Obj) -> dict[str, Any]:
    """kubelet's calculateLinuxResources, then containerd's WithResources (zero means unset)."""
    cpu_request = _resource(container, "requests", "cpu")
    cpu_limit = _resource(container, "limits", "cpu")
    mem_limit = _resource(container, "limits", "memory")
    milli = int((cpu_request if cpu_request is not None else Decimal(0)) * 1000)
    shares = MIN_SHARES if milli == 0 else min(max(milli * 1024 // 1000, MIN_SHARES), MAX_SHARES)
    cpu: dict[str, Any] = {"shares": shares, "period": QUOTA_PERIOD}
    if cpu_limit is not None and cpu_limit > 0:
        cpu["quota"] = max(int(cpu_limit * 1000) * QUOTA_PERIOD // 1000, MIN_QUOTA)
    out: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}], "cpu": cpu}
    if mem_limit is not None and int(mem_limit) > 0:
        limit = int(mem_limit)
        memory: dict[str, Any] = {"limit": limit}
        # Memory+swap equal to memory: no swapping by default (when the swap controller exists).
        if Path("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists():
            memory["swap"] = limit
        out["memory"] = memory
    return out


# --- mounts and devices -----------------------------------------------------------------------


class MountLike(Protocol):
    destination: str
    source: str
    type: str
    options: list[str]


def default_mounts(*, privileged: bool) -> list[dict[str, Any]]:
    """containerd's default mounts, with the CRI's changes (no /run, a read-only cgroup mount; both
    writable for privileged containers)."""
    ro = [] if privileged else ["ro"]
    return [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", *ro]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["nosuid", "noexec", "nodev", "relatime", *ro]},
    ]


MASKED_PATHS = [
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/sys/devices/virtual/powercap", "/proc/scsi",
]
READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


def _merge_mounts(defaults: list[dict[str, Any]], mounts: Sequence[MountLike | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """containerd CRI's WithMounts: a supplied mount replaces a default at the same destination (a
    supplied /dev every default under it); supplied mounts go after, shallowest first."""
    given: list[dict[str, Any]] = []
    for m in mounts:
        if isinstance(m, Mapping):
            given.append(dict(m))
        else:
            given.append({"destination": m.destination, "type": m.type, "source": m.source,
                          "options": list(m.options)})
    dests = {os.path.normpath(m["destination"]) for m in given}
    kept = [m for m in defaults
            if os.path.normpath(m["destination"]) not in dests
            and not ("/dev" in dests and m["destination"].startswith("/dev/"))]
    given.sort(key=lambda m: len([p for p in os.path.normpath(m["destination"]).split("/") if p]))
    return kept + given


_SKIP_DEV = {"pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"}


def host_devices(root: Path = Path("/dev")) -> list[dict[str, Any]]:
    """The host's device nodes, what a privileged container gets (containerd's HostDevices)."""
    out: list[dict[str, Any]] = []

    def walk(d: Path) -> None:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            return
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name not in _SKIP_DEV:
                    walk(Path(e.path))
                continue
            if e.name == "console":
                continue
            try:
                st = os.lstat(e.path)
            except OSError:
                continue
            kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else None
            if kind is None:
                continue
            out.append({"path": e.path, "type": kind, "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev),
                        "fileMode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid})

    walk(root)
    return out


# --- the spec ---------------------------------------------------------------------------------


def oom_floor() -> int:
    """The lowest oomScoreAdj this process can give its containers: any with CAP_SYS_RESOURCE (as the
    kubelet, itself at -999), else its own value (the kernel refuses to go lower without it, and runc
    then fails the whole container: "can't get final child's PID from pipe: EOF")."""
    try:
        status = Path("/proc/self/status").read_text()
        eff = int(status.split("CapEff:")[1].split()[0], 16)
        if eff >> 24 & 1:  # CAP_SYS_RESOURCE
            return -1000
        return int(Path("/proc/self/oom_score_adj").read_text().strip())
    except (OSError, ValueError, IndexError):
        return -1000


def _memory_capacity() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 34


def runtime_spec(
    *,
    pod: Obj,
    container: Obj,
    image: ImageConfig,
    argv: Sequence[str],
    env: Sequence[str],
    mounts: Sequence[MountLike | Mapping[str, Any]],
    rootfs: Path | str,
    netns_path: str | None,
    cgroups_path: str,
    hostname: str,
    seccomp: bool = True,
    image_rootfs: Path | None = None,
    ipc_ns_path: str | None = None,
    uts_ns_path: str | None = None,
    pid_ns_path: str | None = None,
    sandbox_id: str | None = None,
    image_name: str | None = None,
    seccomp_root: Path | None = None,
    memory_capacity: int | None = None,
    oom_score_floor: int = -1000,
    pids_limit: int | None = None,
    devices: Callable[[], list[dict[str, Any]]] = host_devices,
) -> dict[str, Any]:
    """config.json for ``runc run``.

    ``rootfs`` is the bundle's root path as runc sees it; ``image_rootfs`` (default: ``rootfs``) is
    where the image's ``/etc/passwd`` and ``/etc/group`` are read to resolve a user name.
    ``netns_path`` is the pod's network namespace (the node's for hostNetwork pods); ``None`` only
    in tests. ``ipc_ns_path``/``uts_ns_path``/``pid_ns_path`` join a namespace the Pod already has
    (the first container's, as a sandbox's), else the container gets its own.
    ``seccomp`` says whether this runc can load profiles.
    """
    spec_ = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    sc = container.get("securityContext") or {}
    privileged = bool(sc.get("privileged"))

    verify_run_as_non_root(pod, container, image)
    sysctls = check_sysctls(pod)
    user = resolve_user(_user_string(pod, container, image), Path(image_rootfs or rootfs))
    additional = list(user.additional_gids)
    psc = spec_.get("securityContext") or {}
    for g in [*(psc.get("supplementalGroups") or []), *([psc["fsGroup"]] if psc.get("fsGroup") is not None else [])]:
        if int(g) not in additional:
            additional.append(int(g))

    caps = capability_set(container)
    ape = sc.get("allowPrivilegeEscalation")
    process: dict[str, Any] = {
        "terminal": False,
        "user": {"uid": user.uid, "gid": user.gid, "additionalGids": additional},
        "args": list(argv),
        "env": list(env),
        "cwd": str(container.get("workingDir") or image.working_dir or "/"),
        "capabilities": {"bounding": caps, "effective": list(caps), "permitted": list(caps),
                         "inheritable": [], "ambient": []},
        # kubelet's AddNoNewPrivileges: only an explicit allowPrivilegeEscalation=false sets it.
        "noNewPrivileges": ape is False,
        "oomScoreAdj": max(oom_score_adj(pod, container, memory_capacity or _memory_capacity()), oom_score_floor),
    }

    namespaces: list[dict[str, Any]] = [{"type": "mount"}]
    if not spec_.get("hostPID"):
        namespaces.append({"type": "pid", **({"path": pid_ns_path} if pid_ns_path else {})})
    if not spec_.get("hostIPC"):
        namespaces.append({"type": "ipc", **({"path": ipc_ns_path} if ipc_ns_path else {})})
    namespaces.append({"type": "uts", **({"path": uts_ns_path} if uts_ns_path else {})})
    if netns_path is not None:
        namespaces.append({"type": "network", "path": netns_path})

    resources = linux_resources(container)
    if pids_limit is not None and pids_limit > 0:
        resources["pids"] = {"limit": pids_limit}
    linux: dict[str, Any] = {
        "namespaces": namespaces,
        "resources": resources,
        "cgroupsPath": cgroups_path,
        "sysctl": sysctls,
        "maskedPaths": [] if privileged else list(MASKED_PATHS),
        "readonlyPaths": [] if privileged else list(READONLY_PATHS),
    }
    if privileged:
        linux["devices"] = devices()
        resources["devices"] = [{"allow": True, "access": "rwm"}]
    profile = _seccomp(pod, container, caps, supported=seccomp, localhost_root=seccomp_root)
    if profile is not None:
        linux["seccomp"] = profile

    return {
        "ociVersion": OCI_VERSION,
        "process": process,
        "root": {"path": str(rootfs), "readonly": bool(sc.get("readOnlyRootFilesystem"))},
        "hostname": hostname,
        "mounts": _merge_mounts(default_mounts(privileged=privileged), mounts),
        "annotations": {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.container-name": str(container.get("name") or ""),
            "io.kubernetes.cri.image-name": str(image_name or container.get("image") or ""),
            "io.kubernetes.cri.sandbox-id": str(sandbox_id or meta.get("uid") or ""),
            "io.kubernetes.cri.sandbox-name": str(meta.get("name") or ""),
            "io.kubernetes.cri.sandbox-namespace": str(meta.get("namespace") or "default"),
            "io.kubernetes.cri.sandbox-uid": str(meta.get("uid") or ""),
        },
        "linux": linux,
    }
