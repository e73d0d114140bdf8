"""A node's images, pulled by reference as a kubelet pulls them (runc mode; docs/images-pull.md).

What a kubelet and containerd do between them, for one node:

- **References** are normalised as docker does (``busybox`` → ``docker.io/library/busybox:latest``);
  one that does not parse is kube's ``InvalidImageName`` with the kubelet's message.
- **imagePullPolicy**: ``Always`` resolves the tag at the registry on every start (layers already
  here are not fetched again), ``IfNotPresent`` pulls only what the node lacks, ``Never`` refuses
  with ``ErrImageNeverPull``; no policy is defaulted from the tag as the apiserver would
  (``:latest`` or none → Always, else IfNotPresent).
- **Mirrors** (``--registry-mirror docker.io=http://10.255.0.2:5000``) replace a registry host, as
  containerd's ``hosts.toml`` mirrors do, without falling back to the real host: the clusterset's
  network has no way out, and a test must never reach the internet. A mirror named by an
  ``http://`` URL (or a registry in ``insecure``) is spoken to without TLS.
- **imagePullSecrets** become credentials matched to the image's registry as the kubelet's
  credential keyring matches them (most specific key first, ``*`` globs per host label, the
  Docker Hub keys), each tried in turn; an image no key matches is pulled anonymously.
- **The store** (``<kube-lite root>/images``): an OCI layout (``oci/``) holding every image by
  its normalised reference, each image's root filesystem unpacked once at
  ``rootfs/<manifest digest hex>/`` and never written again (containers mount it as an overlay
  lowerdir), and ``refs.json`` (reference → manifest digest, registry digest, size). Writers
  (pulls here, ``isthmus image load`` in another process) take ``lock`` (flock) for the layout;
  two pulls of one image (with the same credentials) share one skopeo run.

Pulls run Debian's ``skopeo`` inside the node's network namespace (``nsenter --net``), with a
private, empty ``registries.conf`` and no ambient credentials, so nothing on the host changes what
a pull reaches or sends.

**What the caller (kube-lite's pod worker) shows**, as the kubelet's image manager does
(pkg/kubelet/images/image_manager.go), with the message helpers below:

- before a pull: Event ``Normal Pulling`` :func:`pulling_message`; after it ``Normal Pulled``
  :func:`pulled_message` (``Successfully pulled image "x" in 1.2s (1.2s including waiting).
  Image size: N bytes.``); with nothing to pull ``Normal Pulled`` :func:`present_message`
  (``Container image "x" already present on machine``). :meth:`ImageStore.ensure` calls
  ``on_pulling`` just before it pulls, and :attr:`PulledImage.pulled` says which one happened.
- a failed pull (:class:`ImagePullError`, ``reason`` ``ErrImagePull``): Event ``Warning Failed``
  :func:`failed_message` then ``Warning Failed`` ``Error: ErrImagePull`` (:func:`error_message`),
  the container waiting with reason ``ErrImagePull`` and the error's message; then
  :class:`PullBackOff` ``.next(key)``. While ``.in_backoff(key)`` (10 s doubling to 300 s, per
  pod UID and image, :func:`backoff_key`) the worker does not pull: Event ``Normal BackOff``
  :func:`backoff_message`, ``Warning Failed`` ``Error: ImagePullBackOff``, waiting reason
  ``ImagePullBackOff`` with the same ``Back-off pulling image "x"`` message. A pull that
  succeeds later needs no reset: the kubelet leaves the entry to expire, and so may the worker.
- ``Never`` and absent (:class:`ImageNeverPullError`, reason ``ErrImageNeverPull``): Event
  ``Warning ErrImageNeverPull`` with the message, waiting reason ``ErrImageNeverPull``; no back-off.
- a bad reference (:class:`InvalidImageNameError`, reason ``InvalidImageName``): Event
  ``Warning InspectFailed`` with the message, waiting reason ``InvalidImageName``; no back-off.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isthmus.local.kubelite.oci import ImageConfig

__all__ = [
    "ALWAYS",
    "BACKOFF_INITIAL",
    "BACKOFF_MAX",
    "IF_NOT_PRESENT",
    "NEVER",
    "DockerAuth",
    "ImageConfig",
    "ImageError",
    "ImageNeverPullError",
    "ImagePullError",
    "ImageStore",
    "InvalidImageNameError",
    "PullBackOff",
    "PulledImage",
    "Reference",
    "StoredImage",
    "auths_from_secret",
    "backoff_key",
    "backoff_message",
    "default_policy",
    "error_message",
    "failed_message",
    "go_duration",
    "lookup_auths",
    "normalize",
    "parse_reference",
    "present_message",
    "pulled_message",
    "pulling_message",
    "ref_name_decode",
    "ref_name_encode",
]

ALWAYS = "Always"
IF_NOT_PRESENT = "IfNotPresent"
NEVER = "Never"
POLICIES = (ALWAYS, IF_NOT_PRESENT, NEVER)

# Waiting reasons and Event reasons, kube's spelling (pkg/kubelet/images/types.go, events/event.go).
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
INVALID_IMAGE_NAME = "InvalidImageName"
EVENT_PULLING = "Pulling"
EVENT_PULLED = "Pulled"
EVENT_FAILED = "Failed"
EVENT_BACKOFF = "BackOff"
EVENT_INSPECT_FAILED = "InspectFailed"

BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0
PULL_TIMEOUT = 600.0
"""A pull that makes no end in this long is failed (containerd cancels a stalled one after 1 min
without progress; skopeo gives no progress to watch, so the whole pull is bounded instead)."""

SKOPEO = "skopeo"
UMOCI = "umoci"
NSENTER = "nsenter"

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_PREFIX = "library/"

CONTAINERD_NAME = "io.containerd.image.name"
OCI_REF_NAME = "org.opencontainers.image.ref.name"


# --- references (distribution/reference's grammar, docker's normalisation) ---------------------

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]*)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^((?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)(?::({_TAG}))?(?:@({_DIGEST}))?$")
_ANCHORED_ID = re.compile(r"^[a-f0-9]{64}$")
NAME_TOTAL_LENGTH_MAX = 255


class ImageError(Exception):
    """An image the node cannot give a container; ``reason`` is the container's waiting reason and
    ``message`` the kubelet's text for it."""

    reason = ERR_IMAGE_PULL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ImagePullError(ImageError):
    """The pull failed (``ErrImagePull``): containerd's ``failed to pull and unpack image ...``
    with what the registry or the network answered. The caller backs off (:class:`PullBackOff`)."""

    reason = ERR_IMAGE_PULL


class ImageNeverPullError(ImagePullError):
    """``imagePullPolicy: Never`` and the node lacks the image (``ErrImageNeverPull``)."""

    reason = ERR_IMAGE_NEVER_PULL


class InvalidImageNameError(ImagePullError):
    """The reference does not parse (``InvalidImageName``)."""

    reason = INVALID_IMAGE_NAME


@dataclass(frozen=True)
class Reference:
    """A normalised reference: ``domain/path[:tag][@digest]`` (one of tag and digest at least)."""

    domain: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """Repository without tag or digest: what the credential keyring matches."""
        return f"{self.domain}/{self.path}"

    @property
    def pull_target(self) -> str:
        """What to ask the registry for: the digest when there is one (a tag beside a digest is
        only informative, as containerd treats it)."""
        return f"@{self.digest}" if self.digest else f":{self.tag}"

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def _reference_error(image: str) -> str:
    """The reason distribution/reference gives for a reference it cannot parse."""
    if not image:
        return "invalid reference format"
    if _ANCHORED_ID.match(image):
        return f"invalid repository name ({image}), cannot specify 64-byte hexadecimal strings"
    return "invalid reference format"


def _invalid(image: str, reason: str) -> InvalidImageNameError:
    # kubelet: applyDefaultImageTag → parsers.ParseImageName → dockerref.ParseNormalizedNamed
    return InvalidImageNameError(
        f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": {reason}')


def parse_reference(image: str) -> Reference:
    """docker's ParseNormalizedNamed with the default tag applied (``TagNameOnly``); raises
    :class:`InvalidImageNameError` carrying the kubelet's message."""
    if not image or _ANCHORED_ID.match(image):
        raise _invalid(image, _reference_error(image))
    slash = image.find("/")
    first = image[:slash] if slash >= 0 else ""
    if slash < 0 or (not any(c in first for c in ".:") and first != "localhost" and first.lower() == first):
        domain, remainder = DEFAULT_DOMAIN, image
    else:
        domain, remainder = first, image[slash + 1:]
    if domain == LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_PREFIX + remainder
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        raise _invalid(image, f"invalid reference format: repository name ({remote}) must be lowercase")
    m = _REFERENCE.match(f"{domain}/{remainder}")
    if m is None:
        raise _invalid(image, "invalid reference format")
    name, tag, digest = m.group(1), m.group(2), m.group(3)
    if len(name) > NAME_TOTAL_LENGTH_MAX:
        raise _invalid(image, f"repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters")
    path = name[len(domain) + 1:]
    if tag is None and digest is None:
        tag = "latest"
    return Reference(domain=domain, path=path, tag=tag, digest=digest)


def normalize(image: str) -> str:
    """``busybox`` → ``docker.io/library/busybox:latest``; ``host:5000/x`` → ``host:5000/x:latest``;
    a digest stays. Raises :class:`InvalidImageNameError`."""
    return str(parse_reference(image))


def default_policy(image: str) -> str:
    """The apiserver's default imagePullPolicy: Always for ``:latest`` or no tag (a digest alone is
    no tag: IfNotPresent), else IfNotPresent. A reference that does not parse defaults to
    IfNotPresent, as the apiserver's defaulting ignores the error (validation says it)."""
    try:
        ref = parse_reference(image)
    except InvalidImageNameError:
        return IF_NOT_PRESENT
    return ALWAYS if ref.tag == "latest" else IF_NOT_PRESENT


# OCI ref names (image-spec annotations) allow fewer characters than docker references (no `_`,
# no `--` runs longer than two, a tag's trailing `.`): such a reference is written as `x` + its hex.
# A normalised reference always holds a `/` and an encoded name never does: reversible.
_OCI_COMPONENT = r"[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*"
_OCI_REF_NAME = re.compile(rf"^{_OCI_COMPONENT}(?:/{_OCI_COMPONENT})*$")


def ref_name_encode(reference: str) -> str:
    """The OCI layout's ref name for a normalised reference (the reference itself when it is a
    valid OCI ref name, as the usual ones are)."""
    if _OCI_REF_NAME.match(reference):
        return reference
    return "x" + reference.encode().hex()


def ref_name_decode(name: str) -> str:
    """The reference an OCI ref name written by :func:`ref_name_encode` stands for."""
    if "/" in name or not name.startswith("x"):
        return name
    try:
        return bytes.fromhex(name[1:]).decode()
    except ValueError:
        return name


# --- credentials (the kubelet's credential keyring, pkg/credentialprovider/keyring.go) -----------


@dataclass(frozen=True)
class DockerAuth:
    """One entry of an imagePullSecret: the registry key as written there (``https://index.docker.io/v1/``,
    ``quay.io/org``, ``*.example.com``) and its credentials."""

    registry: str
    username: str
    password: str

    def __repr__(self) -> str:  # never print a password in a log or a traceback
        return f"DockerAuth(registry={self.registry!r}, username={self.username!r}, password=<hidden>)"


def _entry_credentials(entry: Mapping[str, Any]) -> tuple[str, str]:
    """username and password of a docker config entry; ``auth`` (base64 user:pass) wins, as the
    kubelet's DockerConfigEntry.UnmarshalJSON decides."""
    auth = entry.get("auth")
    if auth:
        try:
            decoded = base64.b64decode(str(auth), validate=False).decode()
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot decode the auth field: {e}") from None
        user, sep, password = decoded.partition(":")
        if not sep:
            raise ValueError("unable to parse auth field, must be formatted as base64(username:password)")
        return user, password.strip("\x00")
    return str(entry.get("username") or ""), str(entry.get("password") or "")


def auths_from_secret(secret: Mapping[str, Any]) -> list[DockerAuth]:
    """The credentials of a ``kubernetes.io/dockerconfigjson`` or ``kubernetes.io/dockercfg`` Secret
    (as the API returns it: ``data`` base64); other types hold none. A damaged one raises
    ValueError (the kubelet then fails the pull with that error)."""
    kind = secret.get("type")
    data = secret.get("data") or {}
    if kind == "kubernetes.io/dockerconfigjson":
        key = ".dockerconfigjson"
    elif kind == "kubernetes.io/dockercfg":
        key = ".dockercfg"
    else:
        return []
    raw = data.get(key)
    if raw is None:
        return []
    try:
        config = json.loads(base64.b64decode(raw))
    except ValueError as e:
        raise ValueError(f"secret {key} is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"secret {key} is not a JSON object")
    entries = config.get("auths", {}) if key == ".dockerconfigjson" else config
    if not isinstance(entries, dict):
        raise ValueError(f"secret {key}: auths is not a JSON object")
    out = []
    for registry, entry in entries.items():
        if not isinstance(entry, dict):
            continue
        user, password = _entry_credentials(entry)
        out.append(DockerAuth(registry=str(registry), username=user, password=password))
    return out


def _keyring_key(registry: str) -> str:
    """The key the keyring files an entry under: scheme dropped, ``/v1/`` and ``/v2/`` meaning the
    host, a path kept (a more specific match)."""
    value = registry if registry.startswith(("https://", "http://")) else f"https://{registry}"
    parsed = urllib.parse.urlsplit(value)
    path = parsed.path
    if path.startswith(("/v2/", "/v1/")):
        path = path[3:]
    return parsed.netloc + path if path and path != "/" else parsed.netloc


def _split_host(netloc: str) -> tuple[list[str], str]:
    host, sep, port = netloc.rpartition(":")
    if not sep or not port.isdigit():
        host, port = netloc, ""
    return host.split("."), port


def _urls_match(glob: str, target: str) -> bool:
    """URLsMatchStr: same port, same number of host labels each matching as a glob, the glob's
    path a prefix of the target's."""
    g = urllib.parse.urlsplit(f"https://{glob}")
    t = urllib.parse.urlsplit(f"https://{target}")
    g_parts, g_port = _split_host(g.netloc)
    t_parts, t_port = _split_host(t.netloc)
    if g_port != t_port or len(g_parts) != len(t_parts) or not t.path.startswith(g.path):
        return False
    return all(fnmatch.fnmatchcase(tp, gp) for gp, tp in zip(g_parts, t_parts, strict=True))


def _is_default_registry_match(image: str) -> bool:
    first, sep, _ = image.partition("/")
    if not first:
        return False
    if not sep or first in (DEFAULT_DOMAIN, LEGACY_DEFAULT_DOMAIN):
        return True
    return not any(c in first for c in ".:")


def lookup_auths(auths: Iterable[DockerAuth], repository: str) -> list[DockerAuth]:
    """The credentials to try for ``repository`` (``docker.io/library/busybox``), in the kubelet's
    order: keys reverse-sorted (more specific first), every match; else the Docker Hub entry for an
    image on Docker Hub; else none (an anonymous pull)."""
    by_key: dict[str, list[DockerAuth]] = {}
    for auth in auths:
        by_key.setdefault(_keyring_key(auth.registry), []).append(auth)
    out: list[DockerAuth] = []
    for key in sorted(by_key, reverse=True):
        if _urls_match(key, repository):
            out.extend(by_key[key])
    if not out and _is_default_registry_match(repository):
        out.extend(by_key.get(LEGACY_DEFAULT_DOMAIN, []))
    return out


# --- the kubelet's messages and image back-off ---------------------------------------------------


def go_duration(seconds: float) -> str:
    """A duration as Go prints a ``time.Duration`` truncated to milliseconds (``1.234s``, ``523ms``,
    ``2m3.5s``), as the kubelet writes pull times."""
    ms = max(0, int(seconds * 1000))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest // 1000}.{rest % 1000:03d}".rstrip("0").rstrip(".")
    out = f"{secs}s"
    if hours:
        return f"{hours}h{minutes}m{out}"
    if minutes:
        return f"{minutes}m{out}"
    return out


def pulling_message(image: str) -> str:
    """Event ``Normal Pulling`` (``image`` as the container spec writes it)."""
    return f'Pulling image "{image}"'


def pulled_message(image: str, pulled: PulledImage) -> str:
    """Event ``Normal Pulled``: the pull's time and size, or that nothing had to be pulled."""
    if not pulled.pulled:
        return present_message(image)
    return (f'Successfully pulled image "{image}" in {go_duration(pulled.pull_seconds)} '
            f"({go_duration(pulled.total_seconds)} including waiting). Image size: {pulled.size} bytes.")


def present_message(image: str) -> str:
    """Event ``Normal Pulled`` when the node has the image and the policy needs no pull."""
    return f'Container image "{image}" already present on machine'


def failed_message(image: str, error: ImageError) -> str:
    """Event ``Warning Failed`` of a failed pull."""
    return f'Failed to pull image "{image}": {error.message}'


def backoff_message(image: str) -> str:
    """Event ``Normal BackOff`` and the ``ImagePullBackOff`` waiting message."""
    return f'Back-off pulling image "{image}"'


def error_message(reason: str) -> str:
    """The ``Warning Failed`` Event the kubelet adds for a container that cannot start:
    ``Error: ErrImagePull``, ``Error: ImagePullBackOff``, ``Error: InvalidImageName``."""
    return f"Error: {reason}"


def backoff_key(pod_uid: str, image: str) -> str:
    """The kubelet backs image pulls off per pod and image."""
    return f"{pod_uid}_{image}"


class PullBackOff:
    """The kubelet's image back-off (client-go flowcontrol.Backoff, 10 s doubling to 300 s, no jitter):
    after a failed pull ``next(key)``; while ``in_backoff(key)`` no pull is tried. An entry idle
    for twice the maximum starts again at 10 s."""

    def __init__(self, initial: float = BACKOFF_INITIAL, maximum: float = BACKOFF_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self._entries: dict[str, tuple[float, float]] = {}  # key → (back-off, last update)

    def next(self, key: str) -> float:
        """Record a failure; the back-off now in force."""
        now = self.clock()
        entry = self._entries.get(key)
        if entry is None or now - entry[1] > 2 * self.maximum:
            backoff = self.initial
        else:
            backoff = min(entry[0] * 2, self.maximum)
        self._entries[key] = (backoff, now)
        return backoff

    def in_backoff(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and self.clock() - entry[1] < entry[0]

    def remaining(self, key: str) -> float:
        """Seconds until a pull may be tried again (0 when it may now): when to sync again."""
        entry = self._entries.get(key)
        return 0.0 if entry is None else max(0.0, entry[0] - (self.clock() - entry[1]))

    def reset(self, key: str) -> None:
        self._entries.pop(key, None)

    def gc(self) -> None:
        """Drop entries idle for twice the maximum (they would start over anyway)."""
        now = self.clock()
        for key in [k for k, (_, last) in self._entries.items() if now - last > 2 * self.maximum]:
            del self._entries[key]


# --- the store -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredImage:
    """One reference the store holds."""

    ref: str
    digest: str
    """The manifest digest in the store (names the unpacked rootfs)."""
    repo_digest: str
    """The digest the registry gave (a list's digest for a multi-platform image); the manifest
    digest for a loaded image."""
    size: int
    """Compressed size of config and layers, as containerd reports an image's size."""


@dataclass(frozen=True)
class PulledImage:
    """An image ready for a container: its unpacked root filesystem (read-only: mount it as an
    overlay lowerdir, never write to it) and its config."""

    ref: str
    digest: str
    rootfs: Path
    config: ImageConfig
    repo_digest: str = ""
    size: int = 0
    pulled: bool = False
    """True when this call went to the registry (Events ``Pulling``/``Pulled`` with times), false
    when the image was already on the node (``already present on machine``)."""
    pull_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def image_id(self) -> str:
        """``status.containerStatuses[].imageID`` as containerd reports it: repository@digest."""
        name = self.ref.split("@", 1)[0]
        slash = name.rfind("/")
        colon = name.rfind(":")
        if colon > slash:
            name = name[:colon]
        return f"{name}@{self.repo_digest or self.digest}"


def _netns_path(netns: str) -> str:
    return netns if "/" in netns else f"/run/netns/{netns}"


def _skopeo_reason(stderr: str) -> str:
    """skopeo's error without its log decoration (``time=... level=fatal msg="..."``), its
    ``initializing source docker://...:`` prefix, or a reason said twice (``manifest unknown:
    manifest unknown``)."""
    text = stderr.strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        m = re.search(r'level=(?:fatal|error) msg="((?:[^"\\]|\\.)*)"', line)
        if m:
            text = m.group(1).replace('\\"', '"').replace("\\\\", "\\")
            break
    else:
        text = lines[-1] if lines else "skopeo failed without a message"
    text = re.sub(r'^(?:Error: )?(?:initializing source|Error parsing image name) "?[a-z-]+:[^ ]+?"?: ', "", text)
    parts = text.rsplit(": ", 2)
    if len(parts) == 3 and parts[1] == parts[2]:
        text = f"{parts[0]}: {parts[1]}"
    return text


@dataclass
class _Tool:
    """How external tools run: inside the node's network namespace when there is one."""

    netns: str | None
    env: dict[str, str]

    async def run(self, argv: Sequence[str], *, in_netns: bool = True) -> tuple[int, str, str]:
        timeout = PULL_TIMEOUT
        full = list(argv)
        if in_netns and self.netns is not None:
            full = [NSENTER, f"--net={_netns_path(self.netns)}", "--", *full]
        try:
            proc = await asyncio.create_subprocess_exec(
                *full, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env)
        except FileNotFoundError:
            return 127, "", f"{full[0]} not found (install it: the Makefile's APT_PACKAGES has it)"
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except (TimeoutError, asyncio.CancelledError) as e:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            if isinstance(e, TimeoutError):
                return 124, "", f"{full[0]} did not finish in {timeout:.0f}s"
            raise
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


class ImageStore:
    """One node's images (see the module docstring). Safe to share between the pod workers of one
    kube-lite (asyncio) and with ``isthmus image load`` in another process (the lock file)."""

    def __init__(self, root: Path, *, mirrors: Mapping[str, str] | None = None, netns: str | None = None,
                 insecure: Collection[str] = ()) -> None:
        """``root``: kube-lite's root dir (the store is ``root/images``). ``mirrors``: registry host →
        URL (``docker.io`` → ``http://10.255.0.2:5000``; a path after the host prefixes the
        repository). ``netns``: name (``/run/netns/<name>``) or path of the node's network namespace
        to pull from. ``insecure``: registry hosts (``10.255.0.2:5000``) reached over plain HTTP."""
        self.root = Path(root)
        self.dir = self.root / "images"
        self.layout = self.dir / "oci"
        self.rootfs_dir = self.dir / "rootfs"
        self.refs_file = self.dir / "refs.json"
        self.lock_file = self.dir / "lock"
        self.mirrors = {host: url.rstrip("/") for host, url in (mirrors or {}).items()}
        self.netns = netns
        self.insecure = frozenset(insecure)
        self._inflight: dict[tuple[str, tuple[DockerAuth, ...]], asyncio.Task[PulledImage]] = {}
        if ":" in str(self.layout):
            # skopeo's and umoci's `oci:PATH:NAME` cannot say a path holding a colon
            raise ValueError(f"{self.layout}: an image store path cannot contain ':'")

    # -- reading --

    def images(self) -> list[StoredImage]:
        """Every reference the store holds, sorted."""
        return [self._stored(ref, entry) for ref, entry in sorted(self._refs().items())]

    def get(self, image: str) -> StoredImage | None:
        """The stored image of a reference, or None (raises InvalidImageNameError)."""
        ref = normalize(image)
        entry = self._refs().get(ref)
        return None if entry is None else self._stored(ref, entry)

    def _refs(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.refs_file.read_text())
        except FileNotFoundError:
            return {}
        except ValueError:
            return {}  # damaged: the images are pulled again (the layout keeps their blobs)
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _stored(ref: str, entry: Mapping[str, Any]) -> StoredImage:
        return StoredImage(ref=ref, digest=str(entry.get("digest", "")), repo_digest=str(entry.get("repoDigest", "")),
                           size=int(entry.get("size", 0)))

    def _blob(self, digest: str) -> Path:
        algorithm, _, hexpart = digest.partition(":")
        return self.layout / "blobs" / algorithm / hexpart

    def _read_blob_json(self, digest: str) -> dict[str, Any]:
        data = json.loads(self._blob(digest).read_bytes())
        if not isinstance(data, dict):
            raise ValueError(f"blob {digest} is not a JSON object")
        return data

    def _manifest_of(self, name: str) -> str | None:
        """The manifest digest the layout's index names ``name`` (an OCI ref name)."""
        try:
            index = json.loads((self.layout / "index.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        for m in index.get("manifests", []):
            if (m.get("annotations") or {}).get(OCI_REF_NAME) == name:
                return str(m["digest"])
        return None

    def _present(self, ref: str) -> PulledImage | None:
        """The image of ``ref`` when the store has it whole (index entry, manifest, rootfs)."""
        entry = self._refs().get(ref)
        if entry is None:
            return None
        digest = str(entry.get("digest", ""))
        rootfs = self.rootfs_dir / digest.partition(":")[2]
        if not digest or not rootfs.is_dir() or not self._blob(digest).is_file():
            return None
        try:
            config = self._config(digest)
        except (OSError, ValueError, KeyError):
            return None
        return PulledImage(ref=ref, digest=digest, rootfs=rootfs, config=config,
                           repo_digest=str(entry.get("repoDigest") or digest), size=int(entry.get("size", 0)))

    def _config(self, manifest_digest: str) -> ImageConfig:
        manifest = self._read_blob_json(manifest_digest)
        return ImageConfig.from_oci_config(self._read_blob_json(manifest["config"]["digest"]))

    def _size(self, manifest_digest: str) -> int:
        manifest = self._read_blob_json(manifest_digest)
        return int(manifest["config"].get("size", 0)) + sum(int(layer.get("size", 0))
                                                             for layer in manifest.get("layers", []))

    # -- writing --

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        """The store's write lock, shared with other processes (flock on ``lock``)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _tool(self) -> _Tool:
        self.dir.mkdir(parents=True, exist_ok=True)
        conf = self.dir / "registries.conf"
        if not conf.exists():
            # no search registries, aliases or mirrors of the host's: only what kube-lite was told
            conf.write_text("# kube-lite's pulls: no registries configured beyond its own flags\n")
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "HOME": str(self.dir), "CONTAINERS_REGISTRIES_CONF": str(conf),
               "XDG_RUNTIME_DIR": str(self.dir / "run")}
        return _Tool(netns=self.netns, env=env)

    def _record(self, ref: str, digest: str, repo_digest: str) -> None:
        refs = self._refs()
        refs[ref] = {"digest": digest, "repoDigest": repo_digest, "size": self._size(digest)}
        tmp = self.refs_file.with_name(f".refs.{os.getpid()}.json")
        tmp.write_text(json.dumps(refs, indent=1, sort_keys=True))
        os.replace(tmp, self.refs_file)

    async def _unpack(self, tool: _Tool, name: str, digest: str) -> Path:
        """The rootfs of manifest ``digest`` (layout ref ``name``), unpacked once (under the lock)."""
        final = self.rootfs_dir / digest.partition(":")[2]
        if final.is_dir():
            return final
        self.rootfs_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".unpack-", dir=self.rootfs_dir))
        try:
            argv = [UMOCI, "raw", "unpack", "--image", f"{self.layout}:{name}", str(work / "rootfs")]
            if os.geteuid() != 0:
                argv.insert(3, "--rootless")
            code, _, err = await tool.run(argv, in_netns=False)
            if code != 0:
                raise ImagePullError(f"failed to unpack image: {err.strip() or f'umoci exited {code}'}")
            os.rename(work / "rootfs", final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return final

    # -- pulling --

    def _source(self, ref: Reference) -> tuple[str, bool]:
        """The repository skopeo reads (``host[:port]/path``) and whether TLS is verified."""
        mirror = self.mirrors.get(ref.domain)
        if mirror is None:
            return ref.name, ref.domain not in self.insecure
        scheme, sep, rest = mirror.partition("://")
        if not sep:
            scheme, rest = "https", mirror
        host, _, prefix = rest.partition("/")
        path = f"{prefix.strip('/')}/{ref.path}" if prefix.strip("/") else ref.path
        return f"{host}/{path}", scheme == "https" and host not in self.insecure

    async def ensure(self, image: str, policy: str | None = None, auth: Sequence[DockerAuth] = (), *,
                     on_pulling: Callable[[], None] | None = None) -> PulledImage:
        """The image for a container, as the kubelet's EnsureImageExists decides: present and the
        policy allows → as is (``pulled`` false); else pulled (``on_pulling`` is called first, for
        the ``Pulling`` Event). Raises :class:`ImagePullError` (or its subclasses for Never and an
        invalid name) with the kubelet's message; ``auth`` is every imagePullSecret's entries
        (matched to the image's registry here)."""
        started = time.monotonic()
        ref = parse_reference(image)
        name = str(ref)
        policy = policy or default_policy(image)
        if policy not in POLICIES:
            raise ImagePullError(f'unsupported image pull policy "{policy}"')
        present = self._present(name)
        if policy == NEVER:
            if present is None:
                raise ImageNeverPullError(f'Container image "{image}" is not present with pull policy of Never')
            return present
        if policy == IF_NOT_PRESENT and present is not None:
            return present
        if on_pulling is not None:
            on_pulling()
        creds = tuple(lookup_auths(auth, ref.name))
        key = (name, creds)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._pull(ref, creds))
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._inflight.pop(key, None) if self._inflight.get(key) is t else None)
        result = await asyncio.shield(task)
        return PulledImage(ref=result.ref, digest=result.digest, rootfs=result.rootfs, config=result.config,
                           repo_digest=result.repo_digest, size=result.size, pulled=True,
                           pull_seconds=result.pull_seconds, total_seconds=time.monotonic() - started)

    async def _pull(self, ref: Reference, creds: tuple[DockerAuth, ...]) -> PulledImage:
        started = time.monotonic()
        name = str(ref)
        tool = self._tool()
        source, verify = self._source(ref)
        registry = source.split("/", 1)[0]
        errors: list[str] = []
        for cred in creds or (None,):
            with _authfile(self.dir, registry, cred) as authfile:
                creds_flags = ["--authfile", authfile] if authfile else ["--no-creds"]
                tls = [f"--tls-verify={'true' if verify else 'false'}"]
                code, out, err = await tool.run(
                    [SKOPEO, "--insecure-policy", "inspect", "--raw", *tls, *creds_flags,
                     f"docker://{source}{ref.pull_target}"])
                if code != 0:
                    errors.append(_skopeo_reason(err))
                    continue
                repo_digest = ref.digest or "sha256:" + hashlib.sha256(out.encode()).hexdigest()
                async with self._locked():
                    present = self._present(name)
                    if present is not None and present.repo_digest == repo_digest:
                        return _with_time(present, started)
                    oci_name = ref_name_encode(name)
                    src_flags = ["--src-authfile", authfile] if authfile else ["--src-no-creds"]
                    code, _, err = await tool.run(
                        [SKOPEO, "--insecure-policy", "copy", "--quiet", f"--src-tls-verify={'true' if verify else 'false'}",
                         *src_flags, f"docker://{source}@{repo_digest}", f"oci:{self.layout}:{oci_name}"])
                    if code != 0:
                        errors.append(_skopeo_reason(err))
                        continue
                    pulled = await self._commit(tool, name, oci_name, repo_digest)
                    return _with_time(pulled, started)
        reason = "; ".join(dict.fromkeys(errors))
        raise ImagePullError(f'failed to pull and unpack image "{name}": {reason}')

    async def _commit(self, tool: _Tool, ref: str, oci_name: str, repo_digest: str | None) -> PulledImage:
        """After a copy into the layout (under the lock): unpack, record, return."""
        digest = self._manifest_of(oci_name)
        if digest is None:
            raise ImagePullError(f'failed to pull and unpack image "{ref}": the copy left no manifest named {oci_name}')
        await self._unpack(tool, oci_name, digest)
        self._record(ref, digest, repo_digest or digest)
        present = self._present(ref)
        if present is None:
            raise ImagePullError(f'failed to pull and unpack image "{ref}": the store does not hold it after the pull')
        return present

    # -- loading archives (`isthmus image load`) --

    async def load_archive(self, path: Path) -> list[str]:
        """Copy every named image of an oci-archive or docker-archive into the store (as ``kind
        load image-archive``), each under its normalised name; returns those names. Raises
        ValueError with a user-facing message for a file that is no image archive or names no
        image."""
        path = Path(path)
        kind, names = archive_names(path)
        tool = self._tool()
        loaded = []
        async with self._locked():
            for source_name, ref in names:
                oci_name = ref_name_encode(ref)
                src = f"oci-archive:{path}:{source_name}" if kind == "oci" else f"docker-archive:{path}:{source_name}"
                code, _, err = await tool.run([SKOPEO, "--insecure-policy", "copy", "--quiet", src,
                                               f"oci:{self.layout}:{oci_name}"], in_netns=False)
                if code != 0:
                    raise ValueError(f"{path}: cannot copy {source_name}: {_skopeo_reason(err)}")
                await self._commit(tool, ref, oci_name, None)
                loaded.append(ref)
        return loaded


def _with_time(image: PulledImage, started: float) -> PulledImage:
    return PulledImage(ref=image.ref, digest=image.digest, rootfs=image.rootfs, config=image.config,
                       repo_digest=image.repo_digest, size=image.size, pulled=True,
                       pull_seconds=time.monotonic() - started)


@contextlib.contextmanager
def _authfile(directory: Path, registry: str, cred: DockerAuth | None) -> Iterator[str | None]:
    """A private auth.json for one pull (never the password on a command line)."""
    if cred is None:
        yield None
        return
    fd, name = tempfile.mkstemp(prefix=".auth-", suffix=".json", dir=directory)
    try:
        token = base64.b64encode(f"{cred.username}:{cred.password}".encode()).decode()
        with os.fdopen(fd, "w") as f:
            json.dump({"auths": {registry: {"auth": token}}}, f)
        yield name
    finally:
        Path(name).unlink(missing_ok=True)


def archive_names(path: Path) -> tuple[str, list[tuple[str, str]]]:
    """The kind of an image archive (``oci`` or ``docker``) and its images: (the name in the
    archive, the normalised reference). ValueError with a user-facing message otherwise."""
    try:
        with tarfile.open(path) as tar:
            members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
            if "index.json" in members and "oci-layout" in members:
                index = _tar_json(tar, members["index.json"])
                return "oci", _oci_names(path, index)
            if "manifest.json" in members:
                manifest = _tar_json(tar, members["manifest.json"])
                return "docker", _docker_names(path, manifest)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a directory, not an image archive") from None
    except PermissionError:
        raise ValueError(f"{path}: permission denied") from None
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ValueError(f"{path}: not an image archive (not a tar file: {e})") from None
    raise ValueError(f"{path}: not an image archive (neither an oci-archive with index.json and oci-layout "
                     "nor a docker-archive with manifest.json)")


def _tar_json(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Any:
    f = tar.extractfile(member)
    if f is None:
        raise ValueError(f"{member.name} in the archive is not a file")
    try:
        return json.loads(f.read())
    except ValueError as e:
        raise ValueError(f"{member.name} in the archive is not JSON: {e}") from None


def _named(path: Path, name: str) -> str:
    try:
        return normalize(name)
    except InvalidImageNameError:
        raise ValueError(f'{path}: the image name "{name}" is not a valid reference') from None


def _oci_names(path: Path, index: Any) -> list[tuple[str, str]]:
    out = []
    for m in index.get("manifests", []) if isinstance(index, dict) else []:
        annotations = m.get("annotations") or {}
        ref_name = annotations.get(OCI_REF_NAME)
        full = annotations.get(CONTAINERD_NAME)
        if not ref_name:
            continue  # skopeo can only select an image of an oci-archive by its ref name
        if full:
            out.append((ref_name, _named(path, full)))
        elif any(c in ref_name for c in "/:@"):
            out.append((ref_name, _named(path, ref_name)))
        else:
            # the OCI convention: a ref name alone is a tag, which says no repository
            raise ValueError(f'{path}: the image is named only by the tag "{ref_name}", not by a reference: save it '
                             f"with its full name (skopeo copy ... oci-archive:{path.name}:docker.io/library/NAME:TAG)")
    if not out:
        raise ValueError(f"{path}: the archive names no image (its index has no "
                         f"{OCI_REF_NAME} annotation): save it with a name, e.g. "
                         f"skopeo copy ... oci-archive:{path.name}:docker.io/library/NAME:TAG")
    return out


def _docker_names(path: Path, manifest: Any) -> list[tuple[str, str]]:
    out = []
    for entry in manifest if isinstance(manifest, list) else []:
        for tag in entry.get("RepoTags") or []:
            out.append((str(tag), _named(path, str(tag))))
    if not out:
        raise ValueError(f"{path}: the archive names no image (no RepoTags in its manifest.json): "
                         "save it by name, e.g. docker save NAME:TAG")
    return out
