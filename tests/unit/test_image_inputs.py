"""The image's inputs agree: requirements.lock pins pyproject's ranges with hashes, and `make image`
(isthmus.local.images.build) and the Containerfile install the same package list and run the same
recipe, with the same runtime config."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from isthmus.api.image import IMAGE_TAG
from isthmus.local.images import build
from isthmus.local.images.layout import ImageConfig

REPO = Path(__file__).resolve().parents[2]
LINUX_311 = {"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux",
             "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
             "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def lock_entries() -> dict[str, tuple[Requirement, list[str]]]:
    """requirements.lock as pip reads it: continuation lines joined, comments dropped; each entry's
    requirement and its --hash options."""
    text = (REPO / "requirements.lock").read_text()
    text = re.sub(r"\\\n", " ", text)
    entries: dict[str, tuple[Requirement, list[str]]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        hashes = re.findall(r"--hash=(\S+)", line)
        req = Requirement(re.sub(r"--hash=\S+", "", line).strip())
        entries[canonicalize_name(req.name)] = (req, hashes)
    return entries


def test_every_locked_requirement_is_pinned_with_hashes() -> None:
    entries = lock_entries()
    assert len(entries) > 20  # the whole closure, not only the direct dependencies
    for name, (req, hashes) in entries.items():
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{name}: not pinned with ==: {req}"
        assert hashes, f"{name}: no --hash (pip install --require-hashes would refuse the lock)"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), f"{name}: {hashes}"


def test_the_lock_satisfies_every_runtime_dependency_of_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    entries = lock_entries()
    for dep in project["dependencies"]:
        req = Requirement(dep)
        if req.marker is not None and not req.marker.evaluate(LINUX_311):
            continue
        name = canonicalize_name(req.name)
        assert name in entries, f"{req.name} (pyproject) is missing from requirements.lock: run `make lock`"
        pinned = next(iter(entries[name][0].specifier)).version
        assert req.specifier.contains(pinned, prereleases=True), (
            f"requirements.lock pins {req.name}=={pinned}, outside pyproject's {req.specifier}: run `make lock`")


def test_dev_tools_stay_out_of_the_lock() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dev_only = {canonicalize_name(Requirement(d).name) for d in project["optional-dependencies"]["dev"]}
    assert not dev_only & set(lock_entries()), "the image's lock holds dev tools"


# --- one package list, one recipe --------------------------------------------------------------------


def containerfile_stages() -> list[list[tuple[str, str]]]:
    text = (REPO / "Containerfile").read_text().replace("\\\n", " ")
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, args = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instruction.upper(), " ".join(args.split())))
    return stages


def final_stage() -> list[tuple[str, str]]:
    return containerfile_stages()[-1]


def test_the_containerfile_installs_the_package_file_and_runs_the_recipe() -> None:
    stage = final_stage()
    assert stage[0] == ("FROM", "docker.io/library/debian:bookworm-slim")
    runs = [args for ins, args in stage if ins == "RUN"]
    assert len(runs) == 2, "two layers, as make image writes them: packages and deps, then the app"
    image_dir = str(build.IMAGE_DIR.relative_to(REPO))
    for run, phase in zip(runs, ("deps", "app"), strict=True):
        mounts = dict(re.findall(r"--mount=type=bind,source=(\S+?),target=(\S+)", run))
        assert image_dir in mounts, f"the RUN must mount {image_dir} (the recipe's directory): {run}"
        inside = mounts[image_dir]
        assert run.endswith(f"sh {inside}/{build.RECIPE.name} {phase} /tmp/isthmus-build")
        assert f"--mount=type=bind,from=wheels,source=/out/{phase},target=/tmp/isthmus-build" in run
    packages_dir = dict(re.findall(r"--mount=type=bind,source=(\S+?),target=(\S+)", runs[0]))[image_dir]
    assert f"$(sed 's/#.*//' {packages_dir}/{build.PACKAGES_FILE.name})" in runs[0]
    wheels = containerfile_stages()[0]
    assert any("--require-hashes" in args and "requirements.lock" in args for ins, args in wheels if ins == "RUN")


def test_the_containerfile_sets_the_config_make_image_sets() -> None:
    stage = final_stage()
    config = build.isthmus_config()
    env_args = " ".join(args for ins, args in stage if ins == "ENV")
    assert dict(kv.split("=", 1) for kv in env_args.split()) == dict(e.split("=", 1) for e in config.env)
    assert [args for ins, args in stage if ins == "USER"] == [config.user]
    assert [json.loads(args) for ins, args in stage if ins == "ENTRYPOINT"] == [list(config.entrypoint)]
    assert [json.loads(args) for ins, args in stage if ins == "CMD"] == [list(config.cmd)]
    assert [args for ins, args in stage if ins == "WORKDIR"] == [config.working_dir]
    labels = " ".join(args for ins, args in stage if ins == "LABEL")
    for key in ("org.opencontainers.image.title", "org.opencontainers.image.description",
                "org.opencontainers.image.licenses"):
        assert f'{key}="{config.labels[key]}"' in labels


def test_the_package_file_holds_what_the_components_run() -> None:
    packages = build.read_packages()
    for needed in ("python3", "python3-venv", "haproxy", "nftables", "iproute2", "conntrack", "ca-certificates"):
        assert needed in packages
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", p) for p in packages)


def test_the_recipe_installs_only_hash_checked_wheels_without_a_network() -> None:
    recipe = build.RECIPE.read_text()
    assert "--no-index --require-hashes" in recipe and '-r "$src/requirements.lock"' in recipe
    assert "--no-index --no-deps" in recipe  # the isthmus wheel: its dependencies are the lock's
    assert "uninstall --isolated -y -q pip" in recipe
    assert "--uid 65532 --gid 65532" in recipe and "--gid 65532 nonroot" in recipe


def test_make_image_runs_the_package_file_and_the_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What build_isthmus_base hands mmdebstrap: the packages of packages.txt, and a customize hook
    that runs a copy of recipe.sh's deps phase (with requirements.lock beside it) in the chroot."""
    calls: list[list[str]] = []
    copied: dict[str, bytes] = {}

    def fake_run(argv: list[str], **_: Any) -> str:
        calls.append(list(argv))
        if argv[0] == "mmdebstrap":
            inputs = tmp_path / "build" / "inputs"
            copied.update({p.name: p.read_bytes() for p in inputs.iterdir() if p.is_file()})
            (tmp_path / "build" / "rootfs").mkdir()
        return ""

    def fake_pack(rootfs: Path, layout: Path, tag: str, config: ImageConfig, **_: Any) -> str:
        calls.append(["pack", tag, json.dumps(list(config.entrypoint))])
        return "sha256:" + "0" * 64

    monkeypatch.setattr(build, "run", fake_run)
    monkeypatch.setattr(build, "fetch_wheels", lambda dest, b: dest.mkdir(parents=True))
    monkeypatch.setattr(build, "pack", fake_pack)
    monkeypatch.setattr(build._Build, "finish", lambda self, digest, components, description, **kw: None)
    (tmp_path / "build").mkdir()
    build.build_isthmus_base(build._Build("isthmus-base", build.ISTHMUS_BASE, tmp_path / "build", lambda _: None))

    mm = next(c for c in calls if c[0] == "mmdebstrap")
    assert "--variant=minbase" in mm and build.SUITE in mm
    assert f"--include={','.join(build.read_packages(build.PACKAGES_FILE))}" in mm
    hooks = [a.split("=", 1)[1] for a in mm if a.startswith("--customize-hook=")]
    assert any(h.startswith('chroot "$1"') and "sh /tmp/isthmus-build/recipe.sh deps /tmp/isthmus-build" in h
               for h in hooks)
    assert copied["recipe.sh"] == build.RECIPE.read_bytes()
    assert copied["trim.sh"] == build.TRIM.read_bytes()
    assert copied["requirements.lock"] == (REPO / "requirements.lock").read_bytes()
    assert ["pack", IMAGE_TAG, '["isthmus"]'] in calls


def test_make_image_adds_the_app_layer_with_the_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The second layer: recipe.sh's app phase, run in a chroot of the unpacked base with the isthmus
    wheel beside the recipe, then repacked under the Isthmus tag with the image config."""
    calls: list[list[str]] = []
    seen: dict[str, Any] = {}

    def fake_run(argv: list[str], **_: Any) -> str:
        calls.append(list(argv))
        if argv[:2] == ["umoci", "unpack"]:
            (Path(argv[-1]) / "rootfs" / "tmp").mkdir(parents=True)
        if argv[0] == "chroot":
            inputs = Path(argv[1]) / "tmp" / "isthmus-build"
            seen["recipe"] = (inputs / "recipe.sh").read_bytes()
            seen["wheels"] = sorted(p.name for p in (inputs / "wheels").iterdir())
        return ""

    def fake_wheel(dest: Path, b: Any) -> None:
        dest.mkdir(parents=True)
        (dest / f"isthmus-{IMAGE_TAG}-py3-none-any.whl").write_bytes(b"")

    configured: list[ImageConfig] = []
    monkeypatch.setattr(build, "run", fake_run)
    monkeypatch.setattr(build, "build_wheel", fake_wheel)
    monkeypatch.setattr(build, "configure", lambda layout, tag, config, **kw: configured.append(config))
    monkeypatch.setattr(build, "manifest_digest", lambda layout, tag: "sha256:" + "1" * 64)
    monkeypatch.setattr(build._Build, "finish", lambda self, digest, components, description, **kw: None)
    base_layout = tmp_path / "base" / "isthmus-base"
    base_layout.mkdir(parents=True)
    base = build.ImageArtifact(base_layout, "base", "sha256:" + "2" * 64, None)
    (tmp_path / "build").mkdir()
    build.build_isthmus(build._Build("isthmus", build.ISTHMUS, tmp_path / "build", lambda _: None), base)

    chroot = next(c for c in calls if c[0] == "chroot")
    assert chroot[-3:] == ["/tmp/isthmus-build/recipe.sh", "app", "/tmp/isthmus-build"]
    assert seen["recipe"] == build.RECIPE.read_bytes()
    assert seen["wheels"] == [f"isthmus-{IMAGE_TAG}-py3-none-any.whl"]
    repack = next(c for c in calls if c[:2] == ["umoci", "repack"])
    assert f"{tmp_path / 'build' / 'isthmus'}:{IMAGE_TAG}" in repack
    assert configured == [build.isthmus_config()]


def test_the_cache_key_changes_with_every_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"junk")
    lock = tmp_path / "requirements.lock"
    lock.write_text("a==1\n")
    key = build.input_key("isthmus", [lock, src])
    assert build.input_key("isthmus", [lock, src]) == key
    (src / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"other junk")
    assert build.input_key("isthmus", [lock, src]) == key, "byte code is not an input"
    (src / "pkg" / "mod.py").write_text("x = 2\n")
    assert build.input_key("isthmus", [lock, src]) != key
    key = build.input_key("isthmus", [lock, src])
    lock.write_text("a==2\n")
    assert build.input_key("isthmus", [lock, src]) != key
    key = build.input_key("isthmus", [lock, src])
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1800000000")
    assert build.input_key("isthmus", [lock, src]) != key


def test_the_default_cache_follows_isthmus_image_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ISTHMUS_IMAGE_CACHE", str(tmp_path))
    assert build.default_cache() == tmp_path
    monkeypatch.delenv("ISTHMUS_IMAGE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert build.default_cache() == tmp_path / ".cache" / "isthmus" / "images"


def test_a_failed_build_names_the_image_and_leaves_no_entry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken(b: Any) -> None:
        b.log_file.write_text("$ gcc pause.c\nerror: no libc\n")
        raise build.ImageBuildError("gcc pause.c failed (exit 1)")

    monkeypatch.setattr(build, "build_pause", broken)
    monkeypatch.setattr(build.os, "geteuid", lambda: 0)
    with pytest.raises(build.ImageBuildError) as e:
        build.build_images(tmp_path, only=["pause"], log=lambda _: None)
    assert str(e.value).startswith(f"{build.PAUSE}: gcc pause.c failed (exit 1)")
    kept = tmp_path / ".failed-pause.log"
    assert f"(the whole log: {kept})" in str(e.value) and "error: no libc" in kept.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".failed-pause.log", ".lock"]
