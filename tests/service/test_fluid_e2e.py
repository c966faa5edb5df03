"""Datasets on the kubernetes backend through the reconciler: a preload applies the Fluid
objects (official client, fake API server below its transport), the status written into the
fake server as Fluid's controllers would write it turns nodes warm or a preload failed, a job
that requires the dataset warm lands where Fluid holds it, and a node Fluid no longer caches
on is forgotten. No Fluid runs here: what only a live cluster shows is in docs/kubernetes.md."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from job_world import build_world, job_spec, step_until
from sqlalchemy import select

from gpuaas.backends.kubernetes.backend import KubernetesBackend
from gpuaas.backends.kubernetes.fluid_status import cache_label
from gpuaas.service import fluid_warm
from gpuaas.service.datasets import Datasets, preload
from gpuaas.service.governance_kinds import At
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.datasets import DatasetIn, PreloadIn
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import DatasetCache, DatasetRow, Job, Tenant

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "kubernetes"))
from fake_apiserver import FakeApiServer

NS = "gpuaas-acme"


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def reconciler(
    db: Database,
    world: dict[str, int],
    tmp_path: Path,
    server: FakeApiServer,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Reconciler]:
    monkeypatch.setattr(fluid_warm, "REPORT_EVERY", 0.0)  # read Fluid at every step
    settings = Settings(db_url=db.url, data_dir=tmp_path, reconcile_interval=0.05)
    r = Reconciler(db, settings, backend=KubernetesBackend(server.client()))
    yield r
    r.stop()


def _at(db: Database, world: dict[str, int], fn: Any) -> Any:
    with db.session() as session:
        return fn(At(session, None, session.get(Tenant, world["tenant"])))  # type: ignore[arg-type]


def _register(db: Database, world: dict[str, int], name: str) -> None:
    body = DatasetIn(name=name, uri=f"s3://data/{name}", size="8Ki")
    _at(db, world, lambda at: Datasets().create(at, body))


def _preload(db: Database, world: dict[str, int], name: str, nodes: list[str]) -> None:
    _at(db, world, lambda at: preload(at, name, PreloadIn(nodes=nodes)))


def _caches(db: Database, name: str) -> dict[str, tuple[str, str, str]]:
    with db.sessions() as s:
        rows = s.scalars(select(DatasetCache).join(DatasetRow).where(DatasetRow.name == name)).all()
        return {c.node: (c.state, c.source, c.error) for c in rows}


def _bound(server: FakeApiServer, name: str, cached: str = "0.0%") -> None:
    status = {"phase": "Bound", "cacheStates": {"cachedPercentage": cached}}
    server.set_status(name, status, plural="datasets")


def test_a_preload_on_kubernetes_warms_the_nodes_fluid_caches_on(
    db: Database, world: dict[str, int], reconciler: Reconciler, server: FakeApiServer
) -> None:
    _register(db, world, "corpus")
    reconciler.step(time.time())
    _preload(db, world, "corpus", ["node-1"])
    step_until(reconciler, lambda: any(k[2] == "corpus-preload" for k in server.objects))
    _, load = server.find("corpus-preload", "dataloads")
    hosts = load["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert hosts["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["node-1"]
    assert ("/apis/data.fluid.io/v1alpha1/alluxioruntimes", NS, "corpus") in server.objects
    for _ in range(3):  # no status yet: loading, and nothing is applied twice
        reconciler.step(time.time())
    assert _caches(db, "corpus") == {"node-1": ("loading", "preload", "")}
    assert sum(1 for m, _, _ in server.requests if m == "POST") == 3
    # Fluid binds the dataset, puts a cache worker on node-1, and the load completes
    server.add_node("node-1", {cache_label(NS, "corpus"): "true"})
    _bound(server, "corpus")
    server.set_status("corpus-preload", {"phase": "Complete"}, plural="dataloads")
    step_until(reconciler, lambda: _caches(db, "corpus")["node-1"][0] == "warm")
    assert _caches(db, "corpus") == {"node-1": ("warm", "preload", "")}
    # a job that requires it warm lands there
    spec = job_spec("reads", 4, dataset={"name": "corpus", "locality": "required"})
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), time.time())
        job_id = job.id

    def placed() -> list[str]:
        with db.sessions() as s:
            row = s.get(Job, job_id)
            return sorted({p["node"] for p in (row.placement or [])})

    step_until(reconciler, lambda: bool(placed()))
    assert placed() == ["node-1"]
    # Fluid moves the worker (node-1 unlabelled, node-2 labelled, all of it cached): node-2
    # turns warm by Fluid's report, node-1 is forgotten
    server.objects[("/api/v1/nodes", "", "node-1")]["metadata"]["labels"] = {}
    server.add_node("node-2", {cache_label(NS, "corpus"): "true"})
    _bound(server, "corpus", cached="100.0%")
    step_until(reconciler, lambda: "node-1" not in _caches(db, "corpus"))
    assert _caches(db, "corpus") == {"node-2": ("warm", "backend", "")}
    pool = reconciler.engine.pool  # type: ignore[union-attr]
    assert pool.warm.datasets()[("acme", "corpus")] == {"node-2"}


def test_a_failed_dataload_fails_the_preload_with_fluids_reason(
    db: Database, world: dict[str, int], reconciler: Reconciler, server: FakeApiServer
) -> None:
    _register(db, world, "logs")
    reconciler.step(time.time())
    _preload(db, world, "logs", ["node-1", "node-2"])
    step_until(reconciler, lambda: any(k[2] == "logs-preload" for k in server.objects))
    _bound(server, "logs")
    failed = {"type": "Failed", "status": "True", "reason": "DataLoadJobFailed",
              "message": "s3: access denied"}  # fmt: skip
    server.set_status("logs-preload", {"phase": "Failed", "conditions": [failed]},
                      plural="dataloads")  # fmt: skip
    step_until(reconciler, lambda: _caches(db, "logs")["node-1"][0] == "failed")
    for node in ("node-1", "node-2"):
        state, source, error = _caches(db, "logs")[node]
        assert (state, source) == ("failed", "preload")
        assert error == "Fluid DataLoad logs-preload failed: DataLoadJobFailed: s3: access denied"


def test_fluid_not_installed_fails_the_preload_with_the_api_servers_words(
    db: Database, world: dict[str, int], reconciler: Reconciler, server: FakeApiServer
) -> None:
    from fake_apiserver import status

    _register(db, world, "corpus")
    reconciler.step(time.time())
    server.fail("POST", "/datasets", status(404, "NotFound", "the server could not find it"))
    _preload(db, world, "corpus", ["node-1"])
    step_until(reconciler, lambda: _caches(db, "corpus")["node-1"][0] == "failed")
    error = _caches(db, "corpus")["node-1"][2]
    assert error.startswith("Fluid preload refused: the cluster serves no data.fluid.io")
    assert "is Fluid installed" in error


def test_a_node_asked_where_fluid_puts_no_worker_fails_and_thin_has_nothing_to_load(
    db: Database, world: dict[str, int], reconciler: Reconciler, server: FakeApiServer
) -> None:
    _register(db, world, "corpus")
    thin = DatasetIn(name="mounted", uri="s3://data/mounted", runtime="thin")
    _at(db, world, lambda at: Datasets().create(at, thin))
    reconciler.step(time.time())
    _preload(db, world, "corpus", ["node-1", "node-2"])
    _preload(db, world, "mounted", ["node-1"])
    step_until(reconciler, lambda: _caches(db, "mounted")["node-1"][0] == "failed")
    assert "thin dataset has no cache" in _caches(db, "mounted")["node-1"][2]
    assert not any(k[2] == "mounted" for k in server.objects)  # nothing applied for it
    server.add_node("node-1", {cache_label(NS, "corpus"): "true"})
    _bound(server, "corpus")
    server.set_status("corpus-preload", {"phase": "Complete"}, plural="dataloads")
    step_until(reconciler, lambda: _caches(db, "corpus")["node-2"][0] != "loading")
    assert _caches(db, "corpus")["node-1"] == ("warm", "preload", "")
    state, _, error = _caches(db, "corpus")["node-2"]
    assert state == "failed"
    assert error == (
        "Fluid DataLoad corpus-preload completed but Fluid keeps no cache of it on node-2 "
        "(its cache workers: node-1)"
    )
