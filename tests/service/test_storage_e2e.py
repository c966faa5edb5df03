"""Volumes end to end on the local backend, and the storage quota as an invariant.

A job writes into a volume, another job (a later one, read-only) reads what it wrote: both see
the volume at their mount path (relative to their working directory) and at
``$GPUAAS_VOLUME_<NAME>``. Whatever the order of creates, growths and deletes, the sizes of a
tenant's volumes never sum above its storage quota, and a refused write leaves nothing."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import test_local_e2e
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from job_world import job_spec
from sqlalchemy import select
from test_local_e2e import run_until, submit

from gpuaas.backends.logs import LogLayout
from gpuaas.model.cluster import VolumeSpec
from gpuaas.service.errors import ApiError
from gpuaas.service.governance_kinds import At
from gpuaas.service.models.storage import VolumeIn
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.service.storage import (
    Volumes,
    create_volume,
    delete_volume,
    find_volume,
    held_bytes,
)
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Tenant, VolumeRow

#: the local backend's end-to-end fixtures: ``world`` (tenant acme, its users, a queue, two nodes)
#: and ``reconciler`` (driving the local backend; every process killed after the test)
world = test_local_e2e.world
reconciler = test_local_e2e.reconciler


def finish(reconciler: Reconciler, db: Database, job_id: int) -> Job:
    return run_until(reconciler, db, job_id, {"Succeeded", "Failed"})


def test_one_job_writes_a_volume_and_another_reads_it(
    db: Database, world: dict[str, int], reconciler: Reconciler, tmp_path: Path
) -> None:
    settings = Settings(db_url=db.url, data_dir=tmp_path)
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        row = create_volume(s, settings, tenant, VolumeSpec("results", 1 << 20), "1Mi", "")
        assert row.state == "Ready", row.reason
        volume_dir = Path(row.path)
    write = job_spec(
        "writer",
        command=["sh", "-c", 'echo 42 > out/answer && test "$GPUAAS_VOLUME_RESULTS" != ""'],
        volumes=[{"name": "results", "mountPath": "/out"}],
    )
    job = finish(reconciler, db, submit(db, world, write))
    assert job.state == "Succeeded", job.reason
    assert (volume_dir / "answer").read_text() == "42\n"
    read = job_spec(
        "reader",
        command=["sh", "-c", 'cat mnt/in/answer "$GPUAAS_VOLUME_RESULTS/answer"'],
        volumes=[{"name": "results", "mountPath": "/mnt/in", "readOnly": True}],
    )
    job_id = submit(db, world, read)
    job = finish(reconciler, db, job_id)
    assert job.state == "Succeeded", job.reason
    out = LogLayout(tmp_path / "logs").stdout(job_id, 0, 0).read_text()
    assert out == "42\n42\n"


def test_a_full_volume_takes_no_new_writer(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    settings = Settings(db_url=db.url, data_dir=tmp_path)
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        row = create_volume(s, settings, tenant, VolumeSpec("small", 64 << 10), "64Ki", "")
        (Path(row.path) / "fill").write_bytes(b"x" * (128 << 10))
    spec = job_spec("w", command=["true"], volumes=[{"name": "small", "mountPath": "/d"}])
    with pytest.raises(Exception, match=r"full") as refused:
        submit(db, world, spec)
    assert getattr(refused.value, "field", "") == "volumes[0].name"
    spec["volumes"][0]["readOnly"] = True
    assert submit(db, world, spec) > 0  # reading a full volume is fine


# --- the quota ----------------------------------------------------------------------------

_tenants = itertools.count()
OPS = st.lists(
    st.tuples(
        st.sampled_from(["create", "grow", "delete"]),
        st.sampled_from(["a", "b", "c", "d"]),
        st.integers(min_value=1, max_value=12),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(quota=st.integers(min_value=0, max_value=30), ops=OPS)
def test_a_tenants_volumes_never_exceed_its_quota(
    db: Database, world: dict[str, int], tmp_path: Path, quota: int, ops: list[Any]
) -> None:
    """Sizes in KiB; whatever the order, the sum stays within the quota, and a refused
    create or growth changes nothing."""
    settings = Settings(db_url=db.url, data_dir=tmp_path)
    with db.session() as s:
        tenant = Tenant(name=f"q{next(_tenants)}", capacity={}, created_at=0.0,
                        storage_quota=quota << 10)  # fmt: skip
        s.add(tenant)
        s.flush()
        tenant_id = tenant.id
    for op, name, kib in ops:
        with db.session() as s:
            tenant = s.get(Tenant, tenant_id)
            assert tenant is not None
            before = {r.name: r.size_bytes for r in s.scalars(
                select(VolumeRow).where(VolumeRow.tenant_id == tenant_id))}  # fmt: skip
            row = find_volume(s, tenant_id, name)
            try:
                if op == "create" and row is None:
                    create_volume(s, settings, tenant, VolumeSpec(name, kib << 10), f"{kib}Ki", "")
                elif op == "grow" and row is not None:
                    size = row.size_bytes + (kib << 10)
                    at = At(s, None, tenant, settings)  # type: ignore[arg-type]
                    Volumes().update(at, name, VolumeIn(size=size))
                elif op == "delete" and row is not None:
                    delete_volume(s, settings, tenant, row)
            except ApiError as exc:
                assert exc.status == 409 and exc.field == "size"
                s.rollback()
                after = {r.name: r.size_bytes for r in s.scalars(
                    select(VolumeRow).where(VolumeRow.tenant_id == tenant_id))}  # fmt: skip
                assert after == before  # nothing half-made
                assert not (op == "create" and (tmp_path / "volumes" / tenant.name / name).exists())
                continue
        with db.sessions() as s:
            assert held_bytes(s, tenant_id) <= quota << 10
