"""Invariant of the KAI and Volcano conversions: a one-flavor governance of cpu, memory and
whole GPUs goes out as scheduler queues and comes back as the same cohorts and cluster queues."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.supply.kai import kai_queues, read_kai_queues
from gpuaas.supply.kueue import load_objects
from gpuaas.supply.queue_tree import kueue_documents, queue_tree
from gpuaas.supply.volcano import read_volcano_queues, volcano_queues

API = "kueue.x-k8s.io/v1beta2"
RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
UNITS = {"cpu": "", "memory": "Gi", "nvidia.com/gpu": ""}


def quota(draw: Any, *, cohort: bool) -> list[dict[str, Any]]:
    out = []
    for r in RESOURCES:
        entry: dict[str, Any] = {
            "name": r,
            "nominalQuota": f"{0 if cohort else draw(st.integers(0, 64))}{UNITS[r]}",
        }
        limit = draw(st.none() | st.integers(0, 32))
        if limit is not None:
            entry["borrowingLimit"] = f"{limit}{UNITS[r]}"
        out.append(entry)
    return out


def groups(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"coveredResources": list(RESOURCES), "flavors": [{"name": "f", "resources": entries}]}]


@st.composite
def governance(draw: Any) -> list[dict[str, Any]]:
    """A root cohort, one to three child cohorts with borrowing limits, queues under them."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "f"}, "spec": {}},
        {"apiVersion": API, "kind": "Cohort", "metadata": {"name": "root-co"}, "spec": {}},
    ]
    for c in range(draw(st.integers(1, 3))):
        spec: dict[str, Any] = {"parentName": "root-co"}
        if draw(st.booleans()):
            spec["resourceGroups"] = groups(quota(draw, cohort=True))
        docs.append(
            {"apiVersion": API, "kind": "Cohort", "metadata": {"name": f"co{c}"}, "spec": spec}
        )
        for q in range(draw(st.integers(1, 3))):
            cq: dict[str, Any] = {
                "cohortName": f"co{c}",
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                "resourceGroups": groups(quota(draw, cohort=False)),
            }
            weight = draw(st.sampled_from([None, 2, 3]))
            if weight is not None:
                cq["fairSharing"] = {"weight": str(weight)}
            name = f"co{c}-q{q}"
            docs.append(
                {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": cq}
            )
    return docs


def held(amounts: dict[str, int]) -> dict[str, int]:
    """Amounts without the zeros (a resource with no quota is one not listed)."""
    return {r: a for r, a in amounts.items() if a}


@settings(max_examples=60, deadline=None)
@given(governance())
def test_out_and_back_is_the_same_governance(docs: list[dict[str, Any]]) -> None:
    before = load_objects(docs)
    tree = queue_tree(before)
    for queues, read in (
        (kai_queues(tree), read_kai_queues),
        (volcano_queues(tree), read_volcano_queues),
    ):
        back = load_objects([docs[0], *kueue_documents(read(queues, "test"), "f")])
        assert queue_tree(back).keys() == tree.keys()
        for name, node in queue_tree(back).items():
            was = tree[name]
            assert (node.kind, node.parent, held(node.subtree)) == (
                was.kind,
                was.parent,
                held(was.subtree),
            )
            # a queue with no quota of r that may not borrow it does not cover r: both say so
            covered = {r for r, a in was.nominal.items() if a} | {
                r for r, b in was.borrowing.items() if b != 0 or was.kind == "Cohort"
            }
            assert {r: node.borrowing.get(r) for r in covered} == {
                r: was.borrowing.get(r) for r in covered
            }, name
        assert {n: q.fair_sharing_weight for n, q in back.cluster_queues.items()} == {
            n: q.fair_sharing_weight for n, q in before.cluster_queues.items()
        }
