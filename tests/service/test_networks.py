"""A job's ``podSets[].network`` through the service: refused with the field named when no node
could ever serve it, charged in quota as the pool's resource where a ClusterQueue covers it,
placed on aligned VFs that the job view names, and kept on the same VFs across a restart.

The inventory's ``nics:`` key belongs to the supply plane; these tests give the registered
nodes their NICs as Node objects, by wrapping the loader the service reads nodes with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from job_world import build_world, job_spec, jobs, kueue_objects

from conftest import Api
from gpuaas.model.network import Nic
from gpuaas.model.node import Node
from gpuaas.service import fleet
from gpuaas.service.governance import put_objects
from gpuaas.service.jobs import job_view
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job

POOL = "openshift.io/mlnx_ib"
JOBS = "/v1/tenants/acme/jobs"
T0 = 1_000_000.0


def with_nics(node: Node, topology: bool = True) -> Node:
    """``node`` (4 GPUs) with 2 NICs of 2 VFs: NIC k on PCIe root k, beside GPUs 2k and 2k+1."""
    gpus = [
        dataclasses.replace(gpu, pcie_root=f"pci-{g // 2}", numa_node=g // 2)
        for g, gpu in enumerate(node.gpus)
    ]
    nics = [
        Nic(f"mlx5_{k}", POOL, vfs=2, pcie_root=f"pci-{k}" if topology else "",
            numa_node=k if topology else None, fabric="ib-a", pci_address=f"0000:1{k}:00.0")
        for k in range(2)
    ]  # fmt: skip
    return dataclasses.replace(node, gpus=gpus, nics=nics)


@pytest.fixture
def nic_nodes(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Every registered node gets NICs (with topology unless its name is listed False)."""
    topology: dict[str, bool] = {}
    loader = fleet.nodes_from_rows

    def load(rows: Iterable[Any]) -> list[Node]:
        return [with_nics(n, topology.get(n.name, True)) for n in loader(rows)]

    monkeypatch.setattr(fleet, "nodes_from_rows", load)
    return topology


def network(count: int = 0, per_gpu: bool = False, **extra: Any) -> dict[str, Any]:
    return {"pool": POOL, "count": count, "perGpu": per_gpu, **extra}


def spec(name: str, gpus: int = 2, net: dict[str, Any] | None = None, **extra: Any) -> dict:
    out = job_spec(name, gpus, **extra)
    out["podSets"][0]["network"] = net if net is not None else network(per_gpu=True)
    return out


def _error(response: Any) -> tuple[str, str]:
    assert response.status_code == 422, response.text
    [error] = response.json()["errors"]
    return error["field"], error["message"]


@pytest.fixture
def world(api: Api, nic_nodes: dict[str, bool]) -> Api:
    build_world(api.client.app.state.db)  # type: ignore[attr-defined]
    return api.as_("gpa_alice-token-0123456789")


def test_an_unknown_pool_is_refused_naming_the_field(world: Api) -> None:
    field, message = _error(
        world.post(JOBS, json=spec("j", net=network(1, pool="nvidia.com/nope")))
    )
    assert field == "podSets[0].network.pool"
    assert "nvidia.com/nope" in message and POOL in message


def test_more_vfs_than_any_node_offers_is_refused(world: Api) -> None:
    field, message = _error(world.post(JOBS, json=spec("j", net=network(5))))
    assert field == "podSets[0].network.count"
    assert "5" in message and "4" in message


def test_required_alignment_without_topology_is_refused(
    world: Api, nic_nodes: dict[str, bool]
) -> None:
    nic_nodes.update({"node-1": False, "node-2": False})
    net = network(1, alignment="required")
    field, message = _error(world.post(JOBS, json=spec("j", net=net)))
    assert field == "podSets[0].network.alignment"
    assert "topology" in message
    ok = world.post(JOBS, json=spec("k", net=network(1, alignment="preferred")))
    assert ok.status_code == 201, ok.text


def test_count_and_per_gpu_are_exclusive(world: Api) -> None:
    response = world.post(JOBS, json=spec("j", net=network(1, per_gpu=True)))
    assert response.status_code == 422
    assert "network" in response.text


# ----------------------------------------------------------------------------- the reconciler
def settings(db: Database, tmp_path: Path) -> Settings:
    return Settings(db_url=db.url, data_dir=tmp_path)


def submit(db: Database, ids: dict[str, int], body: dict[str, Any]) -> int:
    from gpuaas.service.jobs import submit_job
    from gpuaas.service.models.jobs import JobSpec
    from gpuaas.store.tables import Tenant

    with db.session() as s:
        tenant = s.get(Tenant, ids["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, ids["alice"], JobSpec.model_validate(body), T0)
        return job.id


def vfs_held(db: Database) -> list[tuple[str, str]]:
    """(node, device) of every NIC device held by admitted or running jobs."""
    with db.sessions() as s:
        return [
            (pod["node"], name)
            for job in jobs(s).values()
            if job.state in ("Admitted", "Running")
            for pod in job.placement or []
            for name, _ in pod.get("given", [])
            if name.startswith("mlx5_")
        ]


@pytest.fixture
def ids(db: Database, nic_nodes: dict[str, bool]) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


def test_vfs_are_placed_aligned_shown_and_kept_across_a_restart(
    db: Database, ids: dict[str, int], tmp_path: Path
) -> None:
    first = Reconciler(db, settings(db, tmp_path))
    try:
        placed = [submit(db, ids, spec(f"j{i}", duration=100)) for i in range(4)]
        first.step(T0 + 1)
        first.step(T0 + 2)
        with db.sessions() as s:
            rows = jobs(s)
            before = {i: rows[i].placement for i in placed}
            view = job_view(rows[placed[0]], "acme", "alice")
        held = vfs_held(db)
        assert len(held) == 8 and len(set(held)) == 8  # 4 jobs x 2 GPUs, one VF each, no twice
        for job_id in placed:
            [pod] = before[job_id]
            gpus = [g for g, _ in pod["assignment"]["gpus"]]
            nics = [j for j, _ in pod["assignment"]["nics"]]
            assert sorted(g // 2 for g in gpus) == sorted(nics)  # NIC k beside GPUs 2k, 2k+1
        names = [d.name for d in view.pods[0].devices]
        assert any(n.startswith("mlx5_") and "-vf-" in n for n in names)
        nic_uuids = [d.uuid for d in view.pods[0].devices if d.name.startswith("mlx5_")]
        assert all(u.startswith("0000:1") for u in nic_uuids)
    finally:
        first.stop()
    # a CPU-only job that needs one VF: it fits only if a restored VF is given twice
    late = submit(db, ids, spec("late", gpus=0, net=network(1, alignment="none"), duration=10))
    second = Reconciler(db, settings(db, tmp_path))
    try:
        second.step(T0 + 3)
        with db.sessions() as s:
            rows = jobs(s)
            assert {i: rows[i].placement for i in placed} == before
            assert rows[late].state == "Pending"  # every VF is taken
        assert sorted(vfs_held(db)) == sorted(held)
    finally:
        second.stop()


def quota_objects(vfs: int) -> list[dict[str, Any]]:
    """The world's governance with the NIC pool covered: ``vfs`` VFs of quota."""
    objects = kueue_objects(8)
    cq = objects[1]["spec"]
    group = cq["resourceGroups"][0]
    group["coveredResources"].append(POOL)
    group["flavors"][0]["resources"].append({"name": POOL, "nominalQuota": vfs})
    return objects


def test_a_cluster_queue_covering_the_pool_limits_vfs(
    db: Database, ids: dict[str, int], tmp_path: Path
) -> None:
    with db.session() as s:
        put_objects(s, [(doc, None, None) for doc in quota_objects(3)], 1.0)
    one_vf = [submit(db, ids, spec(f"j{i}", gpus=1, duration=100)) for i in range(4)]
    r = Reconciler(db, settings(db, tmp_path))
    try:
        r.step(T0 + 1)
        r.step(T0 + 2)
        with db.sessions() as s:
            rows = jobs(s)
            states = [rows[i].state for i in one_vf]
            waiting: Job = rows[one_vf[3]]
        assert states[3] == "Pending"  # GPUs are free; the VF quota is not
        assert all(state in ("Admitted", "Running") for state in states[:3])
        assert POOL in (waiting.reason or "")
    finally:
        r.stop()
    with db.sessions() as s:
        rows = jobs(s)
        assert all(len(p["assignment"]["nics"]) == 1 for i in one_vf[:3] for p in rows[i].placement)
