# ruff: noqa: E501 (the tree builder reads best one statement to a line)
"""Per-tenant admitted usage never exceeds grant + what the provider lets the tenant borrow.

Random governance trees as the service builds them (gpuaas.service.tenancy): a provider cohort
``cloud`` (sometimes with a provider queue holding a pool of its own), tenants whose root
cohorts are derived from their terms by :func:`root_cohort_document` (grant, parent or none,
borrowing and lending limits), and inside each tenant's tree any ClusterQueues and sub-cohorts
the tenant likes: nominal quota carved from the grant, its own borrowing and lending limits,
every preemption policy and fair-sharing weight. Random streams of arrivals and completions run
through the admission engine; after every step each tenant's usage, summed from the admitted
workloads themselves, stays within its grant plus its borrowing limit (0 without a parent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission import AdmissionConfig, AdmissionEngine
from gpuaas.model.governance import AdmissionPodSet, AdmissionWorkload
from gpuaas.service.tenancy import root_cohort_document
from gpuaas.store.tables import Tenant
from gpuaas.supply.kueue import load_objects

KUEUE = "kueue.x-k8s.io/v1beta2"
FLAVORS = ("f1", "f2")
#: a whole-unit resource (cpu would be counted in milli-cores)
RES = "example.com/gpu"


def _doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _groups(quotas: dict[str, tuple[int, int | None, int | None]]) -> list[dict[str, Any]]:
    flavors = []
    for flavor, (nominal, borrow, lend) in quotas.items():
        entry: dict[str, Any] = {"name": RES, "nominalQuota": nominal}
        if borrow is not None:
            entry["borrowingLimit"] = borrow
        if lend is not None:
            entry["lendingLimit"] = lend
        flavors.append({"name": flavor, "resources": [entry]})
    return [{"coveredResources": [RES], "flavors": flavors}] if flavors else []


@dataclass
class World:
    documents: list[dict[str, Any]]
    limits: dict[str, dict[str, int]]  # tenant -> flavor -> grant + borrowing
    owner: dict[str, str] = field(default_factory=dict)  # ClusterQueue -> tenant ("" provider)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    docs = [_doc("ResourceFlavor", f, {}) for f in FLAVORS]
    docs.append(_doc("Cohort", "cloud", {}))
    owner: dict[str, str] = {}
    if draw(st.booleans()):  # the provider's own pool in cloud
        pool = {f: (draw(st.integers(0, 8)), None, None) for f in FLAVORS}
        docs.append(
            _doc("ClusterQueue", "pool", {"cohortName": "cloud", "resourceGroups": _groups(pool)})
        )
        owner["pool"] = ""
    limits: dict[str, dict[str, int]] = {}
    for t in range(draw(st.integers(1, 3))):
        name = f"t{t}"
        granted = draw(st.lists(st.sampled_from(FLAVORS), min_size=1, max_size=2, unique=True))
        grant = {f: draw(st.integers(0, 8)) for f in granted}
        parent = draw(st.sampled_from(["cloud", None]))
        borrowing = {f: draw(st.integers(0, 4)) for f in granted} if parent else {}
        lending = (
            {f: draw(st.integers(0, grant[f])) for f in granted if draw(st.booleans())}
            if parent
            else {}
        )
        left = dict(grant)
        owned: list[dict[str, Any]] = []
        cohorts = [name]
        for c in range(draw(st.integers(0, 2))):  # the tenant's own sub-cohorts
            quotas = {}
            for f in granted:
                nominal = draw(st.integers(0, left[f]))
                left[f] -= nominal
                quotas[f] = (nominal, draw(st.none() | st.integers(0, 4)), None)
            spec = {"parentName": draw(st.sampled_from(cohorts)), "resourceGroups": _groups(quotas)}
            weight = draw(st.none() | st.sampled_from(["0.5", "1", "1000"]))
            if weight:
                spec["fairSharing"] = {"weight": weight}
            owned.append(_doc("Cohort", f"{name}-c{c}", spec))
            cohorts.append(f"{name}-c{c}")
        for q in range(draw(st.integers(1, 3))):
            flavors = draw(st.lists(st.sampled_from(granted), min_size=1, max_size=2, unique=True))
            quotas = {}
            for f in flavors:
                nominal = draw(st.integers(0, left[f]))
                left[f] -= nominal
                lend = draw(st.none() | st.integers(0, nominal))
                quotas[f] = (nominal, draw(st.none() | st.integers(0, 4)), lend)
            preemption = {
                "withinClusterQueue": draw(st.sampled_from(["Never", "LowerPriority"])),
                "reclaimWithinCohort": draw(st.sampled_from(["Never", "LowerPriority", "Any"])),
            }
            if draw(st.booleans()):
                preemption["borrowWithinCohort"] = {"policy": "LowerPriority"}
            spec = {
                "cohortName": draw(st.sampled_from(cohorts)),
                "resourceGroups": _groups(quotas),
                "preemption": preemption,
            }
            weight = draw(st.none() | st.sampled_from(["0.5", "1", "1000"]))
            if weight:
                spec["fairSharing"] = {"weight": weight}
            owned.append(_doc("ClusterQueue", f"{name}-q{q}", spec))
            owner[f"{name}-q{q}"] = name
        tenant = Tenant(
            name=name,
            capacity={f: {RES: n} for f, n in grant.items()},
            parent_cohort=parent,
            borrowing={f: {RES: n} for f, n in borrowing.items()},
            lending={f: {RES: n} for f, n in lending.items()},
        )
        docs.append(root_cohort_document(tenant, owned, FLAVORS))
        docs.extend(owned)
        limits[name] = {f: grant[f] + borrowing.get(f, 0) for f in granted}
    for cq in owner:
        lq = {"apiVersion": KUEUE, "kind": "LocalQueue",
              "metadata": {"name": cq, "namespace": "ns"}, "spec": {"clusterQueue": cq}}  # fmt: skip
        docs.append(lq)
    return World(docs, limits, owner)


@dataclass(frozen=True)
class Step:
    queue: str
    pods: int
    cpu: int
    priority: int
    finish: int | None  # index of an earlier arrival that completes before this one


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_tenant_uses_more_than_its_grant_and_borrowing(data: st.DataObject) -> None:
    world = data.draw(worlds())
    gov = load_objects(world.documents, "property")
    fair = data.draw(st.booleans())
    engine = AdmissionEngine(gov, AdmissionConfig(fair_sharing=fair))
    queues = sorted(world.owner)
    steps = data.draw(
        st.lists(
            st.builds(
                Step,
                st.sampled_from(queues),
                st.integers(1, 3),
                st.integers(1, 4),
                st.integers(-1, 2),
                st.none() | st.integers(0, 30),
            ),
            max_size=25,
        )
    )
    for i, step in enumerate(steps):
        if step.finish is not None and f"w{step.finish}" in engine.admitted:
            engine.finish(f"w{step.finish}")
        pod_set = AdmissionPodSet("main", step.pods, {RES: step.cpu})
        engine.submit(
            AdmissionWorkload(f"w{i}", f"ns/{step.queue}", (pod_set,), step.priority, float(i))
        )
        engine.run(float(i))
        used: dict[tuple[str, str], int] = {}
        for aw in engine.admitted.values():
            tenant = world.owner[aw.cluster_queue]
            for (flavor, _), amount in aw.usage.items():
                used[(tenant, flavor)] = used.get((tenant, flavor), 0) + amount
        for (tenant, flavor), amount in used.items():
            if not tenant:
                continue  # the provider's own pool
            allowed = world.limits[tenant].get(flavor)
            assert allowed is not None, f"{tenant} admitted on {flavor}, never granted"
            assert amount <= allowed, (
                f"{tenant} uses {amount} of {flavor}, above grant + borrowing {allowed}"
            )
