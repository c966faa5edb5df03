"""The closed set of reason codes: each documented, each rendered from its fields, each stored and
read back unchanged; the sentences the engine showed before reasons were structured still read
the same."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.engine.reasons import (
    EVICTION_CODES,
    FIELDS,
    NO_PREEMPTION_POSSIBLE,
    PLACEMENT_CODES,
    REQUEUE_CODES,
    WAITING_FOR_QUOTA,
    Code,
    Reason,
    combine,
    evicted,
    placement_failed,
    quota_capacity_exceeded,
    unused_quota_short,
)

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
amounts = st.integers(min_value=0, max_value=10**12)
resources = st.sampled_from(
    ["nvidia.com/gpu", "gpuaas.io/gpu-milli", "cpu", "memory", "nvidia.com/mig-1g.10gb", "x/y"]
)
#: A sample value for every field a sentence reads (JSON values, as stored).
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "head": names,
    "cluster_queue": names,
    "user": names,
    "queue": names,
    "limit": st.one_of(amounts, st.floats(min_value=0, max_value=1e9, allow_nan=False)),
    "resource": resources,
    "flavor": names,
    "requested": amounts,
    "capacity": amounts,
    "needed": amounts,
    "cohort": st.none() | names,
    "lend": st.none() | amounts,
    "pod_set": names,
    "topology": names,
    "level": st.sampled_from(["rack", "block", "zone", "hostname", "nvlink"]),
    "models": st.lists(names, max_size=3),
    "selector": st.dictionaries(names, names, max_size=3),
    "instances": st.dictionaries(names, st.integers(1, 7), max_size=2),
    "nodes": st.one_of(st.integers(0, 10**5), st.lists(names, min_size=1, max_size=3)),
    "node": names,
    "free": amounts,
    "preemptor": names,
    "detail": st.text(max_size=40),
    "backend": names,
    "exit_code": st.integers(-64, 255),
    "cause": st.sampled_from(sorted(c.value for c in REQUEUE_CODES)),
    "flavors": st.lists(names, max_size=3),
    "provisioner": names,
    "cluster": names,
    "force": st.booleans(),
    "dataset": names,
    "warm": st.integers(0, 10**4),
    # the cluster autoscaler's
    "pool": names,
    "count": st.integers(0, 10**4),
    "jobs": st.lists(st.integers(1, 10**9), max_size=5),
    "wanted": st.integers(0, 10**4),
    "max": st.integers(0, 10**5),
    "min": st.integers(0, 10**5),
    "utilization": st.floats(min_value=0, max_value=100, allow_nan=False),
    "target": st.floats(min_value=0, max_value=100, allow_nan=False),
    "below": st.floats(min_value=0, max_value=100, allow_nan=False),
    "seconds": st.floats(min_value=0, max_value=1e7, allow_nan=False),
    "missing": st.integers(1, 10**4),
    # telemetry (service/dcgm_scrape.py)
    "url": st.sampled_from(["http://n1:9400/metrics", "https://10.0.0.7:9400/metrics"]),
    "unmatched": st.lists(names, max_size=3),
    "unreported": st.lists(names, max_size=3),
    # the idle pool
    "marketplace": st.text(max_size=20),
    "grace": st.floats(min_value=30, max_value=86400),
    # budgets: amounts as decimal text, as they are stored
    "budget": names,
    "scope": names,
    "amount": st.decimals(0, 10**9, places=2).map(str),
    "spent": st.decimals(0, 10**9, places=2).map(str),
    "currency": st.sampled_from(["USD", "EUR"]),
    "period": st.sampled_from(["2026-11", "2026-W48"]),
    "rate": st.decimals(0, 10**6, places=2).map(str),
    "cap": st.decimals(0, 10**6, places=2).map(str),
}
# the admission cycle's per-namespace placement budget (engine/admission/cycle.py)
FIELD_VALUES.update(
    {"namespace": names, "pods": st.integers(0, 10**6), "pods_budget": st.integers(1, 10**6)}
)
# an inference job's replicas (engine/replica_scaling.py)
FIELD_VALUES.update(
    {
        "current": st.integers(0, 10**4),
        "desired": st.integers(0, 10**4),
        "wanted": st.integers(0, 10**6),
        "utilization": st.none() | st.floats(min_value=0, max_value=100),
        "target": st.floats(min_value=0.5, max_value=100),
        "job": st.integers(1, 10**9),
        "from_cluster": st.just("") | names,
        "to_cluster": st.just("") | names,
        "clusters": st.lists(st.just("") | names, min_size=1, max_size=3),
    }
)
#: cluster codes whose ``nodes`` are node names, at least one
CLUSTER_NODE_CODES = (
    Code.CLUSTER_CARVED,
    Code.CLUSTER_READY,
    Code.CLUSTER_UNAPPLIED,
    Code.CLUSTER_DRAINING,
    Code.CLUSTER_RELEASED,
    Code.SCALED_IN_UNNEEDED,
    Code.POOL_SETTLED,
    Code.POOL_GRACE_STARTED,
    Code.POOL_EVICTING,
)


@st.composite
def reasons(draw: st.DrawFn, code: Code | None = None) -> Reason:
    code = code or draw(st.sampled_from(list(Code)))
    fields = {name: draw(FIELD_VALUES[name]) for name in FIELDS[code]}
    if code in (Code.NODE_DRAINED, Code.ADMITTED):  # node names (a drain names at least one)
        fields["nodes"] = draw(st.lists(names, min_size=code is Code.NODE_DRAINED, max_size=3))
    if code in CLUSTER_NODE_CODES:
        fields["nodes"] = draw(st.lists(names, min_size=1, max_size=3))
    if code is Code.NO_CANDIDATE_NODES:
        fields["nodes"] = draw(st.integers(0, 10**5))
    if code in PLACEMENT_CODES and draw(st.booleans()):  # a placement failure, maybe admission's
        fields["detail"] = draw(st.text(min_size=1, max_size=40))
        if draw(st.booleans()):
            fields["flavors"] = {draw(names): {draw(resources): draw(names)}}
    return Reason(code, fields)


def test_every_code_has_a_sentence_and_its_fields_named() -> None:
    assert set(FIELDS) == set(Code)
    assert set(Code) >= PLACEMENT_CODES | EVICTION_CODES | REQUEUE_CODES


def test_every_code_is_in_the_documented_table() -> None:
    text = ARCHITECTURE.read_text()
    documented = re.findall(r"^\| `([A-Za-z]+)` \|", text, flags=re.MULTILINE)
    assert sorted(documented) == sorted(c.value for c in Code)
    for code in Code:  # each row names the fields its sentence reads
        row = next(line for line in text.splitlines() if line.startswith(f"| `{code.value}` |"))
        for name in FIELDS[code]:
            assert f"`{name}`" in row, (code, name)


@given(st.data())
def test_every_code_renders_from_sample_fields_and_round_trips(data: st.DataObject) -> None:
    for code in Code:
        reason = data.draw(reasons(code))
        text = reason.render()
        assert isinstance(text, str) and text == str(reason)
        shown = reason.to_json()
        assert shown["code"] == code.value and shown["message"] == text
        stored = json.loads(json.dumps(reason.detail()))  # as a JSON column holds it
        back = Reason.stored(code.value, stored)
        assert back is not None and back.same(reason) and back.render() == text


@given(st.lists(reasons(), max_size=6))
def test_a_combined_reason_says_every_cause_once_in_order(parts: list[Reason]) -> None:
    combined = combine(parts, WAITING_FOR_QUOTA)
    if not parts:
        assert combined == WAITING_FOR_QUOTA
        return
    assert combined.code == parts[0].code
    texts: list[str] = []
    for part in parts:
        if part.render() not in texts:
            texts.append(part.render())
    assert combined.render() == "; ".join(texts)
    stored = json.loads(json.dumps(combined.detail()))
    back = Reason.stored(combined.code.value, stored)
    assert back is not None and back.render() == combined.render()
    assert back.detail() == combined.detail()
    causes = [(c["code"], c["fields"]) for c in stored.get("causes", [])]
    assert len(causes) == len(set(map(repr, causes)))  # each stored once


def test_the_sentences_read_as_before() -> None:
    assert quota_capacity_exceeded("cq", "h100", "nvidia.com/gpu", 12, 8).render() == (
        "insufficient quota for nvidia.com/gpu in flavor h100: 12 GPUs requested > 8 GPUs "
        "maximum capacity of ClusterQueue cq"
    )
    short = unused_quota_short("org", "h100", "gpuaas.io/gpu-milli", 1500, 0)
    assert short.render() == (
        "insufficient unused quota for gpuaas.io/gpu-milli in flavor h100: 1.5 GPUs more "
        "needed; cohort org has 0 GPUs to lend"
    )
    assert unused_quota_short(None, "f", "cpu", 2000, None).render() == (
        "insufficient unused quota for cpu in flavor f: 2 more needed"
    )
    assert short.plus(NO_PREEMPTION_POSSIBLE, NO_PREEMPTION_POSSIBLE).render() == (
        short.render() + "; no admitted workload may be preempted for it"
    )
    assert evicted(Code.IN_CLUSTER_QUEUE, "j2").render() == "evicted (InClusterQueue) to admit j2"
    assert evicted(Code.IN_COHORT_FAIR_SHARING).render() == "evicted (InCohortFairSharing)"
    service = Reason(Code.IN_COHORT_RECLAMATION, {"preemptor_job": "12"})
    assert service.render() == "preempted (InCohortReclamation) to admit job 12"
    on_nodes = placement_failed(
        Code.INSUFFICIENT_GPU, "workload w: 0/2 nodes fit: 2 insufficient GPU"
    )
    assert on_nodes.render() == "workload w: 0/2 nodes fit: 2 insufficient GPU"
    admission = on_nodes.with_fields(flavors={"main": {"cpu": "a"}})
    assert admission.render() == (
        "quota is available but the pods do not fit on the nodes of the assigned flavors "
        "(main: cpu=a): workload w: 0/2 nodes fit: 2 insufficient GPU"
    )


def test_the_hot_paths_positional_fields_read_as_named_ones() -> None:
    positional = quota_capacity_exceeded("cq", "h100", "nvidia.com/gpu", 12, 8)
    named = Reason(
        Code.QUOTA_CAPACITY_EXCEEDED,
        {"cluster_queue": "cq", "flavor": "h100", "resource": "nvidia.com/gpu", "requested": 12,
         "capacity": 8},
    )  # fmt: skip
    assert positional.fields == named.fields and positional.same(named)
    assert positional.render() == named.render() and positional.to_json() == named.to_json()
    assert not positional.same(quota_capacity_exceeded("cq", "h100", "nvidia.com/gpu", 12, 9))


def test_an_eviction_reason_must_be_an_eviction_code() -> None:
    with pytest.raises(ValueError, match="not an eviction code"):
        evicted(Code.NODE_DRAINED)


def test_an_unknown_stored_code_reads_as_nothing() -> None:
    assert Reason.stored("", None) is None
    assert Reason.stored("SomethingNewer", {"fields": {}}) is None
