"""A stored job as the Kubernetes objects that would run it (``GET .../jobs/{id}/manifest``).

The same rendering the kubernetes backend applies (:mod:`gpuaas.backends.kubernetes`), for
the attempt the job is on, in the server's namespace pattern and base image, for the target
asked (default: the server's ``GPUAAS_KUBE_TARGET``). An admitted or running job is pinned to
the nodes it holds; a job not admitted yet (or finished, its placement given back) has no
placement and is shown without node pinning, which is what it would be submitted as to a
cluster whose own scheduler places it. A placement that names a node no longer in the fleet
is a conflict: it cannot be rendered as it was admitted.

A job reading a registered dataset comes with the dataset's Fluid objects first (``Dataset``,
its runtime and a ``DataLoad`` pinned to the nodes the job holds, so its cache is warm where
it runs); the job's pods mount the PVC Fluid makes for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from gpuaas.backends.base import BackendJob
from gpuaas.backends.kubernetes.fluid import dataset_objects
from gpuaas.backends.kubernetes.manifests import ManifestOptions, namespace_of, render
from gpuaas.backends.kubernetes.targets import Target
from gpuaas.engine.admission.restore import PlacementLost, typed_pods
from gpuaas.model.dataset import Dataset
from gpuaas.service.datasets import dataset_of
from gpuaas.service.datasets import find as find_dataset
from gpuaas.service.errors import conflict
from gpuaas.service.fleet import load_nodes
from gpuaas.service.settings import Settings
from gpuaas.store.tables import Job


def backend_job(session: Session, job: Job, tenant: str) -> BackendJob:
    """``job`` as the reconciler hands it to a backend (its pods typed, if it has any)."""
    pods: tuple = ()
    if job.placement:
        nodes = {node.name: node for node in load_nodes(session)}
        try:
            pods = typed_pods(job.placement, nodes.get)
        except PlacementLost as exc:
            raise conflict(f"job {job.id}: its placement cannot be rendered: {exc}") from None
    return BackendJob(job.id, job.name, job.spec, pods, job.started_at, job.attempts or 0, tenant)


def job_manifests(
    session: Session,
    job: Job,
    tenant: str,
    settings: Settings,
    target: str | None,
    datasets: Mapping[str, Dataset] | None = None,
) -> list[dict[str, Any]]:
    """``datasets``: the tenant's registered datasets by name, which a job's ``dataset`` must
    be one of (None: the job's own, read from the registry); the fleet's nodes name the pool
    of placed NICs."""
    nodes = {node.name: node for node in load_nodes(session)} if job.placement else None
    fluid: list[dict[str, Any]] = []
    ref = job.spec.get("dataset")
    if datasets is None and isinstance(ref, Mapping):
        row = find_dataset(session, job.tenant_id, str(ref.get("name")))
        if row is None:
            raise conflict(f"job {job.id} reads dataset {ref.get('name')}, which is gone")
        dataset = dataset_of(row, tenant)
        datasets = {dataset.name: dataset}
        held = sorted({p["node"] for p in job.placement or ()})
        namespace = namespace_of(tenant, settings.kube_namespace)
        fluid = dataset_objects(dataset, namespace, preload=True, nodes=held)
    options = ManifestOptions(
        target=Target.parse(target or settings.kube_target),
        namespace=settings.kube_namespace,
        base_image=settings.kube_base_image,
        datasets=datasets,
        nodes=nodes,
    )
    return fluid + render(backend_job(session, job, tenant), options)
