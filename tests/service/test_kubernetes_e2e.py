"""A job through the service onto the kubernetes backend (official client, fake API server
below its transport): the manifest before admission is unpinned, the reconciler applies it
pinned to the node it admitted the job on, the cluster's status runs and ends the job, and a
cancel deletes the workload. No live API server (see docs/kubernetes.md)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from job_world import build_world, job_row, job_spec, step_until
from sqlalchemy import select

from gpuaas.backends.kubernetes.backend import KubernetesBackend
from gpuaas.service.job_manifest import job_manifests
from gpuaas.service.jobs import cancel_job, submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Tenant

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "kubernetes"))
from fake_apiserver import FakeApiServer


def test_a_job_runs_on_kubernetes_pinned_where_gpuaas_placed_it(
    db: Database, tmp_path: Path
) -> None:
    world = build_world(db, quota_gpus=16, nodes=2)
    settings = Settings(db_url=db.url, data_dir=tmp_path, reconcile_interval=0.05)
    server = FakeApiServer()
    backend = KubernetesBackend(server.client())
    spec = job_spec("k8s-train", gpus=4, maxRunTime=3600)
    spec["podSets"][0]["count"] = 2
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), time.time())
        job_id = job.id
        (before,) = job_manifests(s, job, "acme", settings, "kueue")
    assert "affinity" not in before["spec"]["template"]["spec"]  # not admitted: not pinned
    r = Reconciler(db, settings, backend=backend)
    try:
        step_until(r, lambda: bool(server.objects))
        (applied,) = server.objects.values()
        assert applied["metadata"]["name"] == f"gpuaas-{job_id}-0"
        assert applied["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
        row = job_row(db, job_id)
        nodes = sorted({pod["node"] for pod in row.placement})
        affinity = applied["spec"]["template"]["spec"]["affinity"]
        term = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == nodes
        with db.sessions() as s:
            (shown,) = job_manifests(s, job_row(db, job_id), "acme", settings, "kueue")
        assert shown["spec"] == {k: v for k, v in applied["spec"].items()}
        server.set_status(applied["metadata"]["name"], {"active": 2})
        step_until(r, lambda: job_row(db, job_id).state == "Running")
        server.set_status(
            applied["metadata"]["name"],
            {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]},
        )
        step_until(r, lambda: job_row(db, job_id).state == "Succeeded")
        # a second job, cancelled while running: its Job is deleted in the foreground
        with db.session() as s:
            tenant = s.get(Tenant, world["tenant"])
            assert tenant is not None
            small = JobSpec.model_validate(job_spec("k8s-2"))
            second, _ = submit_job(s, tenant, world["alice"], small, time.time())
            second_id = second.id
        name = f"gpuaas-{second_id}-0"
        step_until(r, lambda: any(k[2] == name for k in server.objects))
        server.set_status(name, {"active": 1})
        step_until(r, lambda: job_row(db, second_id).state == "Running")
        with db.session() as s:
            cancel_job(s, s.scalars(select(Job).where(Job.id == second_id)).one(), time.time())
        step_until(r, lambda: not any(k[2] == name for k in server.objects))
        deletes = [p for m, p, _ in server.requests if m == "DELETE"]
        assert any(name in p and "propagationPolicy=Foreground" in p for p in deletes)
    finally:
        r.stop()
