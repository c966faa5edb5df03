"""MIG slices and GPU shares are charged by their real size (Kueue #10108)."""

from __future__ import annotations

import pytest
from admission_builders import make_gov
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.engine.admission import AdmissionEngine
from gpuaas.engine.admission.gpu_size import GPU_MILLI, gpu_milli, mig_milli
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    ClusterQueue,
    FlavorQuotas,
    ResourceGroup,
    ResourceQuota,
)
from gpuaas.sim.scenario import parse_scenario, run_scenario
from gpuaas.supply.mig import profile_table, slice_totals

MIG_1G = "nvidia.com/mig-1g.10gb"


def gpu_cq(name: str, quotas: dict[str, int]) -> ClusterQueue:
    group = ResourceGroup(
        tuple(quotas),
        (FlavorQuotas("gpu", tuple(ResourceQuota(r, n) for r, n in quotas.items())),),
    )
    return ClusterQueue(name, (group,))


def pod(
    name: str, requests: dict[str, int], count: int = 1, created: float = 0.0
) -> AdmissionWorkload:
    return AdmissionWorkload(
        name, "ns/a", (AdmissionPodSet("main", count, requests),), created=created
    )


def test_sizes_follow_compute_slices() -> None:
    assert mig_milli("nvidia.com/mig-1g.10gb") == 142
    assert mig_milli("nvidia.com/mig-1g.10gb.me") == 142
    assert mig_milli("nvidia.com/mig-1g.20gb") == 142
    assert mig_milli("nvidia.com/mig-3g.40gb") == 428
    assert mig_milli("nvidia.com/mig-4g.40gb") == 571
    assert mig_milli("nvidia.com/mig-7g.80gb") == 1000
    assert mig_milli("nvidia.com/mig-2g.99gb") == 285  # unknown memory: NVIDIA's "<n>g." name
    assert gpu_milli({"nvidia.com/gpu": 2, "cpu": 4000}) == 2000
    assert gpu_milli({GPU_MILLI: 250}) == 250
    assert gpu_milli({MIG_1G: 3}) == 426


def test_unknown_profile_is_an_error_naming_the_field() -> None:
    with pytest.raises(InvalidValue, match=r"w: main\.nvidia\.com/mig-huge.*unknown MIG profile"):
        gpu_milli({"nvidia.com/mig-huge": 1}, "w: main")


@given(st.sampled_from(sorted({(p.name, gpu) for gpu, ps in profile_table().items() for p in ps})))
def test_a_gpus_worth_of_instances_never_costs_more_than_a_gpu(case: tuple[str, str]) -> None:
    profile, gpu = case
    size = mig_milli(profile)
    compute = int(profile.split("g.")[0])
    total = slice_totals()[gpu][1]  # 7 compute slices, the A30's 4
    assert size * (total // compute) <= 1000
    assert size > 0


def test_seven_1g_pods_fit_a_quota_of_one_gpu() -> None:
    engine = AdmissionEngine(make_gov([gpu_cq("a", {GPU_MILLI: 1000})]))
    for i in range(8):
        engine.submit(pod(f"w{i}", {MIG_1G: 1}))
    engine.run(0)
    assert sorted(engine.admitted) == [f"w{i}" for i in range(7)]
    assert engine.tree.cqs["a"].usage[("gpu", GPU_MILLI)] == 7 * 142
    assert "gpuaas.io/gpu-milli" in engine.reasons["w7"]


def test_kueue_charges_each_slice_as_a_device() -> None:
    # a ClusterQueue without gpu-milli keeps Kueue's behaviour: 1 means one instance
    engine = AdmissionEngine(make_gov([gpu_cq("a", {MIG_1G: 1})]))
    for i in range(7):
        engine.submit(pod(f"w{i}", {MIG_1G: 1}))
    engine.run(0)
    assert sorted(engine.admitted) == ["w0"]


def test_shares_and_whole_gpus_share_one_quota() -> None:
    engine = AdmissionEngine(make_gov([gpu_cq("a", {GPU_MILLI: 2000})]))
    engine.submit(pod("whole", {"nvidia.com/gpu": 1}))
    engine.submit(pod("quarters", {GPU_MILLI: 250}, count=4, created=1))
    engine.submit(pod("one-more", {GPU_MILLI: 250}, created=2))
    engine.run(0)
    assert sorted(engine.admitted) == ["quarters", "whole"]
    assert engine.pending_names() == ["one-more"]


def test_device_count_is_capped_too_when_covered() -> None:
    engine = AdmissionEngine(make_gov([gpu_cq("a", {GPU_MILLI: 7000, MIG_1G: 2})]))
    for i in range(3):
        engine.submit(pod(f"w{i}", {MIG_1G: 1}))
    engine.run(0)
    assert sorted(engine.admitted) == ["w0", "w1"]
    assert engine.admitted["w0"].usage == {("gpu", GPU_MILLI): 142, ("gpu", MIG_1G): 1}


def test_unknown_profile_is_rejected_at_submit() -> None:
    engine = AdmissionEngine(make_gov([gpu_cq("a", {GPU_MILLI: 1000})]))
    with pytest.raises(InvalidValue, match=r"workload w: podSets\.main\.requests"):
        engine.submit(pod("w", {"nvidia.com/mig-bogus": 1}))


SCENARIO = f"""
name: mig-by-size
objects:
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: ResourceFlavor
    metadata: {{name: h100-mig}}
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {{name: cq}}
    spec:
      resourceGroups:
        - coveredResources: [{GPU_MILLI}]
          flavors:
            - name: h100-mig
              resources: [{{name: {GPU_MILLI}, nominalQuota: "1000"}}]
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {{name: lq, namespace: ns}}
    spec: {{clusterQueue: cq}}
workloads:
""" + "".join(
    f"""
  - name: w{i}
    queue: ns/lq
    created: {i}
    podSets: [{{name: main, count: 1, requests: {{{MIG_1G}: "1"}}}}]
"""
    for i in range(8)
)


def test_scenario_file_charges_mig_by_size() -> None:
    outcome = run_scenario(parse_scenario(__import__("yaml").safe_load(SCENARIO)))
    assert sorted(outcome.admitted) == [f"w{i}" for i in range(7)]
    assert outcome.admitted["w0"] == {"main": {GPU_MILLI: "h100-mig"}}
    assert outcome.pending == ["w7"]


def test_a30_profiles_are_charged_in_quarters() -> None:
    """The A30 has 4 compute slices: a 1g.6gb is a quarter of a GPU, not a seventh."""
    assert mig_milli("nvidia.com/mig-1g.6gb") == 250
    assert mig_milli("2g.12gb") == 500
    assert mig_milli("nvidia.com/mig-4g.24gb") == 1000
    assert mig_milli("nvidia.com/mig-1g.12gb") == 142  # H20's, of 7
