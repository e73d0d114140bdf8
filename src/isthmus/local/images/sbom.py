"""A CycloneDX 1.5 SBOM of an image's root filesystem, from what its package managers recorded.

Two sources say what is inside: dpkg's status database (every Debian package, as `dpkg -l` lists
them) and the `*.dist-info` directories of the Python environments (every distribution, as
`pip list` does). Reading them directly keeps the generator a few dozen lines that need no tool
inside the image (it has no pip) and none on the host. The output is deterministic for the same
root filesystem: components sorted, serial number derived from them, timestamp from the build's
SOURCE_DATE_EPOCH.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import HeaderParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

DEBIAN_DISTRO = "debian-12"

SITE_GLOBS = ("opt/*/lib/python3*/site-packages", "usr/lib/python3/dist-packages", "usr/lib/python3*/site-packages")


@dataclass(frozen=True, order=True)
class Component:
    """One package inside the image: `ecosystem` is "deb" or "pypi"."""

    ecosystem: str
    name: str
    version: str
    purl: str
    licenses: tuple[str, ...] = field(default=(), compare=False)
    properties: tuple[tuple[str, str], ...] = field(default=(), compare=False)


def _paragraphs(text: str) -> Iterator[dict[str, str]]:
    """deb822 paragraphs (dpkg's status file): continuation lines are folded into their field."""
    fields: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, last = {}, ""
        elif line[0] in " \t":
            if last:
                fields[last] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            last = key.strip()
            fields[last] = value.strip()
    if fields:
        yield fields


def deb_purl(name: str, version: str, arch: str) -> str:
    """purl-spec's deb type: the version's epoch colon is percent-encoded, the arch a qualifier."""
    return f"pkg:deb/debian/{quote(name, safe='')}@{quote(version, safe='')}?arch={arch}&distro={DEBIAN_DISTRO}"


def pypi_name(name: str) -> str:
    """PEP 503's normalised name, which purl-spec's pypi type asks for (lower case, '-' for runs of -_.)."""
    out: list[str] = []
    for ch in name.lower():
        if ch in "-_.":
            if not out or out[-1] != "-":
                out.append("-")
        else:
            out.append(ch)
    return "".join(out)


def debian_packages(root: Path) -> list[Component]:
    """Every package dpkg has installed in `root` (none when the image has no dpkg database)."""
    status = root / "var/lib/dpkg/status"
    if not status.is_file():
        return []
    found: list[Component] = []
    for para in _paragraphs(status.read_text(encoding="utf-8", errors="replace")):
        if para.get("Status", "").split()[-1:] != ["installed"]:
            continue
        name, version, arch = para["Package"], para.get("Version", ""), para.get("Architecture", "all")
        props = [("deb:architecture", arch)]
        if "Source" in para:
            props.append(("deb:source", para["Source"]))
        found.append(Component("deb", name, version, deb_purl(name, version, arch), properties=tuple(props)))
    return sorted(found)


def deb_files(fields: Iterable[dict[str, str]]) -> list[Component]:
    """Components of images built from extracted .deb files (no dpkg database inside): each dict
    holds a package's control fields (`dpkg-deb -f`)."""
    out = []
    for f in fields:
        arch = f.get("Architecture", "all")
        out.append(Component("deb", f["Package"], f["Version"], deb_purl(f["Package"], f["Version"], arch),
                             properties=(("deb:architecture", arch),)))
    return sorted(out)


def python_distributions(root: Path) -> list[Component]:
    """Every distribution with a `*.dist-info` in the image's Python environments (the venv under
    /opt and Debian's dist-packages): name and version from its METADATA, as pip reads them."""
    seen: dict[tuple[str, str], Component] = {}
    for pattern in SITE_GLOBS:
        for site in sorted(root.glob(pattern)):
            for info in sorted(site.glob("*.dist-info")):
                meta_file = info / "METADATA"
                if not meta_file.is_file():
                    continue
                meta = HeaderParser().parsestr(meta_file.read_text(encoding="utf-8", errors="replace"))
                name, version = meta.get("Name"), meta.get("Version")
                if not name or not version:
                    continue
                licence = meta.get("License-Expression") or ""
                if not licence:
                    short = (meta.get("License") or "").strip()
                    licence = short if short and "\n" not in short and len(short) < 64 else ""
                norm = pypi_name(name)
                where = "/" + str(site.relative_to(root))
                seen.setdefault((norm, version), Component(
                    "pypi", norm, version, f"pkg:pypi/{norm}@{quote(version, safe='')}",
                    licenses=(licence,) if licence else (), properties=(("python:site", where),)))
    return sorted(seen.values())


def components_of(root: Path) -> list[Component]:
    return debian_packages(root) + python_distributions(root)


def cyclonedx(components: Iterable[Component], *, repository: str, tag: str, digest: str,
              created: int, description: str = "") -> dict[str, Any]:
    """The CycloneDX 1.5 document (JSON form) for one image: `metadata.component` is the image itself
    (type container, purl pkg:oci with its manifest digest), `components` what is inside it."""
    comps = sorted(set(components))
    image_purl = (f"pkg:oci/{quote(repository.rsplit('/', 1)[-1], safe='')}@{quote(digest, safe='')}"
                  f"?repository_url={quote(repository, safe='/')}&tag={quote(tag, safe='')}")
    listed: list[dict[str, Any]] = []
    for c in comps:
        entry: dict[str, Any] = {"type": "library" if c.ecosystem == "pypi" else "application",
                                 "bom-ref": c.purl, "name": c.name, "version": c.version, "purl": c.purl}
        if c.licenses:
            entry["licenses"] = [{"expression": lic} if _is_expression(lic) else {"license": {"name": lic}}
                                 for lic in c.licenses]
        if c.properties:
            entry["properties"] = [{"name": k, "value": v} for k, v in c.properties]
        listed.append(entry)
    serial = uuid.uuid5(uuid.NAMESPACE_URL, image_purl + "\n" + "\n".join(c.purl for c in comps))
    image_component: dict[str, Any] = {"type": "container", "bom-ref": image_purl, "name": repository,
                                       "version": tag, "purl": image_purl}
    if description:
        image_component["description"] = description
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "isthmus.local.images.sbom",
                                      "description": "dpkg status and Python dist-info of the image's rootfs"}]},
            "component": image_component,
        },
        "components": listed,
        "dependencies": [{"ref": image_purl, "dependsOn": [c.purl for c in comps]}],
    }


_SPDX_OPERATORS = (" AND ", " OR ", " WITH ")


def _is_expression(licence: str) -> bool:
    """An SPDX expression (License-Expression, or a bare SPDX-looking id) goes in `expression`;
    free text (an old-style License field) in `license.name`, as CycloneDX asks."""
    return any(op in licence for op in _SPDX_OPERATORS) or all(ch.isalnum() or ch in "-.+" for ch in licence)


def write(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
