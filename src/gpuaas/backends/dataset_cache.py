"""A dataset cache per node on a filesystem: what "warm" means on the local and Slurm backends.

There a dataset is a path (``file:///data/imagenet`` or ``/data/imagenet``; an ``nfs://host/path``
dataset is read at ``/path``, where the node mounts it), and a node holds it warm when a copy of
its files sits in the node's cache::

    <root>/<node>/<tenant>/<dataset>/data/...      the copy
    <root>/<node>/<tenant>/<dataset>/MANIFEST.json  relative path -> size of every file copied

``root`` is ``<data dir>/dataset-cache`` for the local backend (every node is this host, so each
node gets a directory of its own) and a node-local directory on a Slurm cluster. A copy is
made into a temporary directory and renamed into place, so a half-made copy is never taken for
warm. :meth:`NodeCaches.check` is a real check: the manifest must list exactly the files the
source has now, with the same sizes, and every one must be present in the copy with that size;
a changed source or a deleted file makes the node cold again. No clock is read here: what was
used when is the service's (its ``dataset_caches`` rows).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpuaas.model.dataset import DatasetScheme

MANIFEST = "MANIFEST.json"


class CacheError(Exception):
    """The dataset cannot be cached here (a scheme with no local path, a missing source)."""


def local_source(uri: str) -> Path:
    """The path a node reads ``uri`` at: ``file://`` and plain absolute paths as they are, an
    ``nfs://host/path`` dataset at ``/path`` (its mount point); others have none here."""
    head, sep, rest = uri.partition("://")
    scheme = DatasetScheme(head) if sep else DatasetScheme.FILE
    if scheme is DatasetScheme.FILE:
        return Path(rest if sep else uri)
    if scheme is DatasetScheme.NFS:
        _, _, path = rest.partition("/")
        return Path("/" + path)
    raise CacheError(
        f"a {scheme.value}:// dataset has no local path: on this backend a dataset is a path "
        "(file://, nfs:// mounted at the same path, or an absolute path)"
    )


def _files(source: Path) -> dict[str, int]:
    """Every regular file under ``source`` (or ``source`` itself): relative path -> size."""
    if source.is_file():
        return {source.name: source.stat().st_size}
    if not source.is_dir():
        raise CacheError(f"the dataset's path {source} does not exist")
    out: dict[str, int] = {}
    for path in sorted(source.rglob("*")):
        if path.is_file():
            out[path.relative_to(source).as_posix()] = path.stat().st_size
    return out


@dataclass(frozen=True, slots=True)
class NodeCaches:
    """The dataset caches of the nodes under ``root`` (see the module docstring)."""

    root: Path

    def place(self, node: str, tenant: str, dataset: str) -> Path:
        for part in (node, tenant, dataset):
            if not part or "/" in part or part in (".", ".."):
                raise CacheError(f"{part!r} cannot name a cache directory")
        return self.root / node / tenant / dataset

    def data_path(self, node: str, tenant: str, dataset: str) -> Path:
        """Where a job on ``node`` reads the cached copy."""
        return self.place(node, tenant, dataset) / "data"

    def check(self, node: str, tenant: str, dataset: str, uri: str) -> bool:
        """Whether ``node`` holds the dataset's files now (see the module docstring)."""
        place = self.place(node, tenant, dataset)
        try:
            listed = json.loads((place / MANIFEST).read_text())
            source = _files(local_source(uri))
        except (OSError, ValueError, CacheError):
            return False
        if listed != source:
            return False
        data = place / "data"
        for rel, size in listed.items():
            try:
                if (data / rel).stat().st_size != size:
                    return False
            except OSError:
                return False
        return True

    def fill(self, node: str, tenant: str, dataset: str, uri: str) -> int:
        """Copy the dataset's files into ``node``'s cache unless they are there already (then
        only checked); returns the bytes it holds. CacheError when there is nothing to copy."""
        if self.check(node, tenant, dataset, uri):
            listed = json.loads((self.place(node, tenant, dataset) / MANIFEST).read_text())
            return int(sum(listed.values()))
        source = local_source(uri)
        files = _files(source)
        place = self.place(node, tenant, dataset)
        place.parent.mkdir(parents=True, exist_ok=True)
        tmp = place.parent / f".{dataset}.{uuid.uuid4().hex}"
        try:
            if source.is_file():
                (tmp / "data").mkdir(parents=True)
                shutil.copy2(source, tmp / "data" / source.name)
            else:
                shutil.copytree(source, tmp / "data")
            (tmp / MANIFEST).write_text(json.dumps(files, sort_keys=True))
            if place.exists():
                shutil.rmtree(place)
            os.replace(tmp, place)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return int(sum(files.values()))

    def evict(self, node: str, tenant: str, dataset: str) -> None:
        """Delete ``node``'s copy (the cache made room for another dataset)."""
        shutil.rmtree(self.place(node, tenant, dataset), ignore_errors=True)
