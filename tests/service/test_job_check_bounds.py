"""The submission bounds never refuse a job the admission engine could admit.

Over random fleets, quotas (with a cohort, borrowing and lending limits) and jobs: whenever
:class:`SubmissionBounds` refuses a job, the engine, given the same nodes and governance and
nothing else running, does not admit it either. (The converse does not hold and is not claimed:
the bounds look at one resource at a time.)
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission.cycle import AdmissionEngine
from gpuaas.engine.admission.nodes import node_from_capacity
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    ClusterQueue,
    FlavorQuotas,
    Governance,
    LocalQueue,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)
from gpuaas.model.node import Node
from gpuaas.model.resources import CPU, NVIDIA_GPU
from gpuaas.service.job_checks import SubmissionBounds

FLAVORS = ("a", "b")
CORES = 1000


@st.composite
def nodes(draw: st.DrawFn) -> list[Node]:
    out = []
    for i in range(draw(st.integers(0, 4))):
        pool = draw(st.sampled_from(FLAVORS))
        capacity = {CPU: draw(st.integers(1, 64)) * CORES, NVIDIA_GPU: draw(st.integers(0, 8))}
        out.append(node_from_capacity(f"n{i}", {"pool": pool}, capacity))
    return out


def _quota(draw: st.DrawFn, name: str, lend: bool) -> ResourceQuota:
    return ResourceQuota(
        name,
        draw(st.integers(0, 16)) * (CORES if name == CPU else 1),
        borrowing_limit=draw(st.none() | st.integers(0, 8)),
        lending_limit=draw(st.none() | st.integers(0, 4)) if lend else None,
    )


@st.composite
def governance(draw: st.DrawFn) -> Governance:
    queues = {}
    for name in ("cq", "peer"):
        flavors = tuple(
            FlavorQuotas(f, (_quota(draw, CPU, False), _quota(draw, NVIDIA_GPU, name == "peer")))
            for f in draw(st.lists(st.sampled_from(FLAVORS), min_size=1, max_size=2, unique=True))
        )
        queues[name] = ClusterQueue(
            name,
            resource_groups=(ResourceGroup((CPU, NVIDIA_GPU), flavors),),
            cohort=draw(st.sampled_from([None, "team"])),
        )
    return Governance(
        flavors={f: ResourceFlavor(f, node_labels={"pool": f}) for f in FLAVORS},
        cluster_queues=queues,
        local_queues={"t/lq": LocalQueue("lq", "t", "cq")},
    )


@st.composite
def pod_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 2))):
        requests = {CPU: draw(st.integers(1, 80)) * CORES}
        gpus = draw(st.integers(0, 12))
        if gpus:
            requests[NVIDIA_GPU] = gpus
        out.append({"name": f"ps{i}", "count": draw(st.integers(1, 4)), "requests": requests})
    return out


@settings(max_examples=300, deadline=None)
@given(nodes(), governance(), pod_sets())
def test_a_refused_job_is_one_the_engine_would_never_admit(
    fleet: list[Node], gov: Governance, job: list[dict[str, Any]]
) -> None:
    try:
        SubmissionBounds(gov, fleet).check("t/lq", job)
    except InvalidValue:
        pass
    else:
        return
    engine = AdmissionEngine(gov, nodes=fleet) if fleet else AdmissionEngine(gov)
    workload = AdmissionWorkload(
        "job", "t/lq", tuple(AdmissionPodSet(p["name"], p["count"], p["requests"]) for p in job)
    )
    engine.submit(workload)
    engine.run(0.0)
    assert "job" not in engine.admitted
