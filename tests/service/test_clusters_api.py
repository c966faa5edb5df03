"""Tenant clusters through the API, on the simulated fleet: the provider's terms, creation
(topology-aware carving), jobs that name a cluster run only on its nodes and never another
tenant's there, scale-out and scale-in (a busy node drained and its job requeued first),
deletion (force while jobs run), bad input (each a 4xx naming the field, nothing stored),
the bare-metal allocation record, and the per-cluster gauges of /metrics."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.service.app import create_app
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.tables import REQUEST_LOGS, Base, Job, NodeRow

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuaasTestKeyOnly alice@example"


def node(name: str, rack: str, domain: str) -> dict[str, Any]:
    return {
        "name": name,
        "cpu": "64",
        "memory": "512Gi",
        "gpus": {"model": "H100-80GB", "count": 8},
        "labels": {"gpuaas.io/pool": "h100"},
        "topology": {"rack": rack, "nvlinkDomain": domain},
    }


#: rack r1: NVLink domains d1 (n1, n2) and d2 (n3, n4, n5); rack r2: d3 (n6)
NODES = [
    node("n1", "r1", "d1"),
    node("n2", "r1", "d1"),
    node("n3", "r1", "d2"),
    node("n4", "r1", "d2"),
    node("n5", "r1", "d2"),
    node("n6", "r2", "d3"),
]


def cq(name: str, gpus: int) -> dict[str, Any]:
    return {
        "name": name,
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "1000"},
                                {"name": "memory", "nominalQuota": "10Ti"},
                                {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def job(name: str, gpus: int = 8, cluster: str | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "command": ["sleep", "600"],
        "duration": 3600,
        "podSets": [{"name": "main", "count": 1, "resources": {"nvidia.com/gpu": gpus}}],
        **extra,
    }
    if cluster is not None:
        spec["cluster"] = cluster
    else:
        spec.setdefault("queue", "main")
    return spec


class World:
    def __init__(self, api: Api, tmp_path: Path) -> None:
        self.api = api
        self.tmp_path = tmp_path
        self.db = api.client.app.state.db
        self.settings = api.client.app.state.settings
        self.reconciler = Reconciler(self.db, self.settings)
        self.tokens: dict[str, str] = {}

    def ok(self, method: str, url: str, token: str | None = None, **kw: Any) -> Any:
        r = self.api.as_(token or ADMIN_TOKEN).request(method, url, **kw)
        assert r.status_code < 300, (url, r.status_code, r.text)
        return r.json() if r.content else None

    def build(self) -> None:
        spec = {"nodeLabels": {"gpuaas.io/pool": "h100"}}
        self.ok("POST", "/v1/flavors", json={"name": "h100", "spec": spec})
        self.ok("POST", "/v1/nodes", json={"apiVersion": "gpuaas.io/v1", "kind": "Fleet",
                                           "nodes": NODES})  # fmt: skip
        for tenant in ("acme", "globex"):
            capacity = {"h100": {"nvidia.com/gpu": "48", "cpu": "1000", "memory": "10Ti"}}
            self.ok("POST", "/v1/tenants", json={"name": tenant, "capacity": capacity})
            self.ok("POST", f"/v1/tenants/{tenant}/cluster-queues", json=cq(f"{tenant}-cq", 48))
            self.ok("POST", f"/v1/tenants/{tenant}/local-queues",
                    json={"name": "main", "clusterQueue": f"{tenant}-cq"})  # fmt: skip
            for role in ("tenant-admin", "tenant-user"):
                user = f"{tenant}-{role}"
                self.ok("PUT", f"/v1/tenants/{tenant}/members/{user}", json={"role": role})
                body = self.ok("POST", f"/v1/tenants/{tenant}/members/{user}/tokens",
                               json={"name": "t"})  # fmt: skip
                self.tokens[user] = body["token"]
        self.ok("PUT", "/v1/tenants/acme/cluster-allowance",
                json={"flavors": ["h100"], "nodeLimit": 4})  # fmt: skip

    def admin(self, tenant: str = "acme") -> str:
        return self.tokens[f"{tenant}-tenant-admin"]

    def user(self, tenant: str = "acme") -> str:
        return self.tokens[f"{tenant}-tenant-user"]

    def cluster(self, name: str = "bm") -> dict[str, Any]:
        return self.ok("GET", f"/v1/tenants/acme/clusters/{name}", self.admin())

    def submit(self, tenant: str, spec: dict[str, Any]) -> int:
        return self.ok("POST", f"/v1/tenants/{tenant}/jobs", self.user(tenant), json=spec)["id"]

    def settle(self, until: Any = None, seconds: float = 10.0) -> None:
        """Step the reconciler and the cluster worker until ``until()`` (or a few times)."""
        deadline = time.monotonic() + seconds
        for _ in range(1000):
            self.reconciler.step(time.time())
            self.reconciler.clusters.advance(time.time())
            if until is None or until():
                if until is None and _ > 3:
                    return
                if until is not None:
                    return
            assert time.monotonic() < deadline, "not settled"
            time.sleep(0.01)

    def job(self, job_id: int) -> Job:
        with self.db.sessions() as s:
            row = s.get(Job, job_id)
            assert row is not None
            s.expunge(row)
            return row

    def nodes_of(self, job_id: int) -> set[str]:
        return {p["node"] for p in self.job(job_id).placement or []}

    def labels(self) -> dict[str, dict[str, Any]]:
        with self.db.sessions() as s:
            return {r.name: dict(r.spec) for r in s.scalars(select(NodeRow))}

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        with self.db.engine.connect() as conn:
            return {
                t.name: [tuple(r) for r in conn.execute(select(t).order_by(*t.primary_key))]
                for t in Base.metadata.sorted_tables
                if t.name not in REQUEST_LOGS
            }


@pytest.fixture
def world(sqlite_url: str, tmp_path: Path) -> Iterator[World]:
    app = create_app(make_settings(sqlite_url, tmp_path))
    with TestClient(app) as client:
        w = World(Api(client, ADMIN_TOKEN), tmp_path)
        w.build()
        yield w
        w.reconciler.stop()


def bm_body(count: int = 2, **pool: Any) -> dict[str, Any]:
    return {
        "name": "bm",
        "kind": "baremetal",
        "pools": [{"name": "gpu", "flavor": "h100", "count": count, "min": 1, "max": 3, **pool}],
        "sshKeys": [KEY],
    }


def test_a_cluster_lives_carved_scaled_drained_and_deleted(world: World) -> None:
    created = world.ok("POST", "/v1/tenants/acme/clusters", world.admin(), json=bm_body())
    assert created["state"] == "Provisioning"
    assert created["nodes"] == ["n1", "n2"]  # the NVLink domain that fits best, kept whole
    assert created["localQueue"] == "cluster-bm"
    world.settle(lambda: world.cluster()["state"] == "Ready")
    allocation = json.loads((world.tmp_path / "baremetal" / "acme" / "bm.json").read_text())
    assert allocation["spec"]["sshAuthorizedKeys"] == [KEY]
    assert [h["name"] for h in allocation["spec"]["pools"]["gpu"]] == ["n1", "n2"]
    assert world.labels()["n1"]["labels"][CLUSTER_LABEL] == "acme.bm"

    # a job naming the cluster runs only on its nodes; another tenant's never there
    mine = [world.submit("acme", job(f"c{i}", cluster="bm")) for i in range(3)]
    theirs = [world.submit("globex", job(f"g{i}")) for i in range(5)]
    world.settle()
    on = {n for j in mine for n in world.nodes_of(j)}
    assert on == {"n1", "n2"}
    assert world.job(mine[2]).state == "Pending"  # two 8-GPU nodes, three 8-GPU jobs
    assert not {n for j in theirs for n in world.nodes_of(j)} & {"n1", "n2"}
    assert world.job(theirs[4]).state == "Pending"  # four shared nodes, five jobs
    view = world.cluster()
    assert view["gpus"] == 16 and view["allocatedGpus"] == 16
    assert view["jobs"] == {"pending": 1, "admitted": 0, "running": 2}

    # another tenant cannot name it
    r = world.api.as_(world.user("globex")).post(
        "/v1/tenants/globex/jobs", json=job("x", cluster="bm")
    )
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "cluster"

    # scale out: a globex job finishes to free a node first
    for j in theirs[:4]:
        world.ok("POST", f"/v1/tenants/globex/jobs/{j}/cancel", world.user("globex"))
    world.settle(lambda: world.job(theirs[4]).state == "Running")
    scaled = world.ok("POST", "/v1/tenants/acme/clusters/bm/scale", world.admin(),
                      json={"pools": [{"name": "gpu", "count": 3}]})  # fmt: skip
    assert scaled["state"] == "Scaling" and len(scaled["nodes"]) == 3
    world.settle(lambda: world.job(mine[2]).state == "Running")
    assert world.cluster()["state"] == "Ready"
    third = world.nodes_of(mine[2])
    assert third <= set(world.cluster()["nodes"]) and not third & {"n1", "n2"}

    # scale in with jobs everywhere: the released node's job is drained, requeued, then waits
    scaled = world.ok("POST", "/v1/tenants/acme/clusters/bm/scale", world.admin(),
                      json={"pools": [{"name": "gpu", "count": 2}]})  # fmt: skip
    (leaving,) = scaled["releasing"]
    victim = next(j for j in mine if leaving in world.nodes_of(j))
    world.settle(lambda: world.cluster()["state"] == "Ready")
    assert world.job(victim).state == "Pending"
    assert "NodeDrained" in world.job(victim).reason or world.job(victim).attempts >= 1
    assert CLUSTER_LABEL not in world.labels()[leaving].get("labels", {})
    events = world.ok("GET", "/v1/tenants/acme/clusters/bm/events", world.admin())
    codes = [e["code"] for e in events]
    assert codes[0] == "ClusterCarved" and "ClusterDraining" in codes
    assert codes[-2:] == ["ClusterReleased", "ClusterReady"]

    # /metrics
    text = world.api.get("/metrics").text
    assert (
        'gpuaas_cluster_nodes{cluster="bm",kind="baremetal",status="held",tenant="acme"} 2.0'
        in text
    )
    assert 'gpuaas_cluster_gpus_allocated{cluster="bm",tenant="acme"} 16.0' in text

    # delete: refused while jobs run, forced then; the nodes come back
    r = world.api.as_(world.admin()).delete("/v1/tenants/acme/clusters/bm")
    assert r.status_code == 409 and r.json()["errors"][0]["field"] == "force"
    r = world.api.as_(world.admin()).delete("/v1/tenants/acme/clusters/bm?force=true")
    assert r.status_code == 202 and r.json()["state"] == "Deleting"
    world.settle(
        lambda: world.api.as_(world.admin()).get("/v1/tenants/acme/clusters/bm").status_code == 404
    )
    assert all(world.job(j).state == "Cancelled" for j in mine)
    assert not any(CLUSTER_LABEL in n.get("labels", {}) for n in world.labels().values())
    assert not (world.tmp_path / "baremetal" / "acme" / "bm.json").exists()
    assert world.ok("GET", "/v1/tenants/acme/cluster-allowance", world.admin())["nodesHeld"] == 0
    # the shared pool gets the nodes back
    late = world.submit("globex", job("late"))
    world.settle(lambda: world.job(late).state == "Running")


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (bm_body(pool_flavor="x"), 422, "pools.0.pool_flavor"),
        ({**bm_body(), "pools": [{"name": "gpu", "flavor": "h200", "count": 1}]}, 422,
         "pools[0].flavor"),
        ({**bm_body(), "pools": [{"name": "gpu", "gpuModel": "A100", "count": 1}]}, 422,
         "pools[0].gpuModel"),
        ({**bm_body(), "pools": [{"name": "gpu", "flavor": "h100", "count": 5}]}, 422, "pools"),
        ({**bm_body(), "pools": [{"name": "gpu", "flavor": "h100", "count": 4, "max": 3}]}, 422,
         "pools[0].count"),
        ({**bm_body(), "kind": "kubernetes", "distribution": "suse", "sshKeys": []}, 422,
         "distribution"),
        ({**bm_body(), "kind": "kubernetes", "sshKeys": []}, 422, "distribution"),
        ({**bm_body(), "distribution": "rancher"}, 422, "distribution"),
        ({**bm_body(), "sshKeys": ["not a key"]}, 422, "sshKeys[0]"),
        ({**bm_body(), "name": "Bad_Name"}, 422, "name"),
    ],
)  # fmt: skip
def test_bad_input_names_the_field_and_stores_nothing(
    world: World, body: dict[str, Any], status: int, field: str
) -> None:
    before = world.snapshot()
    r = world.api.as_(world.admin()).post("/v1/tenants/acme/clusters", json=body)
    assert r.status_code == status, r.text
    fields = [e["field"] for e in r.json().get("errors", [])] or [r.json().get("field")]
    dotted = field.replace("[", ".").replace("]", "")  # podSets[0] and podSets.0 name one field
    assert any(f == field or f.replace("[", ".").replace("]", "") == dotted for f in fields), (
        r.json()
    )
    assert world.snapshot() == before


def test_beyond_the_free_nodes_is_a_conflict_naming_the_count(world: World) -> None:
    world.ok("PUT", "/v1/tenants/acme/cluster-allowance",
             json={"flavors": ["h100"], "nodeLimit": 100})  # fmt: skip
    busy = [world.submit("globex", job(f"g{i}")) for i in range(4)]
    world.settle(lambda: all(world.job(j).state == "Running" for j in busy))
    before = world.snapshot()
    r = world.api.as_(world.admin()).post("/v1/tenants/acme/clusters", json=bm_body(3, max=6))
    assert r.status_code == 409, r.text
    assert r.json()["errors"][0]["field"] == "pools[0].count"
    assert world.snapshot() == before


def test_only_a_tenant_admin_writes_and_only_the_provider_sets_the_terms(world: World) -> None:
    r = world.api.as_(world.user()).post("/v1/tenants/acme/clusters", json=bm_body())
    assert r.status_code == 403
    r = world.api.as_(world.admin("globex")).post("/v1/tenants/acme/clusters", json=bm_body())
    assert r.status_code == 404
    r = world.api.as_(world.admin()).put(
        "/v1/tenants/acme/cluster-allowance", json={"flavors": ["h100"], "nodeLimit": 99}
    )
    assert r.status_code == 403
    # the tenant without terms may carve nothing
    r = world.api.as_(world.admin("globex")).post("/v1/tenants/globex/clusters", json=bm_body())
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "pools[0].flavor"


SCHEMAS = Path(__file__).resolve().parents[2] / ".." / "shared" / "schemas"


@pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"{SCHEMAS} is absent")
def test_a_kubernetes_cluster_without_a_management_cluster_is_carved_and_printed(
    world: World,
) -> None:
    """No GPUAAS_CAPI_KUBECONFIG: the nodes are carved and the Cluster API objects are printed
    by the manifest route (replicas following scale), the reason says nothing was applied."""
    from gpuaas.backends.kubernetes.schemas import validate

    pool = {"name": "gpu", "flavor": "h100", "count": 2, "min": 1, "max": 3}
    body = {"name": "k8s", "kind": "kubernetes", "distribution": "rancher", "pools": [pool]}
    created = world.ok("POST", "/v1/tenants/acme/clusters", world.admin(), json=body)
    assert created["state"] == "Provisioning" and len(created["nodes"]) == 2
    world.settle(lambda: world.cluster("k8s")["state"] == "Ready")
    view = world.cluster("k8s")
    assert view["reason"]["code"] == "ClusterUnapplied", view
    assert "gpuaas clusters manifest k8s" in view["reason"]["message"]

    def replicas() -> dict[str, int]:
        docs = world.ok("GET", "/v1/tenants/acme/clusters/k8s/manifest", world.admin())
        validate([d for d in docs if d["kind"] != "ClusterResourceSet"], SCHEMAS)
        kinds = {"Cluster", "RKE2ControlPlane", "Metal3Cluster", "RKE2ConfigTemplate"}
        assert {d["kind"] for d in docs} >= kinds | {"Metal3MachineTemplate"}
        return {d["metadata"]["name"]: d["spec"]["replicas"] for d in docs
                if d["kind"] in ("MachineDeployment", "RKE2ControlPlane")}  # fmt: skip

    assert sorted(replicas().values()) == [1, 2]
    world.ok("POST", "/v1/tenants/acme/clusters/k8s/scale", world.admin(),
             json={"pools": [{"name": "gpu", "count": 3}]})  # fmt: skip
    world.settle(lambda: world.cluster("k8s")["state"] == "Ready")
    assert sorted(replicas().values()) == [1, 3]
    world.ok("DELETE", "/v1/tenants/acme/clusters/k8s", world.admin())
    world.settle(
        lambda: world.api.as_(world.admin()).get("/v1/tenants/acme/clusters/k8s").status_code == 404
    )


def test_a_cluster_brings_its_volumes_and_takes_them_away(world: World) -> None:
    """Volumes asked with a cluster are the tenant's, held to its storage quota (a refusal
    names volumes[i] and leaves nothing), and go with the cluster."""
    world.ok("PATCH", "/v1/tenants/acme", json={"storageQuota": "3Mi"})
    home, data = {"name": "home", "size": "1Mi"}, {"name": "data", "size": "4Mi"}
    too_big = {**bm_body(), "volumes": [home, data]}
    before = world.snapshot()
    r = world.api.as_(world.admin()).post("/v1/tenants/acme/clusters", json=too_big)
    assert r.status_code == 409 and r.json()["errors"][0]["field"] == "volumes[1].size", r.text
    assert world.snapshot() == before
    body = {
        **too_big,
        "volumes": [{"name": "home", "size": "1Mi"}, {"name": "data", "size": "2Mi"}],
    }
    assert world.ok("POST", "/v1/tenants/acme/clusters", world.admin(), json=body)["volumes"] == [
        "home",
        "data",
    ]
    vols = world.ok("GET", "/v1/tenants/acme/volumes", world.admin())["items"]
    assert {(v["name"], v["cluster"]) for v in vols} == {("home", "bm"), ("data", "bm")}
    world.settle(lambda: world.cluster()["state"] == "Ready")
    world.ok("DELETE", "/v1/tenants/acme/clusters/bm", world.admin())
    world.settle(
        lambda: world.api.as_(world.admin()).get("/v1/tenants/acme/clusters/bm").status_code == 404
    )
    assert world.ok("GET", "/v1/tenants/acme/volumes", world.admin())["items"] == []


def test_the_readme_tour_cluster_is_created_as_written(world: World) -> None:
    """examples/cluster.yaml, which the README's tour creates, is a valid cluster."""
    example = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
    body = yaml.safe_load(example.read_text())
    created = world.ok("POST", "/v1/tenants/acme/clusters", world.admin(), json=body)
    assert len(created["nodes"]) == 2 and created["volumes"] == ["scratch"]
    world.settle(lambda: world.cluster("hpc-team")["state"] == "Ready")
