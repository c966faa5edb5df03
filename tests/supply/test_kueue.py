"""Kueue v1beta2 import/export: round trips, CRD schema validation, rejections by name."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.governance import (
    BorrowWithinCohortPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from gpuaas.supply.kueue import (
    dump_yaml,
    export_objects,
    load_objects,
    load_yaml,
    validate_against_schema,
)

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
SCHEMAS = SHARED / "schemas" / "kueue"
SCENARIOS = SHARED / "conformance" / "scenarios"

FULL = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  nodeTaints:
    - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
  tolerations:
    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
spec:
  fairSharing: {weight: "2"}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors:
        - name: h100
          resources:
            - {name: nvidia.com/gpu, nominalQuota: "8"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: ai-lab}
spec:
  parentName: org
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  cohortName: ai-lab
  queueingStrategy: StrictFIFO
  fairSharing: {weight: 500m}
  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: MayStopSearch}
  preemption:
    withinClusterQueue: LowerOrNewerEqualPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  resourceGroups:
    - coveredResources: [cpu, memory]
      flavors:
        - name: default
          resources:
            - {name: cpu, nominalQuota: "64", borrowingLimit: "16", lendingLimit: "32"}
            - {name: memory, nominalQuota: 512Gi}
    - coveredResources: [nvidia.com/gpu]
      flavors:
        - name: h100
          resources:
            - {name: nvidia.com/gpu, nominalQuota: "16", lendingLimit: "4"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: team-a}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
description: production training
"""


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(FULL) if d]


def _norm(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _norm(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return [_norm(x) for x in obj]
    return obj


def _need_schemas() -> None:
    if not SCHEMAS.is_dir():
        pytest.skip(f"Kueue CRD schemas not found at {SCHEMAS}")


def test_full_configuration_is_understood() -> None:
    gov = load_objects(_docs())
    cq = gov.cluster_queues["team-a"]
    assert cq.queueing_strategy == QueueingStrategy.STRICT_FIFO
    assert cq.preemption.within_cluster_queue == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
    assert cq.preemption.reclaim_within_cohort == ReclaimWithinCohort.ANY
    assert cq.preemption.borrow_within_cohort == BorrowWithinCohortPolicy.LOWER_PRIORITY
    assert cq.preemption.max_priority_threshold == 100
    assert float(cq.weight) == 0.5
    cpu = cq.resource_groups[0].flavors[0].resources[0]
    assert (cpu.nominal, cpu.borrowing_limit, cpu.lending_limit) == (64_000, 16_000, 32_000)
    assert cq.resource_groups[0].flavors[0].resources[1].nominal == 512 * 2**30
    assert gov.cohorts["ai-lab"].parent == "org"
    assert gov.local_queues["team-a/main"].cluster_queue == "team-a"
    assert gov.priority_classes["high"].value == 1000
    assert gov.flavors["h100"].node_taints[0].key == "nvidia.com/gpu"


def test_round_trip_is_unchanged_and_schema_valid() -> None:
    docs = _docs()
    exported = export_objects(load_objects(docs))
    assert sorted(map(repr, map(_norm, exported))) == sorted(map(repr, map(_norm, docs)))
    _need_schemas()
    validate_against_schema(exported, SCHEMAS)
    again = load_objects(yaml.safe_load_all(dump_yaml(load_objects(docs))))
    assert again == load_objects(docs)


def test_conformance_objects_round_trip() -> None:
    files = sorted(SCENARIOS.glob("*.yaml")) if SCENARIOS.is_dir() else []
    if not files:
        pytest.skip(f"no conformance scenarios at {SCENARIOS}")
    _need_schemas()
    for path in files:
        objects = yaml.safe_load(path.read_text())["objects"]
        exported = export_objects(load_objects(objects))
        assert sorted(map(repr, map(_norm, exported))) == sorted(map(repr, map(_norm, objects))), (
            path.name
        )
        validate_against_schema(exported, SCHEMAS)


def test_schema_validation_catches_a_bad_object() -> None:
    _need_schemas()
    exported = export_objects(load_objects(_docs()))
    bad = copy.deepcopy(exported)
    cq = next(o for o in bad if o["kind"] == "ClusterQueue")
    cq["spec"]["queueingStrategy"] = "Lottery"
    with pytest.raises(InvalidValue, match=r"ClusterQueue team-a: spec\.queueingStrategy"):
        validate_against_schema(bad, SCHEMAS)


def _mutate(kind: str, name: str, change: Any) -> list[dict[str, Any]]:
    docs = _docs()
    target = next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
    change(target)
    return docs


@pytest.mark.parametrize(
    ("kind", "name", "change", "message"),
    [
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"]["resourceGroups"][1]["flavors"][0].update(name="b200"),
            r"ClusterQueue team-a: spec.resourceGroups\[1\].flavors\[0\].name: unknown "
            r"ResourceFlavor 'b200'",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(
                nominalQuota="-1"
            ),
            r"ClusterQueue team-a: spec.resourceGroups\[0\].flavors\[0\].resources\[0\]"
            r".nominalQuota: must not be negative",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"]["flavorFungibility"].update(preference="PreemptionOverBorrowing"),
            r"ClusterQueue team-a: spec.flavorFungibility.preference: can only be set when both "
            r"whenCanBorrow and whenCanPreempt are TryNextFlavor",
        ),
        (
            "Cohort",
            "org",
            lambda d: d["spec"].update(parentName="ai-lab"),
            r"spec.parentName: cycle in the cohort tree",
        ),
        (
            "LocalQueue",
            "main",
            lambda d: d["spec"].update(clusterQueue="team-z"),
            r"LocalQueue team-a/main: spec.clusterQueue: ClusterQueue 'team-z' does not exist",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"].update(admissionChecksStrategy={"admissionChecks": []}),
            r"ClusterQueue team-a: spec.admissionChecksStrategy: field 'admissionChecksStrategy' "
            r"is not supported",
        ),
        (
            "ResourceFlavor",
            "h100",
            lambda d: d["spec"].update(topologyName="default"),
            r"ResourceFlavor h100: spec.topologyName: Topology 'default' does not exist",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["metadata"].update(labels={"team": "a"}),
            r"ClusterQueue team-a: metadata.labels: field 'labels' is not supported",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"].update(stopPolicy="Hold"),
            r"ClusterQueue team-a: spec.stopPolicy: 'Hold' is not supported",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d.update(apiVersion="kueue.x-k8s.io/v1"),
            r"ClusterQueue team-a: apiVersion: 'kueue.x-k8s.io/v1' is not supported: Kueue API "
            r"versions read are kueue.x-k8s.io/v1beta2, kueue.x-k8s.io/v1beta1",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"]["preemption"].update(withinClusterQueue="Sometimes"),
            r"spec.preemption.withinClusterQueue: 'Sometimes' is not one of",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(
                lendingLimit="65"
            ),
            r"lendingLimit: must not exceed nominalQuota",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"]["resourceGroups"][0]["coveredResources"].append("../../etc"),
            r"coveredResources\[\d\]: '../../etc' is not a resource name",
        ),
        (
            "ClusterQueue",
            "team-a",
            lambda d: d["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(
                name="gpu/../x"
            ),
            r"resources\[0\].name: 'gpu/../x' is not a resource name",
        ),
    ],
)
def test_bad_objects_are_rejected_by_name(kind: str, name: str, change: Any, message: str) -> None:
    with pytest.raises(InvalidValue, match=message):
        load_objects(_mutate(kind, name, change))


def test_duplicate_and_unknown_kind() -> None:
    docs = _docs()
    with pytest.raises(InvalidValue, match="ResourceFlavor default: defined twice"):
        load_objects([*docs, docs[1]])
    with pytest.raises(InvalidValue, match="'AdmissionCheck' is not supported"):
        load_objects(
            [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {}}]
        )


def test_load_yaml_names_the_file(tmp_path: Path) -> None:
    good = tmp_path / "kueue.yaml"
    good.write_text(FULL)
    assert "team-a" in load_yaml(good).cluster_queues
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed")
    with pytest.raises(GpuaasError, match=r"bad.yaml: not valid YAML"):
        load_yaml(bad)
    with pytest.raises(GpuaasError, match=r"missing.yaml: cannot read"):
        load_yaml(tmp_path / "missing.yaml")


PROFILE = """
---
apiVersion: gpuaas.io/v1
kind: HardwareProfile
metadata: {name: h100-1x}
spec:
  displayName: 1x H100
  description: one GPU for notebooks
  localQueue: main
  allowedTenants: [team-a]
  resources:
    - {name: nvidia.com/gpu, min: "1", default: "1", max: "2"}
    - {name: memory, min: 8Gi, default: 64Gi}
"""


def test_hardware_profiles_load_next_to_kueue_objects_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "all.yaml"
    path.write_text(FULL + PROFILE)
    gov = load_yaml(path)
    profile = gov.hardware_profiles["h100-1x"]
    assert profile.queue_for("team-a") == "team-a/main"
    assert [(r.name, r.minimum, r.default, r.maximum) for r in profile.resources] == [
        ("nvidia.com/gpu", 1, 1, 2),
        ("memory", 8 * 2**30, 64 * 2**30, None),
    ]
    exported = export_objects(gov)
    assert exported[-1]["apiVersion"] == "gpuaas.io/v1"
    assert load_objects(yaml.safe_load_all(dump_yaml(gov))) == gov
    _need_schemas()
    validate_against_schema(exported, SCHEMAS)  # Kueue's objects are checked, ours skipped


def test_hardware_profile_pointing_nowhere_names_the_file_object_and_field(
    tmp_path: Path,
) -> None:
    path = tmp_path / "all.yaml"
    path.write_text(FULL + PROFILE.replace("localQueue: main", "localQueue: gone"))
    with pytest.raises(
        InvalidValue, match=r"all\.yaml: HardwareProfile h100-1x: spec\.localQueue.*team-a/gone"
    ):
        load_yaml(path)
