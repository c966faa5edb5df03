"""A dataset cache per node on a filesystem: what "warm" means on the local and Slurm backends.

There a dataset is a path (``file:///data/imagenet`` or ``/data/imagenet``; an ``nfs://host/path``
dataset is read at ``/path``, where the node mounts it), and a node holds it warm when a copy of
its files sits in the node's cache::

    <root>/<node>/<tenant>/<dataset>/data/...      the copy
    <root>/<node>/<tenant>/<dataset>/MANIFEST.json  relative path -> size of every file copied

``root`` is ``<data dir>/dataset-cache`` for the local backend (every node is this host, so each
node gets a directory of its own) and a directory on each node's local disk on a Slurm cluster,
where the copying and checking run on the node itself, as small Slurm jobs pinned to it that run
this module's command line (:func:`main`; see :mod:`gpuaas.backends.slurm.datasets`). A copy is
made into a temporary directory and renamed into place, so a half-made copy is never taken for
warm. :meth:`NodeCaches.check` is a real check: the manifest must list exactly the files the
source has now, with the same sizes, and every one must be present in the copy with that size;
a changed source or a deleted file makes the node cold again. No clock is read here: what was
used when is the service's (its ``dataset_caches`` rows).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuaas.model.dataset import DatasetScheme

MANIFEST = "MANIFEST.json"


class CacheError(Exception):
    """The dataset cannot be cached here (a scheme with no local path, a missing source)."""


class NodeCacheAgent(Protocol):
    """What the service asks of a backend's node caches (:mod:`gpuaas.service.datasets`).
    :class:`NodeCaches` answers at once (its files are on this host); a backend whose caches
    sit on remote nodes answers ``None`` ("asked, not known yet") until the work it started on
    the node has reported, and the service asks again at a later step."""

    def fill(self, node: str, tenant: str, dataset: str, uri: str) -> int | None:
        """Copy (or find, checked) the dataset on ``node``: the bytes it holds there, None
        while that runs; CacheError when it cannot be cached there."""
        ...

    def check(self, node: str, tenant: str, dataset: str, uri: str) -> bool | None:
        """Whether ``node`` holds the dataset's files now; None while that is being found out."""
        ...

    def held(self, node: str, tenant: str, dataset: str, uri: str) -> int | None:
        """After a job that read the dataset succeeded on ``node``: the bytes held there,
        checked, or None when the node is not known to hold it."""
        ...

    def evict(self, node: str, tenant: str, dataset: str) -> None: ...


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

    def held(self, node: str, tenant: str, dataset: str, uri: str) -> int | None:
        """The bytes of ``node``'s copy when :meth:`check` holds, else None."""
        if not self.check(node, tenant, dataset, uri):
            return None
        listed = json.loads((self.place(node, tenant, dataset) / MANIFEST).read_text())
        return int(sum(listed.values()))

    def fill(self, node: str, tenant: str, dataset: str, uri: str) -> int:
        """Copy the dataset's files into ``node``'s cache unless they are there already (then
        only checked); returns the bytes it holds. CacheError when there is nothing to copy."""
        held = self.held(node, tenant, dataset, uri)
        if held is not None:
            return held
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
                shutil.rmtree(place, ignore_errors=True)
            try:
                os.replace(tmp, place)
            except OSError:  # another fill (a job and a preload on one node) got there first
                held = self.held(node, tenant, dataset, uri)
                if held is None:
                    raise
                return held
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return int(sum(files.values()))

    def evict(self, node: str, tenant: str, dataset: str) -> None:
        """Delete ``node``'s copy (the cache made room for another dataset)."""
        shutil.rmtree(self.place(node, tenant, dataset), ignore_errors=True)


# --- on a node: the command line the Slurm backend's small jobs run ---------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuaas.backends.dataset_cache fill|check|evict --root R --tenant T --dataset D
    [--uri U] [--node N] [--report FILE]``, run ON the node whose cache it reads or writes (the
    node defaults to ``$SLURMD_NODENAME``). It writes its answer to ``--report`` (a file on the
    file system the control plane shares, written whole: temporary file then rename) as
    ``{"node", "op", "ok", "bytes", "error"}``; ``fill`` exits 1 when the dataset cannot be
    cached, so a job that needs the copy stops there, with the reason on its stderr."""
    parser = argparse.ArgumentParser(prog="python -m gpuaas.backends.dataset_cache")
    parser.add_argument("op", choices=("fill", "check", "evict"))
    parser.add_argument("--root", required=True)
    parser.add_argument("--node", default=os.environ.get("SLURMD_NODENAME", ""))
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--uri", default="")
    parser.add_argument("--report", default="")
    args = parser.parse_args(argv)
    caches = NodeCaches(Path(args.root))
    answer: dict[str, object] = {"node": args.node, "op": args.op, "ok": True, "bytes": 0,
                                 "error": ""}  # fmt: skip
    try:
        if args.op == "fill":
            answer["bytes"] = caches.fill(args.node, args.tenant, args.dataset, args.uri)
        elif args.op == "check":
            held = caches.held(args.node, args.tenant, args.dataset, args.uri)
            answer["ok"], answer["bytes"] = held is not None, held or 0
        else:
            caches.evict(args.node, args.tenant, args.dataset)
    except (CacheError, OSError) as exc:
        answer["ok"], answer["error"] = False, str(exc)
    report = args.report.replace("%N", args.node)
    if report:
        path = Path(report)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        tmp.write_text(json.dumps(answer))
        os.replace(tmp, path)
    if not answer["ok"] and args.op == "fill":
        print(f"gpuaas: dataset {args.dataset} on {args.node}: {answer['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
