"""Admission scenarios: a queue configuration, workloads, and the outcome admission gives.

The file format is the one of ``../shared/conformance/README.md`` (version 1). A scenario is
replayed through the admission strategy of the one scheduling path
(:class:`~gpuaas.engine.scheduling.admission.AdmissionScheduler`, the real
:class:`~gpuaas.engine.admission.AdmissionEngine` behind it): workloads that already hold quota
are recorded first; the others arrive in creation order, and at every
distinct creation time the engine runs passes until nothing changes. Time advances only with
``created``; nothing finishes by itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuaas.engine.admission import (
    AdmissionConfig,
    AdmissionEngine,
    NodeCapacity,
    ResourceTransformation,
)
from gpuaas.engine.admission.profiles import profile_requests, usable_profile
from gpuaas.engine.scheduling.admission import AdmissionScheduler
from gpuaas.model.document import labels as _labels
from gpuaas.model.document import mapping as _map
from gpuaas.model.document import number
from gpuaas.model.document import sequence as _seq
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    FairSharingStrategy,
    Governance,
)
from gpuaas.model.node import Toleration
from gpuaas.model.resources import parse_resource_list
from gpuaas.model.topology import Level
from gpuaas.model.workload import TopologyMode, TopologyRequest
from gpuaas.supply.kueue import load_objects
from gpuaas.supply.loaders.inventory import parse_taint

_TOP = {"name", "description", "source", "nodes", "objects", "workloads", "expect", "config"}


@dataclass(frozen=True, slots=True)
class ScenarioWorkload:
    workload: AdmissionWorkload
    admitted_flavors: dict[str, dict[str, str]] | None = None
    admitted_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """Final state: flavors of every admitted workload, every eviction, every pending name."""

    admitted: dict[str, dict[str, dict[str, str]]]
    evicted: dict[str, str]
    pending: list[str]
    reasons: dict[str, str] = field(default_factory=dict, compare=False)
    oscillated: bool = field(default=False, compare=False)  # stopped on a preemption loop

    def to_json(self) -> dict[str, Any]:
        return {
            "admitted": {
                name: {ps: dict(sorted(rs.items())) for ps, rs in sorted(flavors.items())}
                for name, flavors in sorted(self.admitted.items())
            },
            "evicted": dict(sorted(self.evicted.items())),
            "pending": sorted(self.pending),
        }


@dataclass(frozen=True, slots=True)
class ScenarioOrigin:
    """Where a scenario's situation comes from (e.g. the upstream Kueue test it translates), so
    that a reader can compare the expectation with the test that set it."""

    repo: str
    file: str
    test: str
    commit: str | None = None

    def __str__(self) -> str:
        at = f"@{self.commit[:12]}" if self.commit else ""
        return f"{self.repo}{at} {self.file} {self.test}"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    governance: Governance
    workloads: tuple[ScenarioWorkload, ...]
    nodes: tuple[NodeCapacity, ...] | None
    config: AdmissionConfig
    expect: Outcome | None
    source: str = "scenario"
    origin: ScenarioOrigin | None = None


def _number(value: object, where: str) -> float:
    return number(value, where, what="a number of seconds")


def _config(raw: object, where: str) -> AdmissionConfig:
    config = _map(raw, where)
    unknown = set(config) - {"fairSharing", "minRunTimeSeconds", "userLimits", "resources"}
    if unknown:
        raise InvalidValue(f"{where}.{sorted(unknown)[0]}", "unknown configuration key")
    fair = _map(config.get("fairSharing"), f"{where}.fairSharing")
    unknown = set(fair) - {"enable", "preemptionStrategies"}
    if unknown:
        raise InvalidValue(f"{where}.fairSharing.{sorted(unknown)[0]}", "not supported")
    strategies = tuple(
        FairSharingStrategy(s)
        if s in {m.value for m in FairSharingStrategy}
        else _bad(f"{where}.fairSharing.preemptionStrategies", s)
        for s in _seq(fair.get("preemptionStrategies"), f"{where}.fairSharing.preemptionStrategies")
    )
    limits = _map(config.get("userLimits"), f"{where}.userLimits")
    resources = _map(config.get("resources"), f"{where}.resources")
    if set(resources) - {"transformations"}:
        raise InvalidValue(f"{where}.resources", "only `transformations` is supported")
    transformations: dict[str, ResourceTransformation] = {}
    for i, raw in enumerate(_seq(resources.get("transformations"), f"{where}.resources")):
        twhere = f"{where}.resources.transformations[{i}]"
        t = _map(raw, twhere)
        name = t.get("input")
        if not isinstance(name, str) or not name:
            raise InvalidValue(f"{twhere}.input", "expected a resource name")
        strategy = t.get("strategy", "Retain")
        if strategy not in ("Retain", "Replace"):
            raise InvalidValue(f"{twhere}.strategy", f"{strategy!r} is not Retain or Replace")
        outputs = parse_resource_list(_map(t.get("outputs"), twhere), f"{twhere}.outputs")
        transformations[name] = ResourceTransformation(outputs, retain=strategy == "Retain")
    kwargs: dict[str, Any] = {
        "fair_sharing": bool(fair.get("enable", False)),
        "min_run_time": _number(config.get("minRunTimeSeconds", 0), f"{where}.minRunTimeSeconds"),
        "user_limits": {str(k): int(v) for k, v in limits.items()},
        "transformations": transformations,
    }
    if strategies:
        kwargs["fair_sharing_strategies"] = strategies
    return AdmissionConfig(**kwargs)


def _bad(where: str, value: object) -> FairSharingStrategy:
    choices = ", ".join(m.value for m in FairSharingStrategy)
    raise InvalidValue(where, f"{value!r} is not one of {choices}")


def _topology(raw: object, where: str) -> TopologyRequest | None:
    """Kueue's ``podSets[].topologyRequest``: ``required`` or ``preferred``, naming the level by
    its node label (``topology.gpuaas.io/rack``) or short name (``rack``)."""
    if raw is None:
        return None
    t = _map(raw, where)
    for key in t:
        if key not in ("required", "preferred"):
            raise InvalidValue(f"{where}.{key}", "unknown field (known: required, preferred)")
    if len(t) != 1:
        raise InvalidValue(where, "give exactly one of required or preferred")
    mode, level = next(iter(t.items()))
    try:
        return TopologyRequest(Level.from_name(str(level)), TopologyMode(mode))
    except ValueError as exc:
        raise InvalidValue(f"{where}.{mode}", str(exc)) from None


def _workload(raw: object, index: int, gov: Governance) -> ScenarioWorkload:
    where = f"workloads[{index}]"
    w = _map(raw, where)
    allowed = {
        "name",
        "queue",
        "priority",
        "priorityClass",
        "created",
        "podSets",
        "admitted",
        "user",
    }
    for key in w:
        if key not in allowed:
            raise InvalidValue(f"{where}.{key}", "unknown field")
    name = w.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidValue(f"{where}.name", "expected a non-empty string")
    where = f"workload {name}"
    queue = w.get("queue")
    if not isinstance(queue, str) or "/" not in queue:
        raise InvalidValue(f"{where}: queue", f"expected 'namespace/localqueue', got {queue!r}")
    if "priorityClass" in w:
        if "priority" in w:
            raise InvalidValue(
                f"{where}: priorityClass", "give priority or priorityClass, not both"
            )
        cls = gov.priority_classes.get(str(w["priorityClass"]))
        if cls is None:
            raise InvalidValue(
                f"{where}: priorityClass",
                f"WorkloadPriorityClass {w['priorityClass']!r} does not exist",
            )
        priority = cls.value
    else:
        priority = w.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidValue(f"{where}: priority", f"expected an integer, got {priority!r}")
    pod_sets = []
    names: set[str] = set()
    for pi, praw in enumerate(_seq(w.get("podSets"), f"{where}: podSets")):
        pwhere = f"{where}: podSets[{pi}]"
        p = _map(praw, pwhere)
        for key in p:
            if key not in {
                "name",
                "count",
                "requests",
                "nodeSelector",
                "tolerations",
                "hardwareProfile",
                "topologyRequest",
            }:
                raise InvalidValue(f"{pwhere}.{key}", "unknown field")
        ps_name = str(p.get("name", "main"))
        if ps_name in names:
            raise InvalidValue(f"{pwhere}.name", f"pod set {ps_name} is defined twice")
        names.add(ps_name)
        count = p.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidValue(f"{pwhere}.count", f"expected a positive integer, got {count!r}")
        tolerations = tuple(
            Toleration(
                key=str(t.get("key", "")),
                operator=str(t.get("operator", "Equal")),
                value=str(t.get("value", "")),
                effect=str(t.get("effect", "")),
            )
            for t in (
                _map(x, f"{pwhere}.tolerations")
                for x in _seq(p.get("tolerations"), f"{pwhere}.tolerations")
            )
        )
        if p.get("hardwareProfile") is not None:
            # a gpuaas extension: the profile's defaults, `requests` as overrides within bounds
            tenant, _, lq_name = queue.partition("/")
            profile = usable_profile(gov, str(p["hardwareProfile"]), tenant, pwhere)
            if lq_name != profile.local_queue:
                raise InvalidValue(
                    f"{pwhere}.hardwareProfile",
                    f"hardware profile {profile.name} submits to LocalQueue "
                    f"{profile.queue_for(tenant)}, not {queue}",
                )
            requests = profile_requests(profile, _map(p.get("requests"), pwhere))
        else:
            requests = parse_resource_list(_map(p.get("requests"), pwhere), f"{pwhere}.requests")
        pod_sets.append(
            AdmissionPodSet(
                name=ps_name,
                count=count,
                requests=requests,
                node_selector=_labels(p.get("nodeSelector"), f"{pwhere}.nodeSelector"),
                tolerations=tolerations,
                topology=_topology(p.get("topologyRequest"), f"{pwhere}.topologyRequest"),
            )
        )
    if not pod_sets:
        raise InvalidValue(f"{where}: podSets", "a workload needs at least one pod set")
    user = w.get("user")
    workload = AdmissionWorkload(
        name=name,
        queue=queue,
        pod_sets=tuple(pod_sets),
        priority=priority,
        created=_number(w.get("created", 0), f"{where}: created"),
        user=None if user is None else str(user),
    )
    admitted = w.get("admitted")
    if admitted is None:
        return ScenarioWorkload(workload)
    adm = _map(admitted, f"{where}: admitted")
    flavors = {
        str(ps): {str(r): str(f) for r, f in _map(rs, f"{where}: admitted.flavors.{ps}").items()}
        for ps, rs in _map(adm.get("flavors"), f"{where}: admitted.flavors").items()
    }
    return ScenarioWorkload(workload, flavors, _number(adm.get("at", 0), f"{where}: admitted.at"))


def _origin(raw: object) -> ScenarioOrigin | None:
    """The optional top-level ``source``: ``{repo, file, test, commit?}``, all strings."""
    if raw is None:
        return None
    src = _map(raw, "source")
    for key in src:
        if key not in ("repo", "file", "test", "commit"):
            raise InvalidValue(f"source.{key}", "unknown field (known: repo, commit, file, test)")
    values: dict[str, str] = {}
    for key in ("repo", "file", "test", "commit"):
        value = src.get(key)
        if value is None and key == "commit":
            continue
        if not isinstance(value, str) or not value:
            raise InvalidValue(f"source.{key}", f"expected a non-empty string, got {value!r}")
        values[key] = value
    return ScenarioOrigin(**values)


def _expect(raw: object) -> Outcome | None:
    if raw is None:
        return None
    e = _map(raw, "expect")
    admitted = {
        str(name): {
            str(ps): {str(r): str(f) for r, f in _map(rs, f"expect.admitted.{name}.{ps}").items()}
            for ps, rs in _map(flavors, f"expect.admitted.{name}").items()
        }
        for name, flavors in _map(e.get("admitted"), "expect.admitted").items()
    }
    evicted = {str(k): str(v) for k, v in _map(e.get("evicted"), "expect.evicted").items()}
    pending = [str(x) for x in _seq(e.get("pending"), "expect.pending")]
    return Outcome(admitted, evicted, pending)


def parse_scenario(data: object, source: str = "scenario") -> Scenario:
    """Build a :class:`Scenario` from a parsed YAML document; errors name the entry and field."""
    try:
        doc = _map(data, "scenario")
        for key in doc:
            if key not in _TOP:
                raise InvalidValue(key, f"unknown top-level key (known: {', '.join(sorted(_TOP))})")
        gov = load_objects(_seq(doc.get("objects"), "objects"), "objects")
        nodes = None
        if doc.get("nodes") is not None:
            nodes = []
            for i, raw in enumerate(_seq(doc["nodes"], "nodes")):
                n = _map(raw, f"nodes[{i}]")
                name = str(n.get("name", f"node-{i}"))
                for key in n:
                    if key not in ("name", "labels", "capacity", "taints"):
                        raise InvalidValue(
                            f"node {name}: {key}",
                            "unknown field (known: name, labels, capacity, taints)",
                        )
                nodes.append(
                    NodeCapacity(
                        name=name,
                        labels=_labels(n.get("labels"), f"node {name}: labels"),
                        capacity=parse_resource_list(
                            _map(n.get("capacity"), f"node {name}: capacity"),
                            f"node {name}: capacity",
                        ),
                        taints=tuple(
                            parse_taint(t, f"node {name}: taints[{k}]")
                            for k, t in enumerate(_seq(n.get("taints"), f"node {name}: taints"))
                        ),
                    )
                )
        workloads = tuple(
            _workload(raw, i, gov) for i, raw in enumerate(_seq(doc.get("workloads"), "workloads"))
        )
        seen: set[str] = set()
        for sw in workloads:
            if sw.workload.name in seen:
                raise InvalidValue(f"workload {sw.workload.name}", "name is used twice")
            seen.add(sw.workload.name)
        return Scenario(
            name=str(doc.get("name", source)),
            description=str(doc.get("description", "")),
            governance=gov,
            workloads=workloads,
            nodes=None if nodes is None else tuple(nodes),
            config=_config(doc.get("config"), "config"),
            expect=_expect(doc.get("expect")),
            source=source,
            origin=_origin(doc.get("source")),
        )
    except InvalidValue as exc:
        raise GpuaasError(f"{source}: {exc}") from None


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise GpuaasError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise GpuaasError(f"{path}: not valid YAML: {exc}") from None
    return parse_scenario(data, str(path))


def run_scenario(scenario: Scenario) -> Outcome:
    """Replay ``scenario`` through the admission strategy of the one scheduling path and return
    the settled outcome."""
    nodes = None
    if scenario.nodes is not None:
        nodes = [
            NodeCapacity(n.name, dict(n.labels), dict(n.capacity), n.taints) for n in scenario.nodes
        ]
    evicted: dict[str, str] = {}
    try:
        scheduler = AdmissionScheduler(AdmissionEngine(scenario.governance, scenario.config, nodes))
        for sw in scenario.workloads:
            if sw.admitted_flavors is not None:
                scheduler.admit_existing(sw.workload, sw.admitted_flavors, sw.admitted_at)
        start = max((sw.admitted_at for sw in scenario.workloads if sw.admitted_flavors), default=0)
        arrivals = sorted(
            (sw.workload for sw in scenario.workloads if sw.admitted_flavors is None),
            key=lambda w: w.created,
        )
        times = sorted({w.created for w in arrivals})
        index = 0
        for t in times or [0.0]:
            while index < len(arrivals) and arrivals[index].created <= t:
                scheduler.submit(arrivals[index], t)
                index += 1
            for ev in scheduler.cycle(max(t, start)).evicted:
                evicted[ev.name] = str(ev.reason)
    except InvalidValue as exc:
        raise GpuaasError(f"{scenario.source}: {exc}") from None
    engine = scheduler.engine
    pending = engine.pending_names()
    return Outcome(
        admitted={
            name: {ps: dict(rs) for ps, rs in aw.flavors.items()}
            for name, aw in engine.admitted.items()
        },
        evicted=evicted,
        pending=pending,
        reasons={name: str(scheduler.waiting.get(name, "waiting")) for name in pending},
        oscillated=engine.oscillated,
    )


def diff_outcomes(expected: Outcome, actual: Outcome) -> list[str]:
    """Human lines describing every difference; empty when the outcomes are equal."""
    lines: list[str] = []
    for name in sorted(set(expected.admitted) | set(actual.admitted)):
        want, got = expected.admitted.get(name), actual.admitted.get(name)
        if want == got:
            continue
        if want is None:
            lines.append(f"admitted: {name} was admitted with {got} but should not be")
        elif got is None:
            reason = actual.reasons.get(name)
            lines.append(
                f"admitted: {name} should be admitted with {want} but is not"
                + (f" ({reason})" if reason else "")
            )
        else:
            lines.append(f"admitted: {name} flavors differ: expected {want}, got {got}")
    for name in sorted(set(expected.evicted) | set(actual.evicted)):
        want_r, got_r = expected.evicted.get(name), actual.evicted.get(name)
        if want_r != got_r:
            lines.append(
                f"evicted: {name}: expected {want_r or 'no eviction'}, got {got_r or 'no eviction'}"
            )
    want_p, got_p = set(expected.pending), set(actual.pending)
    for name in sorted(want_p - got_p):
        lines.append(f"pending: {name} should be pending but is not")
    for name in sorted(got_p - want_p):
        lines.append(f"pending: {name} is pending but should not be ({actual.reasons.get(name)})")
    return lines
