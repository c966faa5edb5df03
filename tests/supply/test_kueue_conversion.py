"""Kueue v1beta1 / v1alpha1 objects converted to v1beta2 as Kueue converts them; Topology."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import FungibilityPolicy
from gpuaas.model.topology import Level
from gpuaas.supply.kueue import (
    export_objects,
    load_objects,
    same_object,
    validate_against_schema,
)
from gpuaas.supply.kueue_conversion import to_v1beta2

SCHEMAS = Path(__file__).resolve().parents[2] / ".." / "shared" / "schemas" / "kueue"

V1BETA1 = """
apiVersion: kueue.x-k8s.io/v1alpha1
kind: Topology
metadata: {name: gke}
spec:
  levels:
    - nodeLabel: cloud.google.com/gce-topology-block
    - nodeLabel: cloud.google.com/gce-topology-subblock
    - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a3}
spec:
  nodeLabels: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}
  topologyName: gke
---
apiVersion: kueue.x-k8s.io/v1alpha1
kind: Cohort
metadata: {name: ai}
spec: {parent: org}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: org}
spec: {fairSharing: {weight: "2"}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: research}
spec:
  cohort: ai
  namespaceSelector: {}
  flavorFungibility: {whenCanBorrow: Borrow, whenCanPreempt: Preempt}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
    - coveredResources: [cpu, nvidia.com/gpu]
      flavors:
        - name: a3
          resources:
            - {name: cpu, nominalQuota: 3072}
            - {name: nvidia.com/gpu, nominalQuota: 16, borrowingLimit: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: team-a}
spec: {clusterQueue: research}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
"""


def _docs(text: str = V1BETA1) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _v1beta2_by_hand() -> list[dict[str, Any]]:
    """The same objects as Kueue's conversion writes them in v1beta2."""
    docs = _docs()
    for doc in docs:
        doc["apiVersion"] = "kueue.x-k8s.io/v1beta2"
    cohort, cq = docs[2], docs[4]
    cohort["spec"] = {"parentName": "org"}
    cq["spec"]["cohortName"] = cq["spec"].pop("cohort")
    cq["spec"]["flavorFungibility"] = {
        "whenCanBorrow": "MayStopSearch",
        "whenCanPreempt": "MayStopSearch",
    }
    return docs


def test_a_v1beta1_file_loads_as_its_v1beta2_conversion() -> None:
    gov = load_objects(_docs())
    assert gov == load_objects(_v1beta2_by_hand())
    cq = gov.cluster_queues["research"]
    assert cq.cohort == "ai"
    assert cq.flavor_fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
    assert cq.flavor_fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH
    assert gov.cohorts["ai"].parent == "org"
    assert gov.topologies["gke"].levels == (Level.BLOCK, Level.RACK, Level.HOSTNAME)
    assert gov.flavors["a3"].topology_name == "gke"
    exported = export_objects(gov)
    assert {d["apiVersion"] for d in exported} == {"kueue.x-k8s.io/v1beta2"}
    topology = next(d for d in exported if d["kind"] == "Topology")
    assert topology["spec"]["levels"][0] == {"nodeLabel": "cloud.google.com/gce-topology-block"}
    assert load_objects(exported) == gov
    if not SCHEMAS.is_dir():
        pytest.skip(f"{SCHEMAS} is absent (the shared Kueue CRD schemas are not checked out)")
    validate_against_schema(exported, SCHEMAS)  # Topology included


def test_conversion_copies_and_leaves_other_objects_alone() -> None:
    docs = _docs()
    before = copy.deepcopy(docs)
    converted = [to_v1beta2(d, f"doc[{i}]") for i, d in enumerate(docs)]
    assert docs == before  # the input is not touched
    assert converted[4]["spec"]["cohortName"] == "ai" and "cohort" not in converted[4]["spec"]
    assert to_v1beta2(converted[4], "again") == converted[4]  # v1beta2 passes unchanged
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
    assert to_v1beta2(job, "job") == job


def test_v1beta1_admission_checks_become_a_strategy_and_are_refused_as_written() -> None:
    docs = _docs()
    cq = docs[4]
    converted = to_v1beta2({**cq, "spec": {**cq["spec"], "admissionChecks": ["prov"]}}, "cq")
    assert converted["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "prov"}]}
    cq["spec"]["admissionChecks"] = ["prov"]
    with pytest.raises(InvalidValue) as caught:
        load_objects(docs)
    # named as the user wrote it, with the conversion said
    assert caught.value.field == "objects: ClusterQueue research: spec.admissionChecks"
    assert "is spec.admissionChecksStrategy in kueue.x-k8s.io/v1beta2" in caught.value.problem
    cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "other"}]}
    with pytest.raises(InvalidValue, match="cannot be set together with admissionChecksStrategy"):
        load_objects(docs)


@pytest.mark.parametrize(
    ("index", "change", "field", "message"),
    [
        (
            4,
            lambda s: s.update(cohort=""),
            "objects: ClusterQueue research: spec.cohort",
            None,
        ),
        (
            4,
            lambda s: s.update(cohortName="ai"),
            "objects: ClusterQueue research: spec.cohortName",
            "is not a kueue.x-k8s.io/v1beta1 field (in kueue.x-k8s.io/v1beta1 it is written "
            "'cohort')",
        ),
        (
            2,
            lambda s: s.update(parent="ai"),
            "objects: Cohort ai: spec.parent",
            "cycle in the cohort tree",
        ),
        (
            2,
            lambda s: s.update(parentName="org"),
            "objects: Cohort ai: spec.parentName",
            "is not a kueue.x-k8s.io/v1alpha1 field",
        ),
        (
            4,
            lambda s: s["flavorFungibility"].update(whenCanBorrow="Preempt"),
            "objects: ClusterQueue research: spec.flavorFungibility.whenCanBorrow",
            "'Preempt' is not one of",
        ),
    ],
)
def test_old_fields_are_named_as_written(
    index: int, change: Any, field: str, message: str | None
) -> None:
    docs = _docs()
    change(docs[index]["spec"])
    with pytest.raises(InvalidValue) as caught:
        load_objects(docs)
    if message is None:  # an empty cohort is no cohort; a borrowing limit then needs one
        assert "borrowingLimit/lendingLimit need a cohortName" in caught.value.problem
        return
    assert caught.value.field.startswith(field), caught.value.field
    assert message in caught.value.problem


def test_v1alpha1_serves_only_topology_and_cohort() -> None:
    docs = _docs()
    docs[1]["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    with pytest.raises(
        InvalidValue, match=r"ResourceFlavor is not a kueue\.x-k8s\.io/v1alpha1 kind"
    ):
        load_objects(docs)


@pytest.mark.parametrize(
    ("levels", "problem"),
    [
        ([], "must list 1 to 16 levels, got 0"),
        (["example.com/pod"], "'example.com/pod' is not a topology label gpuaas reads"),
        (
            ["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
            "cannot be inside 'kubernetes.io/hostname' (hostname)",
        ),
        (
            ["cloud.provider.com/topology-rack", "topology.gpuaas.io/rack"],
            "is the rack level, which 'cloud.provider.com/topology-rack' already is",
        ),
        (["kubernetes.io/hostname", "kubernetes.io/hostname"], "is listed twice"),
    ],
)
def test_topology_levels_must_be_gpuaas_levels_outside_in(levels: list[str], problem: str) -> None:
    docs = _docs()
    docs[0]["spec"]["levels"] = [{"nodeLabel": label} for label in levels]
    with pytest.raises(InvalidValue) as caught:
        load_objects(docs)
    assert caught.value.field.startswith("objects: Topology gke: spec.levels")
    assert problem in caught.value.problem


def test_every_gpuaas_level_and_cloud_label_is_a_topology_level() -> None:
    docs = _docs()
    docs[0]["spec"]["levels"] = [
        {"nodeLabel": label}
        for label in (
            "topology.kubernetes.io/zone",
            "topology.k8s.aws/network-node-layer-2",
            "topology.k8s.aws/network-node-layer-3",
            "nvidia.com/gpu.clique",
            "kubernetes.io/hostname",
        )
    ]
    assert load_objects(docs).topologies["gke"].levels == (
        Level.ZONE,
        Level.BLOCK,
        Level.RACK,
        Level.NVLINK,
        Level.HOSTNAME,
    )


def test_a_flavor_naming_no_topology_is_refused() -> None:
    docs = _docs()[1:]
    with pytest.raises(InvalidValue, match=r"ResourceFlavor a3: spec.topologyName: Topology 'gke'"):
        load_objects(docs)


def test_same_object_compares_quantities_by_amount() -> None:
    cq = to_v1beta2(_docs()[4], "cq")
    as_ki = copy.deepcopy(cq)
    as_ki["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "3Ki"
    assert same_object(cq, as_ki)
    assert same_object(_docs()[4], cq)  # a v1beta1 object and its conversion are one object
    more = copy.deepcopy(cq)
    more["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "3073"
    assert not same_object(cq, more)
    explicit = copy.deepcopy(cq)
    explicit["spec"]["queueingStrategy"] = "BestEffortFIFO"  # written out: a change of text
    assert not same_object(cq, explicit)
    assert not same_object(cq, {"kind": "ClusterQueue"})  # the other does not even load


@given(
    cohort=st.one_of(st.none(), st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)),
    borrow=st.sampled_from(["Borrow", "MayStopSearch", "TryNextFlavor"]),  # v1beta1's enums
    preempt=st.sampled_from(["Preempt", "MayStopSearch", "TryNextFlavor"]),
    checks=st.lists(st.from_regex(r"[a-z]{1,6}", fullmatch=True), max_size=3),
)
def test_conversion_of_a_v1beta1_cluster_queue(
    cohort: str | None, borrow: str, preempt: str, checks: list[str]
) -> None:
    """Every v1beta1 ClusterQueue spec converts to one with only v1beta2 names and values,
    loses nothing else, and converting again changes nothing."""
    spec: dict[str, Any] = {
        "flavorFungibility": {"whenCanBorrow": borrow, "whenCanPreempt": preempt},
        "admissionChecks": checks,
        "queueingStrategy": "StrictFIFO",
    }
    if cohort is not None:
        spec["cohort"] = cohort
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "spec": spec}
    out = to_v1beta2(obj, "cq")
    assert out["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert "cohort" not in out["spec"] and "admissionChecks" not in out["spec"]
    assert out["spec"].get("cohortName") == cohort
    fung = out["spec"]["flavorFungibility"]
    assert {fung["whenCanBorrow"], fung["whenCanPreempt"]} <= {"MayStopSearch", "TryNextFlavor"}
    assert (fung["whenCanBorrow"] == "TryNextFlavor") == (borrow == "TryNextFlavor")
    assert (fung["whenCanPreempt"] == "TryNextFlavor") == (preempt == "TryNextFlavor")
    strategy = out["spec"].get("admissionChecksStrategy", {}).get("admissionChecks", [])
    assert [c["name"] for c in strategy] == checks
    assert out["spec"]["queueingStrategy"] == "StrictFIFO"
    assert to_v1beta2(out, "again") == out
