"""Kueue YAML import and export through the REST API (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import Api
from gpuaas.model.errors import InvalidValue
from gpuaas.supply.kueue import load_objects, load_yaml

SCENARIOS = Path(__file__).resolve().parents[3] / "shared" / "conformance" / "scenarios"
YAML = {"Content-Type": "application/yaml"}

CONFIG = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100, uid: 1234, resourceVersion: "7"}
spec:
  nodeLabels: {gpuaas.io/pool: training}
  nodeTaints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research}
spec:
  cohortName: org
  namespaceSelector: {}
  queueingStrategy: StrictFIFO
  preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}
  resourceGroups:
    - coveredResources: [cpu, nvidia.com/gpu]
      flavors:
        - name: h100
          resources:
            - {name: cpu, nominalQuota: "96"}
            - {name: nvidia.com/gpu, nominalQuota: 16, borrowingLimit: 8}
status: {pendingWorkloads: 3}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: default, namespace: acme}
spec: {clusterQueue: research}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
description: production jobs
---
apiVersion: gpuaas.io/v1
kind: HardwareProfile
metadata: {name: h100-1x}
spec:
  displayName: One H100
  localQueue: default
  resources: [{name: nvidia.com/gpu, min: 1, default: 1, max: 8}]
"""


def test_import_export_round_trip(api: Api) -> None:
    api.post("/v1/tenants", json={"name": "acme"})
    dry = api.post("/v1/kueue/import", params={"dryRun": "true"}, content=CONFIG, headers=YAML)
    assert dry.status_code == 200, dry.text
    assert dry.json()["dryRun"] is True and len(dry.json()["created"]) == 6
    assert api.get("/v1/flavors").json()["items"] == []  # a dry run stores nothing

    done = api.post("/v1/kueue/import", content=CONFIG, headers=YAML).json()
    assert done["created"][3] == "LocalQueue acme/default" and done["updated"] == []
    assert api.get("/v1/tenants/acme/local-queues/default").json()["clusterQueue"] == "research"
    assert api.get("/v1/priority-classes/high").json()["value"] == 1000

    exported = api.get("/v1/kueue/export")
    assert exported.headers["content-type"].startswith("application/yaml")
    docs = list(yaml.safe_load_all(exported.text))
    assert [d["kind"] for d in docs] == [
        "ResourceFlavor",
        "Cohort",
        "Cohort",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
        "HardwareProfile",
    ]
    assert all("status" not in d and "uid" not in d["metadata"] for d in docs)
    # tenant acme's root cohort (the provider's, derived from its terms) is exported with the rest
    root = next(d for d in docs if d["kind"] == "Cohort" and d["metadata"]["name"] == "acme")
    assert root["spec"] == {}
    config = [d for d in docs if d is not root]
    assert load_objects(config) == load_objects(list(yaml.safe_load_all(CONFIG)))
    again = api.post("/v1/kueue/import", content=exported.text, headers=YAML).json()
    assert again["created"] == again["updated"] == [] and len(again["unchanged"]) == 7
    assert api.get("/v1/kueue/export").text == exported.text

    as_json = api.post("/v1/kueue/import", json=docs[:1])
    assert as_json.status_code == 200 and as_json.json()["unchanged"] == ["ResourceFlavor h100"]
    docs[0]["spec"]["nodeLabels"] = {"gpuaas.io/pool": "inference"}
    changed = api.post("/v1/kueue/import", json=docs[:1]).json()
    assert changed["updated"] == ["ResourceFlavor h100"] and changed["unchanged"] == []


def test_bad_imports_store_nothing(api: Api) -> None:
    api.post("/v1/tenants", json={"name": "acme"})
    broken = CONFIG.replace("queueingStrategy: StrictFIFO", "queueingStrategy: Sometimes")
    r = api.post("/v1/kueue/import", content=broken, headers=YAML)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "import: ClusterQueue research: spec.queueingStrategy"
    unknown = CONFIG.replace("cohortName: org", "cohortName: org\n  stopPolicy: Hold")
    assert "stopPolicy" in api.post("/v1/kueue/import", content=unknown, headers=YAML).text
    r = api.post("/v1/kueue/import", content=CONFIG.replace("acme", "ghost"), headers=YAML)
    assert r.status_code == 422
    error = r.json()["errors"][0]
    assert error["field"] == "import: LocalQueue ghost/default: metadata.namespace"
    assert "namespaceMap=ghost=<tenant>" in error["message"]
    r = api.post("/v1/kueue/import", content="kind: [unclosed", headers=YAML)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body"
    r = api.post("/v1/kueue/import", content="<x/>", headers={"Content-Type": "application/xml"})
    assert r.status_code == 415
    nothing = yaml.safe_load_all(api.get("/v1/kueue/export").text)  # nothing was stored:
    assert [d["metadata"]["name"] for d in nothing if d] == ["acme"]  # tenant acme's root only

    api.put("/v1/tenants/acme/members/ann", json={"role": "tenant-admin"})
    token = api.post("/v1/tenants/acme/members/ann/tokens", json={"name": "t"}).json()["token"]
    assert api.as_(token).post("/v1/kueue/import", content=CONFIG, headers=YAML).status_code == 403
    assert api.as_(token).get("/v1/kueue/export").status_code == 403


def test_conformance_configurations_import(sqlite_api: Api) -> None:
    """The Kueue objects of every shared conformance scenario are accepted as they are (on
    SQLite only: the subject is the Kueue vocabulary, which the round trip above covers on
    both databases)."""
    api = sqlite_api
    if not SCENARIOS.is_dir():
        pytest.skip(f"{SCENARIOS} is absent (the shared conformance scenarios are not checked out)")
    files = sorted(SCENARIOS.glob("*.yaml"))
    assert files
    for path in files:
        objects = yaml.safe_load(path.read_text())["objects"]
        for obj in objects:
            namespace = obj["metadata"].get("namespace")
            if namespace and api.get(f"/v1/tenants/{namespace}").status_code == 404:
                api.post("/v1/tenants", json={"name": namespace})
        r = api.post("/v1/kueue/import", params={"dryRun": "true"}, json=objects)
        assert r.status_code == 200, f"{path.name}: {r.text}"
    last = yaml.safe_load(files[-1].read_text())["objects"]
    assert api.post("/v1/kueue/import", json=last).status_code == 200
    exported = list(yaml.safe_load_all(api.get("/v1/kueue/export").text))
    tenants = {t["name"] for t in api.get("/v1/tenants", params={"limit": 1000}).json()["items"]}
    roots = [d for d in exported if d["kind"] == "Cohort" and d["metadata"]["name"] in tenants]
    assert len(roots) == len(tenants)  # every tenant's root cohort is exported too
    assert load_objects([d for d in exported if d not in roots]) == load_objects(last)


SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-samples"

QUANTITIES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: big}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [cpu, memory, nvidia.com/gpu]
      flavors:
        - name: default-flavor
          resources:
            - {name: cpu, nominalQuota: 3072}
            - {name: memory, nominalQuota: 12Ti}
            - {name: nvidia.com/gpu, nominalQuota: "256"}
"""


def _quotas(text: str) -> list[object]:
    cq = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "ClusterQueue")
    resources = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    return [r["nominalQuota"] for r in resources]


def test_a_v1beta1_file_with_a_topology_imports_as_v1beta2(api: Api) -> None:
    """Kueue 0.14's TAS sample: v1beta1 objects and a v1beta1 Topology, LocalQueue in
    namespace default, mapped to a tenant; stored and exported as v1beta2."""
    api.post("/v1/tenants", json={"name": "acme"})
    old = (SAMPLES / "v0.14.8" / "tas" / "sample-gpu-queues.yaml").read_text()
    done = api.post(
        "/v1/kueue/import", params={"namespaceMap": "default=acme"}, content=old, headers=YAML
    )
    assert done.status_code == 200, done.text
    assert done.json()["created"] == [
        "Topology default",
        "ResourceFlavor tas-flavor",
        "ClusterQueue tas-cluster-queue",
        "LocalQueue acme/tas-user-queue",
    ]
    lq = api.get("/v1/tenants/acme/local-queues/tas-user-queue").json()
    assert lq["clusterQueue"] == "tas-cluster-queue"
    exported = api.get("/v1/kueue/export").text
    docs = list(yaml.safe_load_all(exported))
    assert {d["apiVersion"] for d in docs} == {"kueue.x-k8s.io/v1beta2"}
    by_kind = {d["kind"]: d for d in docs}  # with tenant acme's root Cohort, the provider's
    assert by_kind["Topology"]["spec"]["levels"][1] == {
        "nodeLabel": "cloud.provider.com/topology-rack"
    }
    assert by_kind["ResourceFlavor"]["spec"]["topologyName"] == "default"
    assert by_kind["LocalQueue"]["metadata"] == {"name": "tas-user-queue", "namespace": "acme"}
    # the old file again, its v1beta2 twin from Kueue's main, and the export: nothing changes
    for text, params in (
        (old, {"namespaceMap": "default=acme"}),
        (
            (SAMPLES / "main" / "tas" / "sample-gpu-queues.yaml").read_text(),
            {"tenant": "acme"},
        ),
        (exported, {}),
    ):
        again = api.post("/v1/kueue/import", params=params, content=text, headers=YAML).json()
        objects = [d for d in yaml.safe_load_all(text) if d]
        assert again["created"] == again["updated"] == []
        assert len(again["unchanged"]) == len(objects)
    assert api.get("/v1/kueue/export").text == exported
    # a flavor naming a Topology that is not there is refused, nothing stored
    broken = old.replace('topologyName: "default"', 'topologyName: "other"')
    r = api.post("/v1/kueue/import", params={"tenant": "acme"}, content=broken, headers=YAML)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "import: ResourceFlavor tas-flavor: spec.topologyName"


def test_export_import_is_a_no_op_and_keeps_quantities_as_written(api: Api) -> None:
    first = api.post("/v1/kueue/import", content=QUANTITIES, headers=YAML).json()
    assert first["created"] == ["ResourceFlavor default-flavor", "ClusterQueue big"]
    exported = api.get("/v1/kueue/export").text
    assert _quotas(exported) == [3072, "12Ti", "256"]  # not 3Ki, nor 13194139533312
    again = api.post("/v1/kueue/import", content=exported, headers=YAML).json()
    assert again == {
        "dryRun": False,
        "created": [],
        "updated": [],
        "unchanged": ["ResourceFlavor default-flavor", "ClusterQueue big"],
    }
    # the same amounts written another way mean the same quota: unchanged, stored as it was
    other_form = QUANTITIES.replace("nominalQuota: 3072", "nominalQuota: 3Ki").replace(
        "12Ti", '"12288Gi"'
    )
    same = api.post("/v1/kueue/import", content=other_form, headers=YAML).json()
    assert same["unchanged"] == ["ResourceFlavor default-flavor", "ClusterQueue big"]
    assert api.get("/v1/kueue/export").text == exported
    twice = api.post("/v1/kueue/import", content=f"{exported}---\n{exported}", headers=YAML)
    assert twice.status_code == 422
    assert twice.json()["errors"][0] == {
        "field": "import: ResourceFlavor default-flavor",
        "message": "defined twice",
    }
    # a real change is an update, and is then exported as written
    more = QUANTITIES.replace("nominalQuota: 3072", "nominalQuota: 4k")
    changed = api.post("/v1/kueue/import", content=more, headers=YAML).json()
    assert changed["updated"] == ["ClusterQueue big"]
    assert changed["unchanged"] == ["ResourceFlavor default-flavor"]
    assert _quotas(api.get("/v1/kueue/export").text) == ["4k", "12Ti", "256"]


def test_local_queue_namespaces_map_to_tenants_explicitly(api: Api) -> None:
    api.post("/v1/tenants", json={"name": "acme-ai"})
    setup = (SAMPLES / "main" / "getting-started" / "quick-start-setup.yaml").read_text()
    r = api.post("/v1/kueue/import", content=setup, headers=YAML)
    assert r.status_code == 422
    error = r.json()["errors"][0]
    assert error["field"] == "import: LocalQueue default/user-queue: metadata.namespace"
    assert "namespace 'default' maps to tenant 'default', which does not exist" in error["message"]
    assert "--namespace-map default=<tenant>" in error["message"]
    assert api.get("/v1/cluster-queues/cluster-queue").status_code == 404  # nothing stored
    r = api.post(
        "/v1/kueue/import", params={"namespaceMap": "default=globex"}, content=setup, headers=YAML
    )
    assert r.status_code == 422
    assert "namespaceMap sends namespace 'default' to it" in r.json()["errors"][0]["message"]
    for bad in ("default", "=acme-ai", "default=Not_A_Name"):
        r = api.post("/v1/kueue/import", params={"namespaceMap": bad}, content=setup, headers=YAML)
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "namespaceMap", bad
    r = api.post(
        "/v1/kueue/import",
        params={"namespaceMap": ["team-b=acme-ai", "default=acme-ai"]},
        content=setup,
        headers=YAML,
    )
    assert r.status_code == 200, r.text
    assert r.json()["created"][-1] == "LocalQueue acme-ai/user-queue"
    assert api.get("/v1/tenants/acme-ai/local-queues/user-queue").status_code == 200
    # --tenant sends every namespace the map does not name to one tenant
    again = api.post("/v1/kueue/import", params={"tenant": "acme-ai"}, content=setup, headers=YAML)
    assert len(again.json()["unchanged"]) == 3


def _sample_names() -> list[str]:
    return sorted(p.relative_to(SAMPLES).as_posix() for p in SAMPLES.rglob("*.yaml"))


@pytest.mark.parametrize("name", _sample_names())
def test_kueue_samples_import_or_are_refused_naming_the_field(sqlite_api: Api, name: str) -> None:
    """Through the API, each sample does what the Kueue loader does with it
    (tests/supply/test_kueue_samples.py pins which): it imports, re-imports unchanged, and
    its export re-imports unchanged; or it is refused naming the same object and field, and
    nothing is stored. (SQLite only: the round trip above covers both databases.)"""
    api = sqlite_api
    api.post("/v1/tenants", json={"name": "acme"})
    path = SAMPLES / name
    text = path.read_text()
    params = {"namespaceMap": "default=acme"}
    before = api.get("/v1/kueue/export").text  # tenant acme's root cohort only
    r = api.post("/v1/kueue/import", params=params, content=text, headers=YAML)
    try:
        load_yaml(path)
    except InvalidValue as exc:
        assert r.status_code == 422, r.text
        field = exc.field.replace(str(path), "import", 1)
        assert r.json()["errors"][0]["field"] == field
        assert api.get("/v1/kueue/export").text == before
        return
    assert r.status_code == 200, r.text
    count = len(r.json()["created"])
    again = api.post("/v1/kueue/import", params=params, content=text, headers=YAML).json()
    assert len(again["unchanged"]) == count and again["created"] == again["updated"] == []
    exported = api.get("/v1/kueue/export").text
    back = api.post("/v1/kueue/import", content=exported, headers=YAML).json()
    assert back["created"] == back["updated"] == []
    assert len(back["unchanged"]) == len([d for d in yaml.safe_load_all(exported) if d])
