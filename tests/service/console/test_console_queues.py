"""The tenant-admin's queues page draws what each ClusterQueue holds from the API's status
(``status.flavorsUsage``), not from the jobs."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from console_world import World, demo_world, log_in

from gpuaas.store.tables import Job, Tenant, User

TENANT = "acme-ai"
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with demo_world(tmp_path_factory.mktemp("console-queues")) as world:
        yield world


def _gpu_queue(client, token: str) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    """(ClusterQueue, its GPU flavor, a LocalQueue feeding it) of the tenant."""
    auth = {"Authorization": f"Bearer {token}"}
    cqs = client.get(f"/v1/tenants/{TENANT}/cluster-queues", headers=auth).json()["items"]
    lqs = client.get(f"/v1/tenants/{TENANT}/local-queues", headers=auth).json()["items"]
    for cq in cqs:
        for group in cq["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                if any(r["name"] == GPU for r in flavor["resources"]):
                    feeding = [q["name"] for q in lqs if q["clusterQueue"] == cq["name"]]
                    if feeding:
                        return cq["name"], flavor["name"], feeding[0]
    raise AssertionError("the demo tenant has no GPU ClusterQueue with a LocalQueue")


def _held_in_page(html: str, queue: str) -> float:
    match = re.search(rf'aria-label="{re.escape(queue)} [^:"]+: ([0-9.]+) of', html)
    assert match, f"no quota bar for {queue}"
    return float(match.group(1))


def test_the_queues_page_draws_the_apis_status(world: World) -> None:
    client, tokens = world
    queue, flavor, local = _gpu_queue(client, tokens["alice"])
    log_in(client, tokens["alice"])
    before = _held_in_page(client.get(f"/t/{TENANT}/queues").text, queue)
    db = client.app.state.db  # type: ignore[attr-defined]
    with db.session() as s:
        tenant = s.query(Tenant).filter_by(name=TENANT).one()
        user = s.query(User).filter_by(name="alice").one()
        pod_set = {"name": "main", "count": 1, "requests": {GPU: 3}}
        s.add(
            Job(
                tenant_id=tenant.id, user_id=user.id, name="held", kind="batch",
                local_queue=local, state="Running", cluster_queue=queue,
                flavors={"main": {GPU: flavor}}, gpus=3000, created_at=0.0, updated_at=0.0,
                spec={"resolved": {"queue": f"{TENANT}/{local}", "podSets": [pod_set]}},
            )
        )  # fmt: skip
    html = client.get(f"/t/{TENANT}/queues").text
    assert _held_in_page(html, queue) == before + 3
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    status = client.get(f"/v1/tenants/{TENANT}/cluster-queues/{queue}", headers=auth).json()
    usage = {
        (f["name"], r["name"]): float(r["total"])
        for f in status["status"]["flavorsUsage"]
        for r in f["resources"]
    }
    assert usage[(flavor, GPU)] == before + 3  # the page shows what the API reports
