"""Registering and operating nodes through the REST API (SQLite and PostgreSQL)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient

from conftest import Api, make_settings
from gpuaas.service.app import create_app
from gpuaas.service.fleet import load_nodes, resolve_entries
from gpuaas.store.tables import Job, Meta, Tenant, User
from gpuaas.supply.loaders import DEMO_FLEET, load_fleet
from gpuaas.supply.loaders.inventory import inventory_from_document

H100_GROUP: dict[str, Any] = {
    "name": "h100-{i:02}",
    "count": 3,
    "cpu": "192",
    "memory": "2Ti",
    "gpus": {"model": "H100-80GB", "count": 8},
    "topology": {"zone": "z1", "rack": "rack-{i/2}"},
    "labels": {"gpuaas.io/pool": "training"},
}
A100: dict[str, Any] = {
    "name": "a100-1",
    "cpu": "128",
    "memory": "1Ti",
    "gpus": {"model": "A100-80GB", "count": 2},
    "labels": {"gpuaas.io/pool": "inference"},
}


def fleet_version(api: Api) -> int:
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        row = session.get(Meta, "fleet.version")
        return int(row.value) if row else 0


def run_job_on(api: Api, node: str, state: str = "Running") -> int:
    """A job holding devices on ``node``, written as the reconciler would."""
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        tenant = Tenant(name="acme", created_at=0.0)
        user = User(name="alice", created_at=0.0)
        session.add_all([tenant, user])
        session.flush()
        job = Job(
            tenant_id=tenant.id, user_id=user.id, name="train", kind="training",
            local_queue="default", spec={}, state=state, created_at=0.0, updated_at=0.0,
            placement=[{"podSet": "w", "index": 0, "node": node, "assignment": {"gpus": [0]}}],
        )  # fmt: skip
        session.add(job)
        session.flush()
        return job.id


def test_register_list_and_read_nodes(api: Api) -> None:
    version = fleet_version(api)
    made = api.post("/v1/nodes", json=H100_GROUP)
    assert made.status_code == 201, made.text
    nodes = made.json()
    assert [n["name"] for n in nodes] == ["h100-01", "h100-02", "h100-03"]
    assert nodes[2]["topology"] == {"zone": "z1", "rack": "rack-2"}
    assert nodes[0]["spec"]["labels"] == {"gpuaas.io/pool": "training"}
    assert "count" not in nodes[0]["spec"]  # stored one resolved entry per node
    assert nodes[0]["allocatable"]["nvidia.com/gpu"] == "8"
    assert api.post("/v1/nodes", json=A100).status_code == 201
    assert fleet_version(api) == version + 2

    listed = api.get("/v1/nodes", params={"limit": 2}).json()
    assert [n["name"] for n in listed["items"]] == ["a100-1", "h100-01"]
    rest = api.get("/v1/nodes", params={"limit": 2, "after": listed["next"]}).json()
    assert [n["name"] for n in rest["items"]] == ["h100-02", "h100-03"] and rest["next"] is None
    by_model = api.get("/v1/nodes", params={"model": "A100-80GB"}).json()["items"]
    assert [n["name"] for n in by_model] == ["a100-1"]
    by_pool = api.get("/v1/nodes", params={"pool": "training", "limit": 1}).json()
    assert [n["name"] for n in by_pool["items"]] == ["h100-01"] and by_pool["next"] == "h100-01"

    one = api.get("/v1/nodes/a100-1").json()
    assert one["gpuModel"] == "A100-80GB" and len(one["gpus"]) == 2
    assert one["gpus"][0]["partition"]["mode"] == "whole" and one["allocated"] == []
    assert api.get("/v1/nodes/nope").status_code == 404


def test_bad_registrations_name_the_field(api: Api) -> None:
    api.post("/v1/nodes", json=A100)
    bad_count = {**A100, "name": "a100-2", "gpus": {"model": "A100-80GB", "count": -1}}
    r = api.post("/v1/nodes", json=bad_count)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "gpus.count", r.text
    r = api.post("/v1/nodes", json={**A100, "name": "a100-3", "gpu": {}})
    assert r.status_code == 422 and "unknown key 'gpu'" in r.json()["detail"]
    r = api.post("/v1/nodes", json={"name": "Bad_Name", "cpu": "1", "memory": "1Gi"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "name"
    r = api.post("/v1/nodes", json=A100)
    assert r.status_code == 409 and "a100-1" in r.json()["detail"]
    assert [n["name"] for n in api.get("/v1/nodes").json()["items"]] == ["a100-1"]


def test_cordon_drain_partition_and_delete(api: Api) -> None:
    api.post("/v1/nodes", json=A100)
    cordoned = api.post("/v1/nodes/a100-1/cordon").json()
    assert cordoned["cordoned"] and not cordoned["draining"]
    assert "node.kubernetes.io/unschedulable" in [t["key"] for t in cordoned["taints"]]
    assert [n["name"] for n in api.get("/v1/nodes", params={"cordoned": True}).json()["items"]] == [
        "a100-1"
    ]
    assert api.post("/v1/nodes/a100-1/uncordon").json()["taints"] == []
    drained = api.post("/v1/nodes/a100-1/drain").json()
    assert drained["cordoned"] and drained["draining"]
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        (node,) = load_nodes(session)
    assert [t.key for t in node.taints] == ["node.kubernetes.io/unschedulable"]
    api.post("/v1/nodes/a100-1/uncordon")

    mig = api.put("/v1/nodes/a100-1/partition", json={"partitioning": "all-1g.10gb"})
    assert mig.status_code == 200, mig.text
    assert mig.json()["allocatable"]["nvidia.com/mig-1g.10gb"] == "14"
    mixed = {
        "partitioning": "whole",
        "perGpu": [{"indices": 1, "partitioning": {"mig": {"3g.40gb": 1, "2g.20gb": 1}}}],
    }
    gpus = api.put("/v1/nodes/a100-1/partition", json=mixed).json()["gpus"]
    assert gpus[0]["partition"]["mode"] == "whole"
    assert sorted(i["profile"] for i in gpus[1]["partition"]["instances"]) == [
        "2g.20gb",
        "3g.40gb",
    ]
    r = api.put("/v1/nodes/a100-1/partition", json={"partitioning": {"mig": {"7g.80gb": 2}}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "partitioning", r.text

    job = run_job_on(api, "a100-1")
    assert api.get("/v1/nodes/a100-1").json()["allocated"][0]["jobId"] == job
    r = api.put("/v1/nodes/a100-1/partition", json={"partitioning": "whole"})
    assert r.status_code == 409 and str(job) in r.json()["detail"]
    assert api.delete("/v1/nodes/a100-1").status_code == 409
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        session.get(Job, job).state = "Succeeded"
    assert api.delete("/v1/nodes/a100-1").status_code == 204
    assert api.get("/v1/nodes/a100-1").status_code == 404


def test_fleet_routes_are_for_platform_roles(api: Api) -> None:
    api.post("/v1/tenants", json={"name": "acme"})
    api.put("/v1/tenants/acme/members/ann", json={"role": "tenant-admin"})
    token = api.post("/v1/tenants/acme/members/ann/tokens", json={"name": "t"}).json()["token"]
    ann = api.as_(token)
    assert ann.get("/v1/nodes").status_code == 403
    assert ann.post("/v1/nodes", json=A100).status_code == 403
    assert api.as_(None).get("/v1/nodes").status_code == 401


def test_initial_fleet_is_registered_once(sqlite_url: str, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "apiVersion: gpuaas.io/v1\nkind: Fleet\n"
        "defaults: {labels: {gpuaas.io/pool: general}, cpu: '64', memory: 512Gi}\n"
        "nodes:\n"
        "  - {name: 'l40s-{i}', count: 2, gpus: {model: L40S, count: 4}}\n"
        "  - {name: cpu-1, labels: {gpuaas.io/pool: cpu}}\n"
    )
    for _ in range(2):  # the second start finds nodes and registers nothing
        app = create_app(make_settings(sqlite_url, tmp_path, fleet=fleet))
        with TestClient(app) as client:
            api = Api(client, "gpa_test-admin-token-0123456789")
            items = api.get("/v1/nodes").json()["items"]
    assert [(n["name"], n["labels"]["gpuaas.io/pool"]) for n in items] == [
        ("cpu-1", "cpu"),
        ("l40s-1", "general"),
        ("l40s-2", "general"),
    ]
    assert items[1]["spec"]["cpu"] == "64"  # defaults merged into the stored entry


def test_resolved_entries_mean_the_same_nodes() -> None:
    """One stored entry per node (defaults merged, patterns expanded) builds the very nodes
    the inventory file describes."""
    source = resources.files("gpuaas.supply").joinpath(DEMO_FLEET).read_text()
    document = yaml.safe_load(source)
    document["defaults"]["gpus"] = {"numaNodes": 1}  # merged key by key into each node's gpus
    document["nodes"].append({"name": "cpu-x", "cpu": "8", "memory": "8Gi", "gpus": "none"})
    entries = resolve_entries(document["nodes"], document["defaults"])
    assert all("count" not in e and "{" not in e["name"] for e in entries)
    stored = {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", "nodes": entries}
    expected = inventory_from_document(document, "demo").nodes
    assert inventory_from_document(stored, "stored").nodes == expected
    assert len(expected) == len(entries) > 20


# --- every fleet format: kubectl node lists, the trace's CSV, whole inventories ---------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NEW_GPUS = FIXTURES / "kubectl-get-nodes-new-gpus.yaml"
OPENB_CSV = (
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "openb-node-0000,64000,262144,2,P100\n"
    "openb-node-0001,96000,786432,8,V100M32\n"
    "openb-node-0002,32000,131072,0,\n"
    "openb-node-0003,96000,393216,4,G2\n"
)


def gpu_facts(nodes: list[dict[str, Any]]) -> dict[str, tuple[str, int, set[str], int]]:
    """name -> (model, GPU count, partition modes, memory MiB of GPU 0)."""
    return {
        n["name"]: (
            n["gpuModel"],
            n["gpuCount"],
            {g["partition"]["mode"] for g in n["gpus"]},
            n["gpus"][0]["memoryMib"] if n["gpus"] else 0,
        )
        for n in nodes
    }


def test_register_kubectl_node_list(api: Api) -> None:
    """`kubectl get nodes -o json` output, as the SDK sends it: the loader `fleet show` uses."""
    document = yaml.safe_load(NEW_GPUS.read_text())
    made = api.post("/v1/nodes", json=document)
    assert made.status_code == 201, made.text
    facts = gpu_facts(made.json())
    assert facts["h20-infer-01"] == ("H20", 8, {"mig"}, 97871)
    assert facts["l40s-mps-03"] == ("L40S", 4, {"mps"}, 46068)
    assert facts["a800-ts-05"] == ("A800-SXM4-80GB", 8, {"time-sliced"}, 81920)
    assert facts["rtxpro-b-01"] == ("RTX-PRO-6000-Blackwell-Server-Edition", 8, {"whole"}, 97887)
    assert facts["a30-mig-02"] == ("A30", 4, {"mig"}, 24576)
    mps = next(n for n in made.json() if n["name"] == "l40s-mps-03")
    assert mps["allocatable"]["nvidia.com/gpu"] == "16"
    assert mps["gpus"][0]["partition"]["replicas"] == 4
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        stored = {n.name: n for n in load_nodes(session)}
    for node in load_fleet(NEW_GPUS).nodes:  # what is stored is what `fleet show` reads
        assert stored[node.name].gpus == node.gpus
        assert stored[node.name].taints == node.taints
    one = api.post("/v1/nodes", json={**document["items"][0], "metadata": {
        **document["items"][0]["metadata"], "name": "h20-infer-02"}})  # fmt: skip
    assert one.status_code == 201 and [n["name"] for n in one.json()] == ["h20-infer-02"]


def test_register_file_content_in_any_format(api: Api) -> None:
    """A file's text (what `gpuaas nodes register -f` sends); the extension picks the format."""
    made = api.post("/v1/nodes", json={"content": OPENB_CSV, "source": "nodes.csv"})
    assert made.status_code == 201, made.text
    facts = gpu_facts(made.json())
    assert facts["openb-node-0001"] == ("V100-32GB", 8, {"whole"}, 32510)
    assert facts["openb-node-0002"] == ("", 0, set(), 0)
    assert facts["openb-node-0003"][:2] == ("G2", 4)  # the trace's undisclosed model
    node = next(n for n in made.json() if n["name"] == "openb-node-0001")
    assert node["labels"]["gpuaas.io/source-gpu-model"] == "V100M32"
    text = NEW_GPUS.read_text()
    made = api.post("/v1/nodes", json={"content": text, "source": "nodes.yaml"})
    assert made.status_code == 201 and len(made.json()) == 8
    inventory = yaml.safe_dump({"apiVersion": "gpuaas.io/v1", "kind": "Fleet",
                                "defaults": {"cpu": "8", "memory": "64Gi"},
                                "nodes": [{"name": "cpu-{i}", "count": 2}]})  # fmt: skip
    made = api.post("/v1/nodes", json={"content": inventory, "source": "fleet.yaml"})
    assert [n["name"] for n in made.json()] == ["cpu-1", "cpu-2"]
    whole = yaml.safe_load(inventory.replace("cpu-{i}", "small-{i}"))
    assert [n["name"] for n in api.post("/v1/nodes", json=whole).json()] == ["small-1", "small-2"]


def test_bad_fleet_documents_store_nothing(api: Api) -> None:
    document = yaml.safe_load(NEW_GPUS.read_text())
    document["items"][3]["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "lots"
    r = api.post("/v1/nodes", json=document)
    assert r.status_code == 422, r.text
    error = r.json()["errors"][0]
    assert error["field"] == "metadata.labels.nvidia.com/gpu.replicas"
    assert "items[3] (l40s-mps-03)" in r.json()["detail"]
    bad_csv = OPENB_CSV.replace("96000,786432,8", "96000,786432,eight")
    r = api.post("/v1/nodes", json={"content": bad_csv, "source": "nodes.csv"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "gpu", r.text
    assert "line 3 (openb-node-0001)" in r.json()["detail"]
    r = api.post("/v1/nodes", json={"content": "kind: Pod\n", "source": "x.yaml"})
    assert r.status_code == 422 and "not a fleet" in r.json()["detail"]
    r = api.post("/v1/nodes", json={"content": 3})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "content"
    r = api.post("/v1/nodes", json={"kind": "Pod", "metadata": {"name": "p"}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "kind"
    assert api.get("/v1/nodes").json()["items"] == []  # all or nothing
    api.post("/v1/nodes", json={"content": OPENB_CSV, "source": "nodes.csv"})
    again = api.post("/v1/nodes", json={"content": OPENB_CSV, "source": "nodes.csv"})
    assert again.status_code == 409 and "openb-node-0000" in again.json()["detail"]
    assert len(api.get("/v1/nodes").json()["items"]) == 4


def test_initial_fleet_from_kubectl_output_or_csv(sqlite_url: str, tmp_path: Path) -> None:
    csv_file = tmp_path / "nodes.csv"
    csv_file.write_text(OPENB_CSV)
    for fleet, expected in ((NEW_GPUS, 8), (csv_file, 4)):
        data = tmp_path / fleet.suffix.strip(".")
        data.mkdir()
        app = create_app(make_settings(sqlite_url.replace(".db", f"-{data.name}.db"), data,
                                       fleet=fleet))  # fmt: skip
        with TestClient(app) as client:
            api = Api(client, "gpa_test-admin-token-0123456789")
            assert len(api.get("/v1/nodes").json()["items"]) == expected


def test_repartition_to_mps_and_back(api: Api) -> None:
    l40s = {"name": "l40s-1", "cpu": "64", "memory": "256Gi", "gpus": {"model": "L40S", "count": 2}}
    assert api.post("/v1/nodes", json=l40s).status_code == 201
    r = api.put("/v1/nodes/l40s-1/partition", json={"partitioning": {"mps": {"replicas": 4}}})
    assert r.status_code == 200, r.text
    assert {g["partition"]["mode"] for g in r.json()["gpus"]} == {"mps"}
    assert r.json()["allocatable"]["nvidia.com/gpu"] == "8"
    r = api.put("/v1/nodes/l40s-1/partition", json={"partitioning": "time-slicing:2"})
    assert {g["partition"]["mode"] for g in r.json()["gpus"]} == {"time-sliced"}
    r = api.put("/v1/nodes/l40s-1/partition", json={"partitioning": {"mps": {"replicas": 0}}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "partitioning.mps.replicas"
