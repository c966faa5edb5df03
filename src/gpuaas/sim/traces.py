"""Workload traces for the simulator: the ITP trace, openb replayed in time, and a YAML generator.

Every source becomes a list of :class:`SimJob` sorted by submission time. A job is one
:class:`~gpuaas.model.workload.Workload` (so gangs go through the gang placer) plus what only
the simulator needs: when it arrives, how long it runs, its tenant, the run-time limit a user
declared (EASY backfill plans with it, as Slurm does with ``--time``) and an optional checkpoint
interval (an evicted job then restarts from its last checkpoint instead of from zero).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpuaas.model.document import mapping
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.node import Node, Toleration
from gpuaas.model.topology import Level
from gpuaas.model.workload import PodRequest, PodSet, TopologyMode, TopologyRequest, Workload
from gpuaas.sim.openb import load_openb_pods, model_aliases, to_request

#: GPUs per node the ITP clusters had: larger jobs are gangs of 8-GPU pods.
ITP_GPUS_PER_POD = 8
_PREFER_RACK = TopologyRequest(Level.RACK, TopologyMode.PREFERRED)
#: What Kubernetes' ExtendedResourceToleration admission plugin adds to a pod asking for
#: ``nvidia.com/gpu``: GPU nodes are commonly tainted with that key to keep other pods off.
GPU_TOLERATION = (Toleration(key="nvidia.com/gpu", operator="Exists"),)


class TraceError(GpuaasError):
    """A trace file is malformed; the message names the file, line and field."""


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a trace: the workload and its timing.

    ``limit`` is the declared run time (>= ``duration`` when users over-estimate);
    ``checkpoint`` is the checkpoint interval in seconds of run time (0 = none).
    """

    name: str
    submit: float
    duration: float
    workload: Workload
    tenant: str = "default"
    priority: int = 0
    limit: float = 0.0
    checkpoint: float = 0.0

    @property
    def milli_gpu(self) -> int:
        """Milli-GPU the whole job holds while it runs."""
        return sum(ps.count * ps.pod.milli_gpu for ps in self.workload.pod_sets)

    @property
    def declared(self) -> float:
        return self.limit if self.limit > 0 else self.duration


_PODS: dict[int, PodRequest] = {}


def _gpu_pod(gpus: int) -> PodRequest:
    pod = _PODS.get(gpus)
    if pod is None:
        pod = _PODS[gpus] = PodRequest(gpus=gpus, tolerations=GPU_TOLERATION)
    return pod


def itp_workload(name: str, gpus: int, priority: int = 0) -> Workload:
    """One ITP job as a workload: up to 8 GPUs is one pod, more is a gang of 8-GPU pods
    (preferring one rack), with a smaller last pod when the count is not a multiple of 8.
    Pods tolerate the ``nvidia.com/gpu`` taint, as Kubernetes adds for GPU requests."""
    if gpus <= ITP_GPUS_PER_POD:
        sets = (PodSet("main", 1, _gpu_pod(gpus)),)
    else:
        full, rest = divmod(gpus, ITP_GPUS_PER_POD)
        sets = (PodSet("workers", full, _gpu_pod(ITP_GPUS_PER_POD), _PREFER_RACK),)
        if rest:
            sets += (PodSet("rest", 1, _gpu_pod(rest)),)
    return Workload(name, sets, priority)


def _rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    reader = csv.reader(text.splitlines())
    header = [h.strip() for h in next(reader, [])]
    rows = [
        (i, row) for i, row in enumerate(reader, start=2) if row and any(c.strip() for c in row)
    ]
    return header, rows


def _number(path: Path, line: int, col: str, cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise TraceError(f"{path}: line {line}: {col}: expected a number, got {cell!r}") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{path}: line {line}: {col}: must be a finite number >= 0, got {cell!r}")
    return value


def load_itp(path: str | PathLike[str], limit_factor: float = 1.0) -> list[SimJob]:
    """Read an ITP ``clusterNN.csv`` (job_id, submission_time, duration, num_gpu).

    ``limit_factor`` scales the declared limit from the true duration (1.0: exact estimates).
    """
    path = Path(path)
    header, rows = _rows(path)
    need = ("job_id", "submission_time", "duration", "num_gpu")
    missing = [c for c in need if c not in header]
    if missing:
        raise TraceError(f"{path}: line 1: missing column(s) {', '.join(missing)}")
    pos = {c: header.index(c) for c in need}
    jobs: list[SimJob] = []
    seen: set[str] = set()
    for line, row in rows:
        if len(row) < len(header):
            raise TraceError(f"{path}: line {line}: expected {len(header)} columns")
        name = row[pos["job_id"]].strip()
        if not name:
            raise TraceError(f"{path}: line {line}: job_id: empty")
        if name in seen:
            name = f"{name}-{line}"
        seen.add(name)
        submit = _number(path, line, "submission_time", row[pos["submission_time"]])
        duration = _number(path, line, "duration", row[pos["duration"]])
        gpus_f = _number(path, line, "num_gpu", row[pos["num_gpu"]])
        if gpus_f != int(gpus_f) or gpus_f < 1:
            raise TraceError(f"{path}: line {line}: num_gpu: expected a whole number >= 1")
        gpus = int(gpus_f)
        jobs.append(
            SimJob(
                name=name,
                submit=submit,
                duration=duration,
                workload=itp_workload(name, gpus),
                tenant="itp",
                limit=duration * limit_factor,
            )
        )
    if not jobs:
        raise TraceError(f"{path}: no jobs")
    jobs.sort(key=lambda j: j.submit)
    return jobs


def load_openb_dynamic(
    path: str | PathLike[str], nodes: Sequence[Node] | None = None
) -> list[SimJob]:
    """The openb pod list replayed in time: arrival at ``creation_time``, run time
    ``deletion_time - creation_time``; the tenant is the ``qos`` class (LS, BE, ...).

    With ``nodes`` the ``gpu_spec`` models are mapped onto the fleet's model names; without
    (a generated fleet of other GPUs) the model constraint is dropped. Pods without a positive
    run time are skipped (the trace has a few that were deleted at creation).
    """
    path = Path(path)
    tasks = load_openb_pods(path)
    header, rows = _rows(path)
    for col in ("creation_time", "deletion_time"):
        if col not in header:
            raise TraceError(
                f"{path}: line 1: missing column {col} (dynamic replay needs creation and "
                "deletion times; the multigpu files have none)"
            )
    if len(rows) != len(tasks):
        raise TraceError(f"{path}: {len(rows)} rows but {len(tasks)} tasks")
    aliases = model_aliases(nodes) if nodes is not None else {}
    c_pos, d_pos = header.index("creation_time"), header.index("deletion_time")
    q_pos = header.index("qos") if "qos" in header else -1
    jobs: list[SimJob] = []
    for task, (line, row) in zip(tasks, rows, strict=True):
        created = _number(path, line, "creation_time", row[c_pos])
        deleted = _number(path, line, "deletion_time", row[d_pos])
        if deleted <= created:
            continue
        request = to_request(task, aliases)
        if nodes is None:
            request = PodRequest(
                cpu_milli=request.cpu_milli,
                memory_bytes=request.memory_bytes,
                gpus=request.gpus,
                gpu_milli=request.gpu_milli,
            )
        tenant = row[q_pos].strip() if q_pos >= 0 and row[q_pos].strip() else "default"
        jobs.append(
            SimJob(
                name=task.name,
                submit=created,
                duration=deleted - created,
                workload=Workload(task.name, (PodSet("main", 1, request),)),
                tenant=tenant,
            )
        )
    if not jobs:
        raise TraceError(f"{path}: no pod with deletion_time > creation_time")
    jobs.sort(key=lambda j: j.submit)
    return jobs


# ---------------------------------------------------------------------------- generator
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*$")


def parse_seconds(value: object, where: str) -> float:
    """``90``, ``"90s"``, ``"30m"``, ``"2h"``, ``"1.5d"`` -> seconds."""
    if isinstance(value, bool):
        raise InvalidValue(where, f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(str(value))
        if not match:
            raise InvalidValue(where, f"expected a duration like 90, 30m, 2h or 1d, got {value!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidValue(where, f"must be a finite duration >= 0, got {value!r}")
    return seconds


_TENANT_KEYS = {
    "name",
    "jobs",
    "rate_per_hour",
    "arrival",
    "gpus",
    "duration",
    "priority",
    "limit_factor",
    "checkpoint",
    "weight",
}
_TOP_KEYS = {"seed", "horizon", "tenants"}


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    return mapping(value, where, optional=False)


def _sample_gpus(spec: object, n: int, rng: np.random.Generator, where: str) -> np.ndarray:
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 1:
            raise InvalidValue(where, "must be at least 1")
        return np.full(n, spec, dtype=np.int64)
    spec = _mapping(spec, where)
    choices = spec.get("choices")
    if not isinstance(choices, list) or not choices:
        raise InvalidValue(f"{where}.choices", "expected a non-empty list of GPU counts")
    if any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in choices):
        raise InvalidValue(f"{where}.choices", "GPU counts must be whole numbers >= 1")
    weights = spec.get("weights", [1] * len(choices))
    if not isinstance(weights, list) or len(weights) != len(choices):
        raise InvalidValue(f"{where}.weights", "needs one weight per choice")
    w = np.array(weights, dtype=float)
    if (w < 0).any() or w.sum() <= 0:
        raise InvalidValue(f"{where}.weights", "weights must be >= 0 and not all zero")
    return rng.choice(np.array(choices, dtype=np.int64), size=n, p=w / w.sum())


def _sample_durations(spec: object, n: int, rng: np.random.Generator, where: str) -> np.ndarray:
    if not isinstance(spec, Mapping):
        return np.full(n, parse_seconds(spec, where))
    dist = str(spec.get("distribution", "lognormal"))
    if dist == "fixed":
        return np.full(n, parse_seconds(spec.get("value"), f"{where}.value"))
    if dist == "exponential":
        mean = parse_seconds(spec.get("mean"), f"{where}.mean")
        return rng.exponential(mean, size=n)
    if dist == "lognormal":
        median = parse_seconds(spec.get("median"), f"{where}.median")
        sigma = float(spec.get("sigma", 1.0))
        if median <= 0 or sigma < 0:
            raise InvalidValue(where, "lognormal needs median > 0 and sigma >= 0")
        return rng.lognormal(math.log(median), sigma, size=n)
    if dist == "uniform":
        low = parse_seconds(spec.get("min"), f"{where}.min")
        high = parse_seconds(spec.get("max"), f"{where}.max")
        if high < low:
            raise InvalidValue(where, "uniform needs min <= max")
        return rng.uniform(low, high, size=n)
    raise InvalidValue(
        f"{where}.distribution",
        f"unknown distribution {dist!r}; use fixed, exponential, lognormal or uniform",
    )


def generate_jobs(document: Mapping[str, Any], source: str = "generator") -> list[SimJob]:
    """Jobs from a generator document::

    seed: 7
    horizon: 2d              # arrivals stop here (needed with rate_per_hour)
    tenants:
      - name: research
        rate_per_hour: 12    # Poisson arrivals (or jobs: N spread uniformly)
        arrival: poisson     # poisson | uniform
        gpus: {choices: [1, 2, 8, 16], weights: [5, 3, 2, 1]}
        duration: {distribution: lognormal, median: 2h, sigma: 1.2}
        priority: 0
        weight: 1            # fair-share weight
        limit_factor: 1.5    # declared limit = duration x factor
        checkpoint: 30m      # optional checkpoint interval
    """
    document = _mapping(document, source)
    unknown = set(document) - _TOP_KEYS
    if unknown:
        raise InvalidValue(
            f"{source}: {sorted(unknown)[0]}", f"unknown key; known: {sorted(_TOP_KEYS)}"
        )
    seed = int(document.get("seed", 0))
    horizon = parse_seconds(document.get("horizon", "1d"), f"{source}: horizon")
    tenants = document.get("tenants")
    if not isinstance(tenants, list) or not tenants:
        raise InvalidValue(f"{source}: tenants", "expected a non-empty list")
    rng = np.random.default_rng(seed)
    jobs: list[SimJob] = []
    names: set[str] = set()
    for i, raw in enumerate(tenants):
        where = f"{source}: tenants[{i}]"
        spec = _mapping(raw, where)
        unknown = set(spec) - _TENANT_KEYS
        if unknown:
            raise InvalidValue(
                f"{where}.{sorted(unknown)[0]}", f"unknown key; known: {sorted(_TENANT_KEYS)}"
            )
        name = str(spec.get("name", f"tenant-{i}"))
        if name in names:
            raise InvalidValue(f"{where}.name", f"tenant {name!r} is repeated")
        names.add(name)
        process = str(spec.get("arrival", "poisson"))
        if "jobs" in spec:
            n = int(spec["jobs"])
            if n < 0:
                raise InvalidValue(f"{where}.jobs", "must be >= 0")
            times = np.sort(rng.uniform(0, horizon, size=n)) if process != "burst" else np.zeros(n)
        elif "rate_per_hour" in spec:
            rate = float(spec["rate_per_hour"]) / 3600.0
            if rate <= 0:
                raise InvalidValue(f"{where}.rate_per_hour", "must be > 0")
            if process == "poisson":
                gaps = rng.exponential(1 / rate, size=int(rate * horizon * 1.5) + 16)
                times = np.cumsum(gaps)
                times = times[times < horizon]
            elif process == "uniform":
                times = np.arange(0, horizon, 1 / rate)
            else:
                raise InvalidValue(
                    f"{where}.arrival", f"unknown arrival {process!r}; use poisson or uniform"
                )
        else:
            raise InvalidValue(where, "needs jobs: N or rate_per_hour: R")
        n = len(times)
        gpus = _sample_gpus(spec.get("gpus", 1), n, rng, f"{where}.gpus")
        durations = _sample_durations(spec.get("duration", "1h"), n, rng, f"{where}.duration")
        priority = int(spec.get("priority", 0))
        factor = float(spec.get("limit_factor", 1.0))
        if factor < 1:
            raise InvalidValue(
                f"{where}.limit_factor", "must be >= 1 (a limit below the run time kills the job)"
            )
        checkpoint = parse_seconds(spec.get("checkpoint", 0), f"{where}.checkpoint")
        for k in range(n):
            job_name = f"{name}-{k:06d}"
            duration = max(1.0, round(float(durations[k]), 3))
            jobs.append(
                SimJob(
                    name=job_name,
                    submit=round(float(times[k]), 3),
                    duration=duration,
                    workload=itp_workload(job_name, int(gpus[k]), priority),
                    tenant=name,
                    priority=priority,
                    limit=duration * factor,
                    checkpoint=checkpoint,
                )
            )
    if not jobs:
        raise InvalidValue(source, "the generator produced no jobs")
    jobs.sort(key=lambda j: (j.submit, j.name))
    return jobs


def tenant_weights(document: Mapping[str, Any]) -> dict[str, float]:
    """Fair-share weight per tenant of a generator document (default 1)."""
    out: dict[str, float] = {}
    for i, raw in enumerate(document.get("tenants") or []):
        if isinstance(raw, Mapping):
            out[str(raw.get("name", f"tenant-{i}"))] = float(raw.get("weight", 1.0))
    return out


def load_generator(path: str | PathLike[str]) -> tuple[list[SimJob], dict[str, float]]:
    """Read a generator YAML file; returns the jobs and the tenants' fair-share weights."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise TraceError(f"{path}: not valid YAML: {exc}") from None
    return generate_jobs(document, str(path)), tenant_weights(document)
