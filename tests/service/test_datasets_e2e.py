"""Datasets end to end on the local backend, with real files: a job that read a dataset makes
its node warm (the files are copied into that node's cache), the next job reading it prefers
that node, a job that requires a dataset warm waits with ``DatasetNotWarm`` until a preload has
copied it onto a node, and an eviction deletes the files."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from job_world import build_world, job_spec, step_until
from sqlalchemy import select

from gpuaas.backends.local import LocalBackend, procs
from gpuaas.backends.local.state import RunRecord
from gpuaas.backends.logs import LogLayout
from gpuaas.service.datasets import Datasets, preload
from gpuaas.service.errors import ApiError
from gpuaas.service.governance_kinds import At
from gpuaas.service.jobs import cancel_job, submit_job
from gpuaas.service.models.datasets import DatasetIn, PreloadIn
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import DatasetCache, DatasetRow, Job, Tenant


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "shards").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "shards" / "0.bin").write_bytes(b"\x00" * 4096)
    return root


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "local", LogLayout(tmp_path / "logs"))


@pytest.fixture
def reconciler(
    db: Database, world: dict[str, int], tmp_path: Path, backend: LocalBackend
) -> Iterator[Reconciler]:
    settings = Settings(db_url=db.url, data_dir=tmp_path, dataset_cache_bytes=1 << 20)
    r = Reconciler(db, settings, backend=backend)
    yield r
    r.stop()
    for path in (tmp_path / "local").glob("*/attempt-*/run.json"):  # nothing left running
        for pod in RunRecord.load(path).pods:
            if pod.pid is not None and pod.start is not None:
                procs.signal_group(pod.pid, pod.start, signal.SIGKILL)


def at(db: Database, world: dict[str, int]) -> Any:
    class Scope:
        def __enter__(self) -> At:
            self._cm = db.session()
            session = self._cm.__enter__()
            tenant = session.get(Tenant, world["tenant"])
            return At(session, None, tenant)  # type: ignore[arg-type]

        def __exit__(self, *exc: object) -> None:
            self._cm.__exit__(*exc)  # type: ignore[arg-type]

    return Scope()


def register(db: Database, world: dict[str, int], name: str, uri: str) -> None:
    with at(db, world) as where:
        Datasets().create(where, DatasetIn(name=name, uri=uri, size="8Ki"))


def submit(db: Database, world: dict[str, int], spec: dict[str, Any]) -> int:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), time.time())
        return job.id


def job(db: Database, job_id: int) -> Job:
    with db.sessions() as s:
        row = s.get(Job, job_id)
        assert row is not None
        s.expunge(row)
        return row


def nodes_of(db: Database, job_id: int) -> list[str]:
    return [p["node"] for p in job(db, job_id).placement or []]


def caches(db: Database) -> dict[tuple[int, str], tuple[str, str]]:
    with db.sessions() as s:
        return {
            (c.dataset_id, c.node): (c.state, c.source) for c in s.scalars(select(DatasetCache))
        }


def reads(name: str, locality: str = "preferred", gpus: int = 1) -> dict[str, Any]:
    """A job that fails unless its dataset's files are where gpuaas says they are."""
    return job_spec(
        name,
        gpus,
        command=[
            "sh",
            "-c",
            'test -f "$GPUAAS_DATASET_DIR/a.txt" && test -f "$GPUAAS_DATASET_DIR/shards/0.bin"',
        ],
        dataset={"name": "corpus", "locality": locality},
    )


def done(db: Database, job_id: int) -> bool:
    return job(db, job_id).state in ("Succeeded", "Failed")


def test_a_job_warms_its_node_and_the_next_prefers_it(
    db: Database, world: dict[str, int], reconciler: Reconciler, data: Path, tmp_path: Path
) -> None:
    register(db, world, "corpus", f"file://{data}")
    blocker = submit(db, world, job_spec("blocker", 4, command=["sleep", "60"]))
    step_until(reconciler, lambda: job(db, blocker).state == "Running")
    first = submit(db, world, reads("first"))
    step_until(reconciler, lambda: done(db, first))
    assert job(db, first).state == "Succeeded", job(db, first).reason
    [warm_node] = nodes_of(db, first)
    assert warm_node != nodes_of(db, blocker)[0]
    step_until(reconciler, lambda: (1, warm_node) in caches(db))
    assert caches(db)[(1, warm_node)] == ("warm", "job")
    copy = tmp_path / "local" / "dataset-cache" / warm_node / "acme" / "corpus" / "data"
    assert (copy / "a.txt").read_text() == "alpha\n"
    with db.session() as s:
        cancel_job(s, s.get(Job, blocker), time.time())  # type: ignore[arg-type]
    step_until(reconciler, lambda: done(db, blocker) or job(db, blocker).state == "Cancelled")
    # a job without data goes where packing sends it; one reading corpus goes where it is warm
    plain = submit(db, world, job_spec("plain", 1, command=["true"]))
    step_until(reconciler, lambda: done(db, plain))
    second = submit(db, world, reads("second"))
    step_until(reconciler, lambda: done(db, second))
    assert nodes_of(db, second) == [warm_node]
    assert nodes_of(db, plain) != [warm_node], "the preference was not needed: test is moot"
    assert job(db, second).state == "Succeeded"


def test_required_locality_waits_with_the_reason_until_a_preload(
    db: Database, world: dict[str, int], reconciler: Reconciler, data: Path
) -> None:
    register(db, world, "corpus", str(data))
    waiting = submit(db, world, reads("needs-warm", "required"))
    for _ in range(5):
        reconciler.step(time.time())
    row = job(db, waiting)
    assert row.state == "Pending"
    assert row.reason_code == "DatasetNotWarm", row.reason
    assert "corpus" in row.reason
    with at(db, world) as where:
        node = "node-1"
        out = preload(where, "corpus", PreloadIn(nodes=[node]))
        assert [c.state for c in out.caches] == ["loading"]
    step_until(reconciler, lambda: done(db, waiting))
    assert job(db, waiting).state == "Succeeded", job(db, waiting).reason
    assert nodes_of(db, waiting) == [node]
    assert caches(db)[(1, node)][0] == "warm"


def test_a_full_cache_evicts_the_least_recently_used(
    db: Database, world: dict[str, int], reconciler: Reconciler, tmp_path: Path
) -> None:
    """Capacity 1 MiB per node: three 400 KiB datasets cannot all stay; the oldest goes, files
    and all."""
    for name in ("d1", "d2", "d3"):
        root = tmp_path / name
        root.mkdir()
        (root / "blob").write_bytes(b"x" * 400 * 1024)
        register(db, world, name, str(root))
    for name in ("d1", "d2", "d3"):
        with at(db, world) as where:
            preload(where, name, PreloadIn(nodes=["node-1"]))
        step_until(reconciler, lambda: all(s != "loading" for s, _ in caches(db).values()))
    states = caches(db)
    assert (1, "node-1") not in states  # d1, the least recently used, was evicted
    assert states[(2, "node-1")][0] == states[(3, "node-1")][0] == "warm"
    cache = tmp_path / "local" / "dataset-cache" / "node-1" / "acme"
    assert not (cache / "d1").exists() and (cache / "d3" / "data" / "blob").exists()


SCHEMAS = Path(__file__).resolve().parents[2] / ".." / "shared" / "schemas"


@pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"{SCHEMAS} is absent")
def test_the_job_manifest_carries_the_datasets_fluid_objects(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    """``gpuaas jobs manifest`` of a job reading a registered dataset: the Fluid Dataset, its
    runtime and a DataLoad first, then the job whose pods mount the dataset's PVC."""
    from gpuaas.backends.kubernetes.schemas import validate
    from gpuaas.service.job_manifest import job_manifests

    with at(db, world) as where:
        Datasets().create(
            where, DatasetIn(name="corpus", uri="s3://bucket/corpus", size="8Gi", runtime="juicefs")
        )
    job_id = submit(db, world, job_spec("reader", 1, command=["true"], dataset={"name": "corpus"}))
    settings = Settings(db_url=db.url, data_dir=tmp_path)
    with db.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        docs = job_manifests(s, row, "acme", settings, "kueue")
    assert [d["kind"] for d in docs[:3]] == ["Dataset", "JuiceFSRuntime", "DataLoad"]
    assert "s3://bucket/corpus" in repr(docs[:2])  # JuiceFS names its bucket in the options
    validate(docs, SCHEMAS)
    pod = docs[3]["spec"]["template"]["spec"]
    assert {"name": "dataset-corpus", "persistentVolumeClaim": {"claimName": "corpus",
            "readOnly": True}} in pod["volumes"]  # fmt: skip
    with db.session() as s:  # a dataset deleted under the job: a conflict, not a 500
        s.execute(DatasetRow.__table__.delete())
    with db.session() as s, pytest.raises(ApiError) as gone:
        job_manifests(s, s.get(Job, job_id), "acme", settings, "kueue")  # type: ignore[arg-type]
    assert gone.value.status == 409
