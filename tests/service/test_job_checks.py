"""Requests that make sense: unknown resources and impossible amounts are refused at submission
with the field and both numbers; GPUs read as GPUs in pending reasons; batches are all or none.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from job_world import TOKENS, build_world, job_spec

from conftest import Api
from gpuaas.service.app import create_app
from gpuaas.service.auth import TenantRef
from gpuaas.service.demo import seed_demo
from gpuaas.service.fleet import register_nodes
from gpuaas.service.governance import put_objects
from gpuaas.service.jobs import serialized_writes, submit_jobs
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database

KUEUE = "kueue.x-k8s.io/v1beta2"
JOBS = "/v1/tenants/acme/jobs"
EXAMPLE = Path(__file__).parents[2] / "examples/finetune.yaml"
RANKS = Path(__file__).parents[2] / "examples/ranks.yaml"


@pytest.fixture
def world(api: Api) -> Api:
    build_world(_db(api))  # cq: 8 GPUs, 1000 CPUs; nodes: 2 x (64 CPUs, 512Gi, 4 x H100)
    return api


def _db(api: Api) -> Database:
    return api.client.app.state.db  # type: ignore[attr-defined]


def _error(response: Any) -> tuple[str, str]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    [error] = response.json()["errors"]
    return error["field"], error["message"]


def _with(gpus: Any = 1, count: int = 1, **resources: Any) -> dict[str, Any]:
    spec = job_spec("j")
    spec["podSets"][0]["count"] = count
    spec["podSets"][0]["resources"]["nvidia.com/gpu"] = gpus
    spec["podSets"][0]["resources"].update(resources)
    return spec


def _stored(api: Api) -> list[dict[str, Any]]:
    return api.get(JOBS).json()["items"]


@pytest.mark.parametrize("name", ["nvidia.com/gpus", "amd.com/gpu", "gpu"])
def test_an_unknown_resource_is_refused_naming_the_field_and_the_known_ones(
    world: Api, name: str
) -> None:
    spec = job_spec("typo")
    spec["podSets"][0]["resources"] = {"cpu": "1", name: 1}
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=spec))
    assert field == f"podSets[0].resources.{name}"
    assert f"unknown resource {name!r}" in message
    assert "(known: cpu, ephemeral-storage, gpuaas.io/gpu-milli, memory, nvidia.com/gpu)" in message
    assert _stored(world) == []


def test_a_typo_gets_a_did_you_mean(world: Api) -> None:
    spec = job_spec("typo")
    spec["podSets"][0]["resources"]["nvidia.com/gpus"] = 1
    _, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=spec))
    assert "did you mean nvidia.com/gpu?" in message


def test_mig_and_covered_resources_are_known(world: Api) -> None:
    """A MIG resource a node advertises is known (and a ClusterQueue's covered resource is,
    without any node): refused, if at all, for quota, never as an unknown name."""
    db = _db(world)
    with db.session() as s:
        register_nodes(
            s,
            [{"name": "mig-0", "cpu": "32", "memory": "256Gi",
              "gpus": {"model": "A100-80GB", "count": 1,
                       "partitioning": "all-1g.10gb"}}],
            0.0,
        )  # fmt: skip
    spec = job_spec("mig")
    spec["podSets"][0]["resources"] = {"cpu": "1", "nvidia.com/mig-1g.10gb": 1}
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=spec))
    assert field == "podSets[0].resources.nvidia.com/mig-1g.10gb"
    assert "ClusterQueue cq (of LocalQueue default) has no quota for nvidia.com/mig-1g.10gb" in (
        message
    )
    assert "unknown" not in message


def test_a_pod_bigger_than_any_node_is_refused_with_both_numbers(world: Api) -> None:
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=_with(gpus=64)))
    assert field == "podSets[0].resources.nvidia.com/gpu"
    assert message == "asks for 64 GPUs per pod; the largest node of flavor gpu has 4 GPUs"
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=_with(cpu="100")))
    assert field == "podSets[0].resources.cpu"
    assert message == "asks for 100 per pod; the largest node of flavor gpu has 64"
    assert _stored(world) == []


def test_8e18_gpus_are_refused_with_both_numbers_never_byte_suffixes(world: Api) -> None:
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=_with(gpus="8E")))
    assert field == "podSets[0].resources.nvidia.com/gpu"
    assert message == (
        "asks for 8000000000000000000 GPUs per pod; the largest node of flavor gpu has 4 GPUs"
    )
    assert "Ei" not in message


def test_1e23_gpus_are_beyond_what_the_document_admits(world: Api) -> None:
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=_with(gpus="1e23")))
    assert field == "podSets[0].resources.nvidia.com/gpu"
    assert message == (
        "nvidia.com/gpu is counted in whole units: a whole number from 0 to below 2**63 such "
        "as 4, 2k, 1Ki or 1e3, got '1e23'"
    )


def test_more_than_the_cluster_queue_could_ever_hold_is_refused(world: Api) -> None:
    """Every pod fits a node, but 3 x 4 GPUs is more than the queue's 8 GPUs of quota (no
    cohort to borrow from)."""
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=_with(gpus=4, count=3)))
    assert field == "podSets[0].resources.nvidia.com/gpu"
    assert message == (
        "asks for 12 GPUs in all (3 pods); ClusterQueue cq could hold at most 8 GPUs "
        "(its nominal quota plus what it may borrow)"
    )
    spec = _with(gpus=4, count=1)
    spec["podSets"].append({"name": "more", "count": 2, "resources": {"nvidia.com/gpu": 4}})
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=spec))
    assert field == "podSets"
    assert "asks for 12 GPUs in all; ClusterQueue cq could hold at most 8 GPUs" in message
    assert _stored(world) == []


def test_borrowing_counts_toward_what_a_queue_could_hold(world: Api) -> None:
    """In a cohort, a queue may hold its quota plus what it may borrow: 8 + a peer's 8."""
    db = _db(world)
    with db.session() as s:
        register_nodes(s, [{"name": "extra-{i}", "count": 2, "cpu": "64", "memory": "512Gi",
                            "gpus": {"model": "H100-80GB", "count": 4}}], 0.0)  # fmt: skip
        queues = []
        for name in ("cq", "peer"):
            queues.append({
                "apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
                "spec": {"namespaceSelector": {}, "cohortName": "team", "resourceGroups": [{
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [{"name": "gpu", "resources": [
                        {"name": "cpu", "nominalQuota": "1000"},
                        {"name": "memory", "nominalQuota": "10Ti"},
                        {"name": "nvidia.com/gpu", "nominalQuota": 8},
                    ]}],
                }]},
            })  # fmt: skip
        put_objects(s, [(doc, None, None) for doc in queues], 0.0)
    alice = world.as_(TOKENS["alice"])
    assert alice.post(JOBS, json=_with(gpus=4, count=4)).status_code == 201
    _, message = _error(alice.post(JOBS, json=_with(gpus=4, count=5)))
    assert "asks for 20 GPUs in all (5 pods); ClusterQueue cq could hold at most 16 GPUs" in (
        message
    )


def test_a_job_too_big_for_now_is_accepted_and_its_reason_counts_gpus(world: Api) -> None:
    alice = world.as_(TOKENS["alice"])
    first = alice.post(JOBS, json=_with(gpus=4, count=2))
    assert first.status_code == 201, first.text
    later = alice.post(JOBS, json=_with(gpus=3, count=2) | {"name": "later"})
    assert later.status_code == 201, later.text
    reconciler = Reconciler(_db(world), world.client.app.state.settings)  # type: ignore[attr-defined]
    try:
        reconciler.step(time.time())
    finally:
        reconciler.stop()
    pending = alice.get(f"{JOBS}/{later.json()['id']}").json()
    assert pending["state"] == "Pending"
    assert (
        "insufficient unused quota for nvidia.com/gpu in flavor gpu: 6 GPUs more needed"
        in pending["reason"]["message"]
    )
    assert pending["reason"]["code"] == "UnusedQuotaShort"
    assert pending["reason"]["fields"]["needed"] == 6
    assert pending["spec"]["requests"] == {
        "main": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "3"}
    }


def test_hardware_profile_requests_are_checked_too(world: Api) -> None:
    profile = {
        "apiVersion": "gpuaas.io/v1", "kind": "HardwareProfile", "metadata": {"name": "big"},
        "spec": {"displayName": "big", "localQueue": "default",
                 "resources": [{"name": "nvidia.com/gpu", "min": 1, "default": 16}]},
    }  # fmt: skip
    with _db(world).session() as s:
        put_objects(s, [(profile, None, None)], 0.0)
    spec = job_spec("p")
    del spec["queue"]
    spec["podSets"] = [{"name": "main", "hardwareProfile": "big"}]
    field, message = _error(world.as_(TOKENS["alice"]).post(JOBS, json=spec))
    assert field == "podSets[0].resources.nvidia.com/gpu"
    assert message.startswith("asks for 16 GPUs per pod")


def test_new_nodes_raise_the_bound_at_once(world: Api) -> None:
    alice = world.as_(TOKENS["alice"])
    assert alice.post(JOBS, json=_with(gpus=8)).status_code == 422
    with _db(world).session() as s:
        register_nodes(s, [{"name": "big-0", "cpu": "64", "memory": "512Gi",
                            "gpus": {"model": "H100-80GB", "count": 8}}], 0.0)  # fmt: skip
    assert alice.post(JOBS, json=_with(gpus=8)).status_code == 201


# --- batches ----------------------------------------------------------------------------------


def test_a_batch_with_a_bad_document_creates_nothing_and_names_it(world: Api) -> None:
    alice = world.as_(TOKENS["alice"])
    bad = job_spec("second")
    bad["podSets"][0]["resources"]["nvidia.com/gpus"] = 1
    worse = job_spec("third", gpus=64)
    r = alice.post(f"{JOBS}/batch", json={"jobs": [job_spec("first"), bad, worse]})
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert [(e["document"], e["name"], e["field"]) for e in errors] == [
        (1, "second", "podSets[0].resources.nvidia.com/gpus"),
        (2, "third", "podSets[0].resources.nvidia.com/gpu"),
    ]
    assert r.json()["detail"].startswith("document 2 (second): podSets[0].resources.nvidia")
    assert _stored(world) == []


def test_a_batch_reports_shape_errors_per_document(world: Api) -> None:
    r = world.as_(TOKENS["alice"]).post(
        f"{JOBS}/batch", json={"jobs": [job_spec("ok"), {"name": "x", "podSets": []}]}
    )
    fields = [(e["document"], e["field"]) for e in r.json()["errors"]]
    assert (1, "podSets") in fields
    assert all(document == 1 for document, _ in fields)
    assert _stored(world) == []


def test_a_rerun_after_the_fix_creates_only_what_is_missing(world: Api) -> None:
    alice = world.as_(TOKENS["alice"])
    first = job_spec("first", idempotencyKey="k-1")
    second = job_spec("second", gpus=64, idempotencyKey="k-2")
    assert alice.post(f"{JOBS}/batch", json={"jobs": [first]}).status_code == 201
    assert alice.post(f"{JOBS}/batch", json={"jobs": [first, second]}).status_code == 422
    second["podSets"][0]["resources"]["nvidia.com/gpu"] = 2
    dry = alice.post(f"{JOBS}/batch", params={"dryRun": "true"}, json={"jobs": [first, second]})
    assert dry.status_code == 200, dry.text
    assert [(i["created"], i["job"] is None) for i in dry.json()["items"]] == [
        (False, False),
        (False, True),
    ]
    assert len(_stored(world)) == 1
    r = alice.post(f"{JOBS}/batch", json={"jobs": [first, second]})
    assert r.status_code == 201, r.text
    items = r.json()["items"]
    assert [(i["document"], i["name"], i["created"]) for i in items] == [
        (0, "first", False),
        (1, "second", True),
    ]
    again = alice.post(f"{JOBS}/batch", json={"jobs": [first, second]})
    assert again.status_code == 200
    assert [i["job"]["id"] for i in again.json()["items"]] == [i["job"]["id"] for i in items]
    assert sorted(j["name"] for j in _stored(world)) == ["first", "second"]


def test_concurrent_reruns_of_a_batch_make_each_job_once(api: Api) -> None:
    """Eight reruns of the same three documents at once: three jobs, every rerun answered."""
    db = _db(api)
    ids = build_world(db)
    docs = [job_spec(f"j{i}", idempotencyKey=f"key-{i}") for i in range(3)]

    def rerun() -> list[int]:
        with db.sessions() as s:
            with serialized_writes(s):
                made = submit_jobs(s, TenantRef(ids["tenant"], "acme"), ids["alice"], docs, 0.0)
                s.commit()
            return [job.id for job, _ in made if job is not None]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: rerun(), range(8)))
    assert all(len(a) == 3 for a in answers)
    assert len({tuple(a) for a in answers}) == 1
    assert sorted(j["name"] for j in _stored(api)) == ["j0", "j1", "j2"]


def test_the_readme_example_passes_in_the_demo_world(sqlite_url: str, tmp_path: Path) -> None:
    """examples/finetune.yaml and ranks.yaml (the README's) pass the checks on the demo fleet;
    the same job asking 16 GPUs per pod is refused with the demo's largest H100 node."""
    db = Database(sqlite_url)
    db.upgrade()
    settings = Settings(
        db_url=sqlite_url, data_dir=tmp_path, demo=True, reconcile=False, admin_token="a" * 24
    )
    users = {u.user: u for u in seed_demo(db, settings)}
    db.dispose()
    settings.demo = False
    spec = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    with TestClient(create_app(settings)) as client:
        headers = {"Authorization": f"Bearer {users['arjun'].token}"}
        r = client.post("/v1/tenants/acme-ai/jobs", json=spec, headers=headers)
        assert r.status_code == 201, r.text
        ranks = yaml.safe_load(RANKS.read_text(encoding="utf-8"))
        r = client.post("/v1/tenants/acme-ai/jobs", json=ranks, headers=headers)
        assert r.status_code == 201, r.text
        spec["name"] = "too-big"
        spec["podSets"][0]["resources"]["nvidia.com/gpu"] = 16
        r = client.post("/v1/tenants/acme-ai/jobs", json=spec, headers=headers)
        field, message = _error(r)
        assert field == "podSets[0].resources.nvidia.com/gpu"
        assert message.startswith("asks for 16 GPUs per pod; the largest node of flavor")
        assert message.endswith("has 8 GPUs")
