"""Backends beside the admission step: a blocked, unreachable or broken backend never freezes
the scheduler or strands a job, and each job runs on its own nodes' backend."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from job_world import build_world, job_row, job_spec, step_until

from gpuaas.backends.base import (
    DEFAULT_GRACE,
    BackendEvent,
    BackendJob,
    BackendUnavailable,
    EventKind,
)
from gpuaas.service.backends import BACKEND_LABEL
from gpuaas.service.fleet import register_nodes
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Tenant


class ScriptedBackend:
    """A blocking backend whose launches the test controls: ``gate`` holds a launch until set,
    ``down`` makes every call unavailable, ``broken`` makes launches raise."""

    blocking = True
    time_scale = 1.0

    def __init__(self, name: str) -> None:
        self.name = name
        self.gate = threading.Event()
        self.gate.set()
        self.down: str | None = None
        self.broken = False
        self.launched: list[BackendJob] = []
        self._events: list[BackendEvent] = []
        self._lock = threading.Lock()

    def _check(self) -> None:
        if self.down is not None:
            raise BackendUnavailable(self.down)

    def launch(self, job: BackendJob) -> None:
        self.gate.wait(timeout=30)
        self._check()
        if self.broken:
            raise RuntimeError("driver bug")
        with self._lock:
            self.launched.append(job)
            self._events.append(BackendEvent(job.id, EventKind.STARTED, time.time()))

    def cancel(self, job_id: int, grace: float = DEFAULT_GRACE) -> None:
        self._check()

    def poll(self, now: float) -> list[BackendEvent]:
        self._check()
        with self._lock:
            events, self._events = self._events, []
        return events

    def running(self) -> set[int]:
        return {job.id for job in self.launched}

    def finish(self, job_id: int, exit_code: int, detail: str) -> None:
        kind = EventKind.SUCCEEDED if exit_code == 0 else EventKind.FAILED
        with self._lock:
            self._events.append(BackendEvent(job_id, kind, time.time(), detail, exit_code))


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=16, nodes=2)


def _reconciler(db: Database, tmp_path: Path, *backends: ScriptedBackend) -> Reconciler:
    settings = Settings(db_url=db.url, data_dir=tmp_path, reconcile_interval=0.05)
    return Reconciler(db, settings, backend=backends[0], backends=backends[1:])


def _submit(db: Database, world: dict[str, int], spec: dict) -> int:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), time.time())
        return job.id


def _gang(name: str, pods: int, gpus: int) -> dict:
    spec = job_spec(name, gpus=gpus)
    spec["podSets"][0]["count"] = pods
    return spec


def test_a_launch_that_blocks_does_not_hold_up_the_step(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    backend = ScriptedBackend("scripted")
    backend.gate.clear()  # every launch waits until the test lets it go
    r = _reconciler(db, tmp_path, backend)
    try:
        first = _submit(db, world, job_spec("first"))
        r.step(time.time())  # admits and queues the launch, which now blocks on the gate
        second = _submit(db, world, job_spec("second"))
        r.step(time.time())  # would never return if the step called launch itself
        assert job_row(db, first).state == "Admitted" and job_row(db, second).state == "Admitted"
        backend.gate.set()
        step_until(r, lambda: job_row(db, second).state == "Running")
        assert job_row(db, first).state == "Running"
    finally:
        backend.gate.set()
        r.stop()


def test_an_unreachable_backend_is_a_reason_and_a_metric_then_the_job_starts(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    backend = ScriptedBackend("scripted")
    backend.down = "connection refused"
    r = _reconciler(db, tmp_path, backend)
    try:
        job = _submit(db, world, job_spec("waits"))
        step_until(r, lambda: job_row(db, job).reason_code == "BackendUnavailable")
        row = job_row(db, job)
        assert row.state == "Admitted"
        assert row.reason == (
            "admitted; waiting for the scripted backend, which cannot be reached: "
            "connection refused"
        )
        assert r.telemetry.backend_up.labels("scripted")._value.get() == 0
        backend.down = None
        step_until(r, lambda: job_row(db, job).state == "Running")
        assert r.telemetry.backend_up.labels("scripted")._value.get() == 1
        assert [j.id for j in backend.launched] == [job]  # launched once, after the retries
    finally:
        r.stop()


def test_a_backend_that_raises_rejects_the_job_and_frees_its_quota(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    backend = ScriptedBackend("scripted")
    backend.broken = True
    r = _reconciler(db, tmp_path, backend)
    try:
        job = _submit(db, world, _gang("bug", 2, 4))  # every GPU of the fleet
        step_until(r, lambda: job_row(db, job).state == "Failed")
        row = job_row(db, job)
        assert row.reason_code == "BackendRejected"
        assert row.reason == "the scripted backend cannot run it: RuntimeError: driver bug"
        backend.broken = False
        again = _submit(db, world, _gang("fits-again", 2, 4))
        step_until(r, lambda: job_row(db, again).state == "Running")
    finally:
        r.stop()


def test_an_exit_code_is_the_reason(db: Database, world: dict[str, int], tmp_path: Path) -> None:
    backend = ScriptedBackend("scripted")
    r = _reconciler(db, tmp_path, backend)
    try:
        job = _submit(db, world, job_spec("fails"))
        step_until(r, lambda: job_row(db, job).state == "Running")
        backend.finish(job, 3, "pod 0 exited with code 3: boom")
        step_until(r, lambda: job_row(db, job).state == "Failed")
        row = job_row(db, job)
        assert row.reason_code == "ExitedWithError"
        assert row.reason == (
            "exited with code 3 on the scripted backend: pod 0 exited with code 3: boom"
        )
    finally:
        r.stop()


def test_jobs_run_on_their_nodes_backend_and_never_across_two(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    with db.session() as s:
        register_nodes(
            s,
            [
                {"name": "other-{i}", "count": 2, "cpu": "64", "memory": "512Gi",
                 "gpus": {"model": "H100-80GB", "count": 4},
                 "labels": {BACKEND_LABEL: "other"}}
            ],
            0.0,
        )  # fmt: skip
    default, other = ScriptedBackend("scripted"), ScriptedBackend("other")
    r = _reconciler(db, tmp_path, default, other)
    try:
        # four jobs of a whole node each: one on every node, two on each backend
        whole = [_submit(db, world, job_spec(f"whole-{i}", gpus=4)) for i in range(4)]
        step_until(r, lambda: all(job_row(db, j).state == "Running" for j in whole))
        for backend, prefix in ((default, "node-"), (other, "other-")):
            assert len(backend.launched) == 2
            assert all(p.node.startswith(prefix) for j in backend.launched for p in j.pods)
        for j in whole:
            (default if j in {x.id for x in default.launched} else other).finish(j, 0, "")
        step_until(r, lambda: all(job_row(db, j).state == "Succeeded" for j in whole))
        # a gang of 4 x 4 GPUs needs all four nodes: two of each backend
        spanning = _submit(db, world, _gang("both", 4, 4))
        step_until(r, lambda: job_row(db, spanning).state in ("Failed", "Running"))
        row = job_row(db, spanning)
        assert row.state == "Failed" and row.reason_code == "BackendRejected"
        assert "different backends" in row.reason
        assert spanning not in {j.id for j in default.launched + other.launched}
    finally:
        r.stop()
