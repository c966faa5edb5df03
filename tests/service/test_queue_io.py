"""KAI and Volcano queues out of the service and back in (SQLite and PostgreSQL): the demo's
governance validates against the upstream Queue CRDs, the upstream samples import, fields
with no Kueue equivalent are refused by name, and what maps round-trips."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import Api
from gpuaas.service.demo import seed_demo
from gpuaas.service.queue_io import export_queues
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.supply.crd_schema import validate_against_crd

SCHEMAS = Path(__file__).resolve().parents[3] / "shared" / "schemas"
KAI_CRD = SCHEMAS / "kai-scheduler" / "scheduling.run.ai_queues.yaml"
VOLCANO_CRD = SCHEMAS / "volcano" / "scheduling.volcano.sh_queues.yaml"
CRDS = {"kai": KAI_CRD, "volcano": VOLCANO_CRD}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler-queues"
YAML = {"Content-Type": "application/yaml"}


@pytest.fixture
def demo_db(db_url: str, tmp_path: Path) -> Iterator[Database]:
    db = Database(db_url)
    db.upgrade()
    settings = Settings(
        db_url=db_url, data_dir=tmp_path, demo=True, reconcile=False, admin_token="a" * 24
    )
    seed_demo(db, settings)
    yield db
    db.dispose()


def _queues(text: str) -> dict[str, dict]:  # type: ignore[type-arg]
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d}


@pytest.mark.parametrize("scheduler", ["kai", "volcano"])
def test_demo_export_validates_against_the_upstream_crd(demo_db: Database, scheduler: str) -> None:
    with demo_db.sessions() as session:
        text = export_queues(session, scheduler)
        tenant_text = export_queues(session, scheduler, "initech-apps")
    queues = _queues(text)
    validate_against_crd(queues.values(), CRDS[scheduler])
    # every cohort and cluster queue of the demo, the hierarchy as in Kueue
    assert set(queues) >= {"demo-cloud", "acme-ai", "acme-ai-h100", "initech-apps-a100-mig"}
    parent = "parentQueue" if scheduler == "kai" else "parent"
    assert queues["acme-ai-h100"]["spec"][parent] == "acme-ai"
    assert queues["acme-ai"]["spec"][parent] == "demo-cloud"
    assert parent not in queues["demo-cloud"]["spec"]
    # a tenant's export: its queues and the cohorts above them, nobody else's queues
    assert set(_queues(tenant_text)) == {
        "demo-cloud",
        "initech-apps",
        "initech-apps-a100-mig",
        "initech-apps-l40s",
    }


def test_kai_export_counts_as_kai_does(demo_db: Database) -> None:
    with demo_db.sessions() as session:
        queues = _queues(export_queues(session, "kai"))
    mig = queues["initech-apps-a100-mig"]["spec"]["resources"]
    # KAI's GetGpusQuota: a mig-<g>g.<m>gb instance is g GPUs: 560x1 + 24x2 + 24x3
    assert mig["gpu"] == {"quota": 680, "limit": -1, "overQuotaWeight": 1}
    assert mig["cpu"]["quota"] == 1536 * 1000  # millicores
    assert mig["memory"]["quota"] == pytest.approx(12 * 2**40 / 10**6)  # megabytes
    # the tenant's cohort guarantees its queues' quota and caps them at quota + borrowing
    acme = queues["acme-ai"]["spec"]["resources"]
    assert acme["gpu"] == {"quota": 128 + 64, "limit": 128 + 64 + 64 + 32, "overQuotaWeight": 1}
    assert queues["demo-cloud"]["spec"]["resources"]["gpu"]["limit"] == -1  # the root


def test_volcano_export_keeps_resource_names(demo_db: Database) -> None:
    with demo_db.sessions() as session:
        queues = _queues(export_queues(session, "volcano"))
    mig = queues["initech-apps-a100-mig"]["spec"]
    assert mig["deserved"]["nvidia.com/mig-3g.40gb"] == "24"
    assert "capability" not in mig  # borrowing is unlimited within its cohort
    acme = queues["acme-ai"]["spec"]
    assert acme["deserved"]["nvidia.com/gpu"] == "192"
    assert acme["capability"]["nvidia.com/gpu"] == "288"


def _import(api: Api, scheduler: str, text: str, **params: str) -> dict:  # type: ignore[type-arg]
    response = api.post(f"/v1/{scheduler}/import", params=params, content=text, headers=YAML)
    assert response.status_code == 200, response.text
    return response.json()


def _refused(api: Api, scheduler: str, text: str, **params: str) -> str:
    response = api.post(f"/v1/{scheduler}/import", params=params, content=text, headers=YAML)
    assert response.status_code == 422, response.text
    return str(response.json()["detail"])


def test_kai_sample_imports(api: Api) -> None:
    api.post("/v1/flavors", json={"name": "gpu", "spec": {}})
    text = (FIXTURES / "kai-default-queues.yaml").read_text()
    done = _import(api, "kai", text, flavor="gpu")
    assert done["created"] == ["Cohort default-parent-queue", "ClusterQueue default-queue"]
    cq = api.get("/v1/cluster-queues/default-queue").json()["spec"]
    assert cq["cohortName"] == "default-parent-queue"
    quotas = cq["resourceGroups"][0]["flavors"][0]["resources"]
    assert {q["name"]: q["nominalQuota"] for q in quotas} == {
        "cpu": "0",
        "memory": "0",
        "nvidia.com/gpu": "0",
    }
    assert all("borrowingLimit" not in q for q in quotas)  # limit -1: unlimited
    again = _import(api, "kai", text, flavor="gpu")
    assert again["created"] == [] and len(again["unchanged"]) == 2


def test_volcano_sample_imports(api: Api) -> None:
    api.post("/v1/flavors", json={"name": "cpu", "spec": {}})
    text = (FIXTURES / "volcano-capacity-queues.yaml").read_text()
    done = _import(api, "volcano", text, flavor="cpu", cohort="cluster")
    assert done["created"] == ["ClusterQueue queue1", "ClusterQueue queue2"]
    cq = api.get("/v1/cluster-queues/queue2").json()["spec"]
    assert cq["cohortName"] == "cluster"  # top-level queues share through root in Volcano
    quotas = cq["resourceGroups"][0]["flavors"][0]["resources"]
    assert {q["name"]: q["nominalQuota"] for q in quotas} == {"cpu": "6", "memory": "24Gi"}


@pytest.mark.parametrize(
    ("scheduler", "fixture", "field"),
    [
        ("kai", "kai-limited-queue.yaml", "spec.resources.cpu.quota"),
        ("volcano", "volcano-deployment-queue.yaml", "spec.reclaimable"),
        ("volcano", "volcano-hierarchy-annotations.yaml", "volcano.sh/hierarchy"),
    ],
)
def test_upstream_samples_that_do_not_map_are_refused_by_field(
    api: Api, scheduler: str, fixture: str, field: str
) -> None:
    detail = _refused(api, scheduler, (FIXTURES / fixture).read_text(), flavor="gpu")
    assert field in detail and "no Kueue equivalent" in detail
    assert api.get("/v1/cluster-queues").json()["items"] == []  # nothing half-written


KAI_BAD = {
    "spec.resources.gpu.overQuotaWeight": "cpu: {quota: 1000, overQuotaWeight: 1}\n"
    "    gpu: {quota: 1, overQuotaWeight: 2}",
    "spec.resources.gpu.quota": "gpu: {quota: 0.5}",
    "spec.resources.gpu.limit": "gpu: {quota: 4, limit: 2}",
    "spec.resources.storage": "storage: {quota: 1}",
}


@pytest.mark.parametrize("field", sorted(KAI_BAD))
def test_kai_fields_without_kueue_equivalent_are_refused(api: Api, field: str) -> None:
    text = (
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: team}\n"
        f"spec:\n  parentQueue: org\n  resources:\n    {KAI_BAD[field]}\n"
    )
    assert field in _refused(api, "kai", text, flavor="gpu")


@pytest.mark.parametrize("key", ["priority: 200", "displayName: Team", "preemptMinRuntime: 1m"])
def test_kai_spec_fields_are_refused(api: Api, key: str) -> None:
    text = (
        f"apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {{name: team}}\nspec: {{{key}}}"
    )
    detail = _refused(api, "kai", text)
    assert f"spec.{key.split(':')[0]}" in detail and "no Kueue equivalent" in detail


def test_quota_needs_a_flavor(api: Api) -> None:
    text = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: t}\n"
    text += "spec: {resources: {gpu: {quota: 2}}}"
    assert "flavor" in _refused(api, "kai", text)


CONFIG = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec:
  parentName: org
  resourceGroups:
    - coveredResources: [cpu, memory, nvidia.com/gpu]
      flavors:
        - name: h100
          resources:
            - {name: cpu, nominalQuota: "8", borrowingLimit: "4"}
            - {name: memory, nominalQuota: 64Gi, borrowingLimit: 32Gi}
            - {name: nvidia.com/gpu, nominalQuota: 2, borrowingLimit: 2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: vision}
spec:
  cohortName: research
  queueingStrategy: BestEffortFIFO
  preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}
  fairSharing: {weight: "2"}
  resourceGroups:
    - coveredResources: [cpu, memory, nvidia.com/gpu]
      flavors:
        - name: h100
          resources:
            - {name: cpu, nominalQuota: "96", borrowingLimit: "32"}
            - {name: memory, nominalQuota: 1Ti, borrowingLimit: 512Gi}
            - {name: nvidia.com/gpu, nominalQuota: 16, borrowingLimit: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: default, namespace: acme}
spec: {clusterQueue: vision}
"""


@pytest.mark.parametrize("scheduler", ["kai", "volcano"])
def test_round_trip_where_it_maps(api: Api, scheduler: str) -> None:
    """Kueue -> KAI/Volcano -> Kueue gives the same objects (one flavor, gpu/cpu/memory)."""
    api.post("/v1/tenants", json={"name": "acme"})
    assert api.post("/v1/kueue/import", content=CONFIG, headers=YAML).status_code == 200
    before = api.get("/v1/kueue/export").text
    exported = api.get(f"/v1/{scheduler}/export")
    assert exported.status_code == 200
    validate_against_crd(_queues(exported.text).values(), CRDS[scheduler])
    done = _import(api, scheduler, exported.text, flavor="h100")
    assert done["created"] == [] and done["updated"] == [], done
    assert sorted(done["unchanged"]) == [
        "ClusterQueue vision",
        "Cohort acme",  # the tenant's root cohort, as its terms made it
        "Cohort org",
        "Cohort research",
        "LocalQueue acme/default",
    ]
    assert api.get("/v1/kueue/export").text == before


def test_export_is_the_providers(api: Api) -> None:
    assert api.as_(None).get("/v1/kai/export").status_code == 401
    assert api.get("/v1/volcano/export", params={"tenant": "nobody"}).status_code == 404


def test_top_level_kai_queues_share_only_through_a_named_cohort(api: Api) -> None:
    """KAI lets a top-level queue use more than its quota; Kueue borrows only in a cohort."""
    api.post("/v1/flavors", json={"name": "gpu", "spec": {}})
    text = (
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: research-team}\n"
        "spec: {resources: {cpu: {quota: 1000, limit: 2000}, gpu: {quota: 1, limit: 2}}}"
    )  # KAI's docs/queues/README.md "Basic Queue", displayName left out
    detail = _refused(api, "kai", text, flavor="gpu")
    assert "spec.resources.cpu.limit" in detail and "cohort=NAME" in detail
    _import(api, "kai", text, flavor="gpu", cohort="cluster")
    cq = api.get("/v1/cluster-queues/research-team").json()["spec"]
    assert cq["cohortName"] == "cluster"
    quotas = {q["name"]: q for q in cq["resourceGroups"][0]["flavors"][0]["resources"]}
    assert quotas["cpu"] == {"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}
    assert quotas["nvidia.com/gpu"]["borrowingLimit"] == "1"


def test_top_level_volcano_queue_without_capability_needs_a_cohort(api: Api) -> None:
    """Volcano's sample queues have no capability (up to the cluster): without a cohort for
    them that sharing has no Kueue equivalent, and the import says which field."""
    api.post("/v1/flavors", json={"name": "cpu", "spec": {}})
    text = (FIXTURES / "volcano-capacity-queues.yaml").read_text()
    detail = _refused(api, "volcano", text, flavor="cpu")
    assert "Queue queue1: spec.capability.cpu" in detail and "cohort=NAME" in detail
