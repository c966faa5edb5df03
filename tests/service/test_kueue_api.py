"""Kueue YAML import and export through the REST API (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import Api
from gpuaas.supply.kueue import load_objects

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
    assert again["created"] == [] and len(again["updated"]) == 7
    assert api.get("/v1/kueue/export").text == exported.text

    as_json = api.post("/v1/kueue/import", json=docs[:1])
    assert as_json.status_code == 200 and as_json.json()["updated"] == ["ResourceFlavor h100"]


def test_bad_imports_store_nothing(api: Api) -> None:
    api.post("/v1/tenants", json={"name": "acme"})
    broken = CONFIG.replace("queueingStrategy: StrictFIFO", "queueingStrategy: Sometimes")
    r = api.post("/v1/kueue/import", content=broken, headers=YAML)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "import: ClusterQueue research: spec.queueingStrategy"
    unknown = CONFIG.replace("cohortName: org", "cohortName: org\n  stopPolicy: Hold")
    assert "stopPolicy" in api.post("/v1/kueue/import", content=unknown, headers=YAML).text
    r = api.post("/v1/kueue/import", content=CONFIG.replace("acme", "ghost"), headers=YAML)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "metadata.namespace"
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
