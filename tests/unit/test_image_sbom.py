"""The image SBOM: every installed Debian package and every Python distribution of a root filesystem,
as CycloneDX 1.5 components with their purls (tested on a fake dpkg status and site-packages)."""

from __future__ import annotations

import json
from pathlib import Path

from isthmus.local.images import sbom

STATUS = """\
Package: passwd
Status: install ok installed
Priority: required
Architecture: amd64
Source: shadow
Version: 1:4.13+dfsg1-1+deb12u2
Description: change and administer password and group data
 This package includes passwd, chsh, chfn, and many other programs to
 maintain password and group data.

Package: haproxy
Status: install ok installed
Architecture: amd64
Version: 2.6.12-1+deb12u4
Conffiles:
 /etc/haproxy/haproxy.cfg 0123456789abcdef0123456789abcdef

Package: nginx-common
Status: deinstall ok config-files
Architecture: all
Version: 1.22.1-9

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2025b-0+deb12u1
"""


def fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(STATUS)
    site = root / "opt/isthmus/lib/python3.11/site-packages"
    for name, version, extra in (("lightkube", "1.0.1", "License-Expression: MIT\n"),
                                 ("Typing_Extensions", "4.16.0", "License: PSF-2.0\n"),
                                 ("ruamel.yaml.clib", "0.2.12", "License: MIT License\n")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n{extra}\nlong text\n")
    (site / "broken-0.1.dist-info").mkdir()  # no METADATA: not a distribution pip would list
    debian_site = root / "usr/lib/python3/dist-packages/six-1.16.0.dist-info"
    debian_site.mkdir(parents=True)
    (debian_site / "METADATA").write_text("Metadata-Version: 2.1\nName: six\nVersion: 1.16.0\n")
    return root


def test_debian_packages_are_the_installed_ones_with_deb_purls(tmp_path: Path) -> None:
    debs = {c.name: c for c in sbom.debian_packages(fake_root(tmp_path))}
    assert set(debs) == {"passwd", "haproxy", "tzdata"}  # nginx-common is only config files
    assert debs["passwd"].version == "1:4.13+dfsg1-1+deb12u2"
    assert debs["passwd"].purl == "pkg:deb/debian/passwd@1%3A4.13%2Bdfsg1-1%2Bdeb12u2?arch=amd64&distro=debian-12"
    assert ("deb:source", "shadow") in debs["passwd"].properties
    assert debs["tzdata"].purl.endswith("?arch=all&distro=debian-12")


def test_python_distributions_from_every_site_with_normalised_pypi_purls(tmp_path: Path) -> None:
    dists = {c.name: c for c in sbom.python_distributions(fake_root(tmp_path))}
    assert set(dists) == {"lightkube", "typing-extensions", "ruamel-yaml-clib", "six"}
    assert dists["typing-extensions"].purl == "pkg:pypi/typing-extensions@4.16.0"
    assert dists["lightkube"].licenses == ("MIT",)
    assert ("python:site", "/usr/lib/python3/dist-packages") in dists["six"].properties


def test_cyclonedx_document(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    digest = "sha256:" + "ab" * 32
    doc = sbom.cyclonedx(sbom.components_of(root), repository="ghcr.io/isthmus-net/isthmus", tag="0.1.0",
                         digest=digest, created=1704067200)
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.5" and doc["version"] == 1
    assert doc["serialNumber"].startswith("urn:uuid:")
    assert doc["metadata"]["timestamp"] == "2024-01-01T00:00:00Z"
    image = doc["metadata"]["component"]
    assert image["type"] == "container" and image["name"] == "ghcr.io/isthmus-net/isthmus"
    assert image["purl"] == f"pkg:oci/isthmus@sha256%3A{'ab' * 32}?repository_url=ghcr.io/isthmus-net/isthmus&tag=0.1.0"
    purls = [c["purl"] for c in doc["components"]]
    assert len(purls) == len(set(purls)) == 7
    assert all(c["bom-ref"] == c["purl"] for c in doc["components"])
    by_name = {c["name"]: c for c in doc["components"]}
    assert by_name["lightkube"]["licenses"] == [{"expression": "MIT"}]
    assert by_name["ruamel-yaml-clib"]["licenses"] == [{"license": {"name": "MIT License"}}]
    assert by_name["haproxy"]["type"] == "application" and by_name["lightkube"]["type"] == "library"
    assert doc["dependencies"] == [{"ref": image["purl"], "dependsOn": purls}]


def test_the_same_rootfs_gives_the_same_document(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    args = {"repository": "r/x", "tag": "1", "digest": "sha256:00", "created": 0}
    first = json.dumps(sbom.cyclonedx(sbom.components_of(root), **args))  # type: ignore[arg-type]
    assert json.dumps(sbom.cyclonedx(reversed(sbom.components_of(root)), **args)) == first  # type: ignore[arg-type]
    (root / "var/lib/dpkg/status").write_text(STATUS.replace("2.6.12-1+deb12u4", "2.6.12-1+deb12u5"))
    changed = sbom.cyclonedx(sbom.components_of(root), **args)  # type: ignore[arg-type]
    assert json.loads(first)["serialNumber"] != changed["serialNumber"]


def test_a_rootfs_without_dpkg_or_python_has_no_components(tmp_path: Path) -> None:
    (tmp_path / "pause").write_bytes(b"\x7fELF")
    assert sbom.components_of(tmp_path) == []


def test_deb_files_of_an_extracted_image() -> None:
    comps = sbom.deb_files([{"Package": "busybox-static", "Version": "1:1.35.0-4+b1", "Architecture": "amd64"}])
    assert [c.purl for c in comps] == ["pkg:deb/debian/busybox-static@1%3A1.35.0-4%2Bb1?arch=amd64&distro=debian-12"]
