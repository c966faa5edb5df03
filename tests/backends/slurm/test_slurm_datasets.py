"""Datasets on the real Slurm cluster: each node's cache is a directory on the node, filled and
checked only by Slurm jobs on that node. A job that reads a dataset fills its node's cache
before its pods run and, when it succeeds, makes the node warm; the next job reading it goes
there; a job that requires it warm waits with ``DatasetNotWarm`` until a preload (a Slurm job
pinned to a node) has copied it there; the periodic check (a Slurm job on the node) forgets a
cache whose files are gone."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import Cluster
from slurm_world import backend, build, job, settings, spec, state_is, step_until, submit
from sqlalchemy import select

from gpuaas.backends.logs import LogLayout
from gpuaas.backends.slurm import SlurmBackend
from gpuaas.service.datasets import Datasets, preload
from gpuaas.service.fleet import set_schedulable
from gpuaas.service.governance_kinds import At
from gpuaas.service.models.datasets import DatasetIn, PreloadIn
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.db import Database
from gpuaas.store.tables import DatasetCache, DatasetRow, Tenant

SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Database]:
    database = Database(sqlite_url)
    yield database
    database.dispose()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "shards").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "shards" / "0.bin").write_bytes(b"\x00" * 4096)
    return root


def slurm_backend(cluster: Cluster, root: Path) -> SlurmBackend:
    # the nodes run this checkout's gpuaas (on a real cluster: the one installed there)
    command = ["env", f"PYTHONPATH={SRC}", sys.executable, "-m", "gpuaas.backends.dataset_cache"]
    return backend(cluster, root, dataset_cache=root / "node-disk", dataset_command=command)


def register(db: Database, world: dict[str, int], name: str, uri: str) -> None:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        Datasets().create(At(s, None, tenant), DatasetIn(name=name, uri=uri))  # type: ignore[arg-type]


def ask_preload(db: Database, world: dict[str, int], name: str, nodes: list[str]) -> None:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        preload(At(s, None, tenant), name, PreloadIn(nodes=nodes))  # type: ignore[arg-type]


def caches(db: Database, name: str) -> dict[str, tuple[str, str, str]]:
    """node -> (state, source, error) of dataset ``name``'s caches."""
    with db.sessions() as s:
        rows = s.scalars(
            select(DatasetCache)
            .join(DatasetRow, DatasetRow.id == DatasetCache.dataset_id)
            .where(DatasetRow.name == name)
        )
        return {c.node: (c.state, c.source, c.error) for c in rows}


def reads(name: str, dataset: str, locality: str = "preferred") -> dict[str, Any]:
    """A job that fails unless its dataset's files are in its node's cache, as gpuaas says."""
    check = (
        'case "$GPUAAS_DATASET_DIR" in */"$SLURMD_NODENAME"/acme/*) ;; *) exit 3 ;; esac; '
        'test -f "$GPUAAS_DATASET_DIR/a.txt" && test -f "$GPUAAS_DATASET_DIR/shards/0.bin" '
        '&& echo "$GPUAAS_DATASET on $SLURMD_NODENAME"'
    )
    return spec(name, ["bash", "-c", check], dataset={"name": dataset, "locality": locality})


def nodes_of(db: Database, job_id: int) -> list[str]:
    return [p["node"] for p in job(db, job_id).placement or []]


@contextmanager
def running(db: Database, root: Path, slurm: SlurmBackend, **changes: Any) -> Iterator[Reconciler]:
    """A reconciler driving ``slurm`` (settings changed by ``changes``), stopped after."""
    reconciler = Reconciler(db, replace(settings(db, root), **changes), backend=slurm)
    try:
        yield reconciler
    finally:
        reconciler.stop()


def cordon(db: Database, nodes: list[str], cordoned: bool) -> None:
    with db.session() as s:
        for node in nodes:
            set_schedulable(s, node, time.time(), cordoned=cordoned)


def test_a_slurm_job_warms_its_node_and_the_next_prefers_it(
    slurm_cluster: Cluster, db: Database, tmp_path: Path, corpus: Path
) -> None:
    world = build(db, slurm_cluster, 16)
    with running(db, tmp_path, slurm_backend(slurm_cluster, tmp_path)) as reconciler:
        register(db, world, "corpus", f"file://{corpus}")
        cordon(db, ["n1", "n3"], True)  # the first reader can only run on n2
        first = submit(db, world, reads("first", "corpus"))
        step_until(reconciler, state_is(db, first, "Succeeded", "Failed"), timeout=60)
        assert job(db, first).state == "Succeeded", job(db, first).reason
        assert nodes_of(db, first) == ["n2"]
        out = LogLayout(tmp_path / "logs").stdout(first, 0, 0).read_text()
        assert out == "corpus on n2\n"
        step_until(reconciler, lambda: "n2" in caches(db, "corpus"))
        assert caches(db, "corpus") == {"n2": ("warm", "job", "")}
        # the copy is on n2's disk, made by the job's fill step there
        copy = tmp_path / "node-disk" / "n2" / "acme" / "corpus"
        assert (copy / "data" / "a.txt").read_text() == "alpha\n"
        assert (copy / "MANIFEST.json").exists()
        cordon(db, ["n1", "n3"], False)
        # a job without data goes where packing sends it; one reading corpus where it is warm
        plain = submit(db, world, spec("plain", ["true"]))
        step_until(reconciler, state_is(db, plain, "Succeeded", "Failed"), timeout=60)
        second = submit(db, world, reads("second", "corpus"))
        step_until(reconciler, state_is(db, second, "Succeeded", "Failed"), timeout=60)
        assert job(db, second).state == "Succeeded", job(db, second).reason
        assert nodes_of(db, second) == ["n2"]
        assert nodes_of(db, plain) != ["n2"], "the preference was not needed: test is moot"

        # the periodic check runs on the node: a copy deleted there is forgotten
        subprocess.run(
            ["srun", "-w", "n2", "-N1", "-n1", "--mem=64", "rm", "-rf", str(copy / "data")],
            env=slurm_cluster.env, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        reconciler._datasets._verified_at = float("-inf")  # check now, not in 30 s
        step_until(reconciler, lambda: "n2" not in caches(db, "corpus"), timeout=60)


def test_a_required_dataset_waits_until_a_preload_ran_on_a_slurm_node(
    slurm_cluster: Cluster, db: Database, tmp_path: Path, corpus: Path
) -> None:
    world = build(db, slurm_cluster, 16)
    with running(db, tmp_path, slurm_backend(slurm_cluster, tmp_path)) as reconciler:
        register(db, world, "corpus", str(corpus))
        register(db, world, "remote", "s3://bucket/remote")
        waiting = submit(db, world, reads("needs-warm", "corpus", "required"))
        for _ in range(5):
            reconciler.step(time.time())
        row = job(db, waiting)
        assert row.state == "Pending"
        assert row.reason_code == "DatasetNotWarm", row.reason
        assert "corpus" in row.reason
        ask_preload(db, world, "corpus", ["n3"])
        ask_preload(db, world, "remote", ["n1"])  # no path on a Slurm node: refused, no job
        assert caches(db, "corpus") == {"n3": ("loading", "preload", "")}
        step_until(reconciler, state_is(db, waiting, "Succeeded", "Failed"), timeout=60)
        assert job(db, waiting).state == "Succeeded", job(db, waiting).reason
        assert nodes_of(db, waiting) == ["n3"]
        assert caches(db, "corpus")["n3"][0] == "warm"
        state, _, error = caches(db, "remote")["n1"]
        assert state == "failed" and "no local path" in error
        # the preload ran as a Slurm job on n3: its copy is on n3's disk
        manifest = tmp_path / "node-disk" / "n3" / "acme" / "corpus" / "MANIFEST.json"
        assert manifest.exists()


def test_a_full_node_cache_evicts_through_a_job_on_the_node(
    slurm_cluster: Cluster, db: Database, tmp_path: Path
) -> None:
    """1 MiB per node: three 400 KiB datasets preloaded on n1 cannot all stay; the least
    recently used is forgotten and a job on n1 deletes its copy."""
    world = build(db, slurm_cluster, 16)
    slurm = slurm_backend(slurm_cluster, tmp_path)
    with running(db, tmp_path, slurm, dataset_cache_bytes=1 << 20) as reconciler:
        for name in ("d1", "d2", "d3"):
            root = tmp_path / name
            root.mkdir()
            (root / "blob").write_bytes(b"x" * 400 * 1024)
            register(db, world, name, str(root))
        for name in ("d1", "d2", "d3"):
            ask_preload(db, world, name, ["n1"])
            step_until(reconciler, lambda n=name: caches(db, n)["n1"][0] != "loading")
        assert "n1" not in caches(db, "d1")
        assert caches(db, "d2")["n1"][0] == caches(db, "d3")["n1"][0] == "warm"
        disk = tmp_path / "node-disk" / "n1" / "acme"
        step_until(reconciler, lambda: not (disk / "d1").exists())  # the eviction job ran
        assert (disk / "d3" / "data" / "blob").exists()


def test_a_node_job_that_ends_without_an_answer_fails_the_preload(
    slurm_cluster: Cluster, db: Database, tmp_path: Path, corpus: Path
) -> None:
    world = build(db, slurm_cluster, 16)
    broken = backend(
        slurm_cluster, tmp_path, dataset_cache=tmp_path / "node-disk",
        dataset_command=["/nonexistent/python3", "-m", "gpuaas.backends.dataset_cache"],
    )  # fmt: skip
    with running(db, tmp_path, broken) as reconciler:
        register(db, world, "corpus", str(corpus))
        ask_preload(db, world, "corpus", ["n2"])
        step_until(reconciler, lambda: caches(db, "corpus")["n2"][0] != "loading", timeout=60)
        state, _, error = caches(db, "corpus")["n2"]
        assert state == "failed"
        assert "on node n2 ended FAILED with no answer" in error, error
