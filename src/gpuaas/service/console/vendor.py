"""The console's third-party browser assets, vendored so the console and ``/docs`` work offline.

Each asset is a file of one npm package at a pinned version, copied as published (never edited)
into ``static/vendor/`` and listed in ``static/vendor/VERSIONS`` with its package, version,
licence and SHA-256. ``make console-assets`` (``python -m gpuaas.service.console.vendor``)
fetches them again with ``npm pack`` and rewrites ``VERSIONS``; bump a version here, run it,
and commit the files it wrote. ``VERSIONS`` is what a test checks the shipped files against.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

VENDOR = Path(__file__).parent / "static" / "vendor"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    licence: str
    #: path inside the npm tarball (under ``package/``) -> file name in ``static/vendor``
    files: dict[str, str]


PACKAGES = (
    Package(
        "htmx.org",
        "2.0.11",
        "0BSD",
        {"dist/htmx.min.js": "htmx.min.js", "LICENSE": "htmx.org.LICENSE"},
    ),
    Package(
        "uplot",
        "1.6.32",
        "MIT",
        {
            "dist/uPlot.iife.min.js": "uPlot.iife.min.js",
            "dist/uPlot.min.css": "uPlot.min.css",
            "LICENSE": "uplot.LICENSE",
        },
    ),
    Package(
        "swagger-ui-dist",
        "5.35.0",
        "Apache-2.0",
        {
            "swagger-ui-bundle.js": "swagger-ui-bundle.js",
            "swagger-ui.css": "swagger-ui.css",
            "favicon-32x32.png": "swagger-favicon-32x32.png",
            "LICENSE": "swagger-ui-dist.LICENSE",
            "swagger-ui-bundle.js.LICENSE.txt": "swagger-ui-bundle.js.LICENSE.txt",
        },
    ),
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_versions(vendor: Path = VENDOR) -> dict[str, tuple[str, str, str, str]]:
    """``VERSIONS`` as ``{file: (package, version, licence, sha256)}``."""
    out: dict[str, tuple[str, str, str, str]] = {}
    for line in (vendor / "VERSIONS").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        file, package, version, licence, digest = line.split()
        out[file] = (package, version, licence, digest)
    return out


def fetch(vendor: Path = VENDOR) -> None:
    """Fetch every package with ``npm pack`` and copy its files; rewrite ``VERSIONS``."""
    vendor.mkdir(parents=True, exist_ok=True)
    lines = ["# file package version licence sha256 (python -m gpuaas.service.console.vendor)"]
    with tempfile.TemporaryDirectory() as tmp:
        for pkg in PACKAGES:
            spec = f"{pkg.name}@{pkg.version}"
            out = subprocess.run(
                ["npm", "pack", spec, "--silent", "--pack-destination", tmp],
                check=True,
                capture_output=True,
                text=True,
            )
            tarball = Path(tmp) / out.stdout.strip().splitlines()[-1]
            with tarfile.open(tarball) as tar:
                for inner, name in pkg.files.items():
                    member = tar.extractfile(f"package/{inner}")
                    if member is None:
                        raise SystemExit(f"{spec} has no {inner}")
                    (vendor / name).write_bytes(member.read())
                    digest = sha256(vendor / name)
                    lines.append(f"{name} {pkg.name} {pkg.version} {pkg.licence} {digest}")
    (vendor / "VERSIONS").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    fetch(Path(sys.argv[1]) if len(sys.argv) > 1 else VENDOR)
