"""Image references as docker normalises them, the kubelet's pull policy defaults, credential
matching as the kubelet's keyring does it, and the kubelet's image messages and back-off."""

from __future__ import annotations

import base64
import json

import pytest

from isthmus.local.kubelite.images import (
    ALWAYS,
    IF_NOT_PRESENT,
    DockerAuth,
    ImagePullError,
    InvalidImageNameError,
    PullBackOff,
    PulledImage,
    _skopeo_reason,
    auths_from_secret,
    backoff_message,
    default_policy,
    failed_message,
    go_duration,
    lookup_auths,
    normalize,
    parse_reference,
    pulled_message,
    ref_name_decode,
    ref_name_encode,
)

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("image", "want"), [
    ("busybox", "docker.io/library/busybox:latest"),
    ("busybox:1.36", "docker.io/library/busybox:1.36"),
    ("library/busybox", "docker.io/library/busybox:latest"),
    ("foo/bar", "docker.io/foo/bar:latest"),
    ("docker.io/busybox", "docker.io/library/busybox:latest"),
    ("index.docker.io/foo/bar:1", "docker.io/foo/bar:1"),
    ("localhost/x", "localhost/x:latest"),
    ("localhost:5000/x/y:v1", "localhost:5000/x/y:v1"),
    ("host:5000/x", "host:5000/x:latest"),
    ("10.255.0.2:5000/isthmus-net/isthmus:0.1.0", "10.255.0.2:5000/isthmus-net/isthmus:0.1.0"),
    ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
    ("ghcr.io/isthmus-net/isthmus", "ghcr.io/isthmus-net/isthmus:latest"),
    (f"busybox@{DIGEST}", f"docker.io/library/busybox@{DIGEST}"),
    (f"busybox:1.36@{DIGEST}", f"docker.io/library/busybox:1.36@{DIGEST}"),
    ("my_repo/a__b:v1_2", "docker.io/my_repo/a__b:v1_2"),
])
def test_normalize_as_docker(image: str, want: str) -> None:
    assert normalize(image) == want


@pytest.mark.parametrize(("image", "reason"), [
    ("", "invalid reference format"),
    ("busybox:", "invalid reference format"),
    ("bad image", "invalid reference format"),
    ("-busybox", "invalid reference format"),
    ("busybox:tag@sha256:short", "invalid reference format"),
    ("BusyBox", "invalid reference format: repository name (library/BusyBox) must be lowercase"),
    ("ab" * 32, f"invalid repository name ({'ab' * 32}), cannot specify 64-byte hexadecimal strings"),
])
def test_invalid_reference_has_kubelets_message(image: str, reason: str) -> None:
    with pytest.raises(InvalidImageNameError) as err:
        normalize(image)
    assert err.value.reason == "InvalidImageName"
    assert err.value.message == (f'Failed to apply default image tag "{image}": '
                                 f'couldn\'t parse image name "{image}": {reason}')
    assert isinstance(err.value, ImagePullError)  # one except clause for every image failure


def test_uppercase_registry_host_is_a_host() -> None:
    # A first component with upper case is a registry host, not a repository (docker's rule).
    assert normalize("Registry.Example/x") == "Registry.Example/x:latest"


@pytest.mark.parametrize(("image", "policy"), [
    ("busybox", ALWAYS), ("busybox:latest", ALWAYS), ("busybox:1.36", IF_NOT_PRESENT),
    (f"busybox@{DIGEST}", IF_NOT_PRESENT), (f"busybox:latest@{DIGEST}", ALWAYS),
    ("host:5000/x", ALWAYS), ("host:5000/x:v1", IF_NOT_PRESENT),
])
def test_default_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    assert default_policy(image) == policy


def test_pull_target_is_the_digest_when_given() -> None:
    assert parse_reference(f"busybox:1@{DIGEST}").pull_target == f"@{DIGEST}"
    assert parse_reference("busybox").pull_target == ":latest"


@pytest.mark.parametrize("ref", [
    "docker.io/library/busybox:latest", f"docker.io/library/busybox@{DIGEST}", "host:5000/a/b:v1",
    "docker.io/my_repo/a__b:v1_2", "docker.io/a/b---c:x--y", "docker.io/a/b:_",
])
def test_oci_ref_names_are_reversible_and_valid(ref: str) -> None:
    import re

    name = ref_name_encode(ref)
    component = r"[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*"
    assert re.fullmatch(rf"{component}(?:/{component})*", name), name
    assert ref_name_decode(name) == ref


# --- credentials ---------------------------------------------------------------------------------


def _secret(kind: str, payload: object) -> dict[str, object]:
    key = ".dockerconfigjson" if kind == "kubernetes.io/dockerconfigjson" else ".dockercfg"
    return {"type": kind, "data": {key: base64.b64encode(json.dumps(payload).encode()).decode()}}


def test_dockerconfigjson_secret_with_auth_field() -> None:
    auth = base64.b64encode(b"alice:s3cret:colon").decode()
    secret = _secret("kubernetes.io/dockerconfigjson",
                     {"auths": {"registry.example:5000": {"auth": auth, "username": "ignored"}}})
    assert auths_from_secret(secret) == [DockerAuth("registry.example:5000", "alice", "s3cret:colon")]


def test_dockercfg_secret_with_username_password() -> None:
    secret = _secret("kubernetes.io/dockercfg", {"https://index.docker.io/v1/": {"username": "u", "password": "p"}})
    assert auths_from_secret(secret) == [DockerAuth("https://index.docker.io/v1/", "u", "p")]


def test_other_secret_types_hold_no_credentials() -> None:
    assert auths_from_secret({"type": "Opaque", "data": {"x": "eA=="}}) == []


def test_damaged_secret_is_an_error() -> None:
    secret = {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": base64.b64encode(b"{").decode()}}
    with pytest.raises(ValueError, match="not JSON"):
        auths_from_secret(secret)


def test_password_never_printed() -> None:
    assert "hunter2" not in repr(DockerAuth("r", "u", "hunter2"))


def _users(auths: list[DockerAuth], repository: str) -> list[str]:
    return [a.username for a in lookup_auths(auths, repository)]


def test_keyring_matches_host_and_path_most_specific_first() -> None:
    auths = [DockerAuth("quay.io", "any", "p"), DockerAuth("quay.io/coreos", "coreos", "p"),
             DockerAuth("https://gcr.io/v2/", "gcr", "p")]
    assert _users(auths, "quay.io/coreos/etcd") == ["coreos", "any"]
    assert _users(auths, "quay.io/other/x") == ["any"]
    assert _users(auths, "gcr.io/proj/x") == ["gcr"]
    assert _users(auths, "docker.io/library/busybox") == []


def test_keyring_port_must_match() -> None:
    auths = [DockerAuth("registry.example:5000", "five", "p")]
    assert _users(auths, "registry.example:5000/x") == ["five"]
    assert _users(auths, "registry.example/x") == []
    assert _users(auths, "registry.example:6000/x") == []


def test_keyring_globs_per_host_label() -> None:
    auths = [DockerAuth("*.example.com", "glob", "p")]
    assert _users(auths, "a.example.com/x") == ["glob"]
    assert _users(auths, "a.b.example.com/x") == []  # the same number of labels


def test_keyring_docker_hub_keys() -> None:
    legacy = [DockerAuth("https://index.docker.io/v1/", "hub", "p")]
    assert _users(legacy, "docker.io/library/busybox") == ["hub"]
    assert _users(legacy, "quay.io/x/y") == []
    plain = [DockerAuth("docker.io", "plain", "p")]
    assert _users(plain, "docker.io/library/busybox") == ["plain"]


# --- messages and back-off -----------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (0.5234, "523ms"), (1.2, "1.2s"), (15.981, "15.981s"), (2.0, "2s"), (123.4567, "2m3.456s"),
    (3600, "1h0m0s"),
])
def test_durations_print_as_go_does(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_pulled_messages() -> None:
    from pathlib import Path

    from isthmus.local.kubelite.images import ImageConfig

    image = PulledImage(ref="docker.io/library/busybox:latest", digest=DIGEST, rootfs=Path("/x"), config=ImageConfig(),
                        repo_digest=DIGEST, size=2150000, pulled=True, pull_seconds=1.2, total_seconds=1.25)
    assert pulled_message("busybox", image) == ('Successfully pulled image "busybox" in 1.2s (1.25s including waiting). '
                                                "Image size: 2150000 bytes.")
    present = PulledImage(ref=image.ref, digest=DIGEST, rootfs=Path("/x"), config=ImageConfig())
    assert pulled_message("busybox", present) == 'Container image "busybox" already present on machine'
    assert image.image_id == f"docker.io/library/busybox@{DIGEST}"
    assert failed_message("busybox", ImagePullError("boom")) == 'Failed to pull image "busybox": boom'
    assert backoff_message("busybox") == 'Back-off pulling image "busybox"'


def test_backoff_doubles_to_five_minutes_and_expires() -> None:
    now = [1000.0]
    backoff = PullBackOff(clock=lambda: now[0])
    assert not backoff.in_backoff("k")
    assert [backoff.next("k") for _ in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    assert backoff.in_backoff("k")
    now[0] += 299
    assert backoff.in_backoff("k")
    now[0] += 2
    assert not backoff.in_backoff("k")
    now[0] += 600  # idle for more than twice the maximum: starts over
    assert backoff.next("k") == 10


@pytest.mark.parametrize(("stderr", "reason"), [
    ('time="2026-12-07T17:22:36Z" level=fatal msg="initializing source docker://127.0.0.1:1/library/x:latest: '
     'reading manifest latest in 127.0.0.1:1/library/x: manifest unknown: manifest unknown"\n',
     "reading manifest latest in 127.0.0.1:1/library/x: manifest unknown"),
    ('time="t" level=fatal msg="Error parsing image name \\"docker://127.0.0.1:2/x:latest\\": pinging container '
     'registry 127.0.0.1:2: Get \\"http://127.0.0.1:2/v2/\\": dial tcp 127.0.0.1:2: connect: connection refused"',
     'pinging container registry 127.0.0.1:2: Get "http://127.0.0.1:2/v2/": dial tcp 127.0.0.1:2: connect: '
     "connection refused"),
])
def test_skopeo_reasons_read_plainly(stderr: str, reason: str) -> None:
    assert _skopeo_reason(stderr) == reason
