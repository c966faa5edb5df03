"""The Alibaba GPU trace's pod lists and the FGD experiment protocol.

Protocol (``../shared/data/README.md``, as the FGD authors ran it): the trace's tasks in a seeded
random shuffle, then "inflation" — tasks drawn uniformly with replacement from the trace appended
until the total requested GPU would exceed ``inflation`` x cluster capacity; tasks are placed one
at a time and never leave; a task that fits nowhere is skipped; the GPU allocation ratio is
recorded each time the arrived workload (cumulative requested GPU / capacity) passes another 1%.
Percentages the arrived workload never reaches (the last, since inflation stops just below 130%)
take the final allocation. Before a run, every node is renamed with a seeded random prefix, as
the authors' simulator does (see :func:`protocol_nodes`): it decides which node wins equal scores.
"""

from __future__ import annotations

import csv
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

from gpuaas.engine.framework import CycleState, PodShape
from gpuaas.engine.place import Placement, place_shape
from gpuaas.engine.policies import make_policy
from gpuaas.engine.policies.base import Policy, TaskMix
from gpuaas.engine.snapshot import MILLI, Snapshot
from gpuaas.model.errors import GpuaasError
from gpuaas.model.node import Node
from gpuaas.model.workload import PodRequest

_MIB = 2**20
#: Offset of the random stream that orders the nodes (the task order uses ``seed``, placement
#: ``seed + 1_000_003``), so the three draws are independent.
_NODE_ORDER_STREAM = 2_000_003
#: Node label the openb loader uses for the trace's own GPU model name.
SOURCE_MODEL_LABEL = "gpuaas.io/source-gpu-model"
REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceFileError(GpuaasError):
    """A pod list is malformed; the message names the file, line and column."""


@dataclass(frozen=True, slots=True)
class TraceTask:
    """One row of a pod list: the trace's own names (``gpu_spec`` models, empty = any)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()

    @property
    def requested_milli(self) -> int:
        """GPU the task asks for, as the protocol counts it: num_gpu x gpu_milli."""
        return self.num_gpu * self.gpu_milli


def load_openb_pods(path: str | PathLike[str]) -> list[TraceTask]:
    """Read ``openb_pod_list_*.csv``; errors name the file, line and column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    reader = csv.reader(text.splitlines())
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TraceFileError(f"{path}: line 1: missing column(s) {', '.join(missing)}")
    pos = {name: header.index(name) for name in header}
    tasks: list[TraceTask] = []
    for line, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise TraceFileError(f"{path}: line {line}: expected {len(header)} columns")

        def num(col: str, line: int = line, row: list[str] = row) -> int:
            cell = row[pos[col]].strip()
            try:
                value = int(cell)
            except ValueError:
                raise TraceFileError(
                    f"{path}: line {line}: {col}: expected a whole number, got {cell!r}"
                ) from None
            if value < 0:
                raise TraceFileError(f"{path}: line {line}: {col}: must not be negative")
            return value

        num_gpu, gpu_milli = num("num_gpu"), num("gpu_milli")
        if num_gpu and not 0 < gpu_milli <= MILLI:
            raise TraceFileError(f"{path}: line {line}: gpu_milli: must be 1..1000 with num_gpu")
        if num_gpu > 1 and gpu_milli != MILLI:
            raise TraceFileError(f"{path}: line {line}: gpu_milli: multi-GPU tasks take 1000")
        spec = row[pos["gpu_spec"]].strip() if "gpu_spec" in pos else ""
        tasks.append(
            TraceTask(
                name=row[pos["name"]].strip(),
                cpu_milli=num("cpu_milli"),
                memory_mib=num("memory_mib"),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli if num_gpu else 0,
                gpu_spec=tuple(s for s in spec.split("|") if s),
            )
        )
    if not tasks:
        raise TraceFileError(f"{path}: no tasks")
    return tasks


def model_aliases(nodes: Sequence[Node]) -> dict[str, str]:
    """Trace model name (``V100M32``) -> the fleet's GPU model name, from the loader's label."""
    out: dict[str, str] = {}
    for node in nodes:
        if node.gpus:
            out[node.labels.get(SOURCE_MODEL_LABEL, node.gpu_model)] = node.gpu_model
            out[node.gpu_model] = node.gpu_model
    return out


def to_request(task: TraceTask, aliases: dict[str, str]) -> PodRequest:
    """The engine's request for a trace task (a share when one GPU is asked in part)."""
    models = frozenset(aliases.get(m, m) for m in task.gpu_spec)
    return PodRequest(
        cpu_milli=task.cpu_milli,
        memory_bytes=task.memory_mib * _MIB,
        gpus=task.num_gpu,
        gpu_milli=task.gpu_milli if task.num_gpu == 1 and task.gpu_milli < MILLI else 0,
        gpu_models=models,
    )


def protocol_order(
    tasks: Sequence[TraceTask], capacity_milli: int, seed: int, inflation: float = 1.3
) -> list[int]:
    """Task indices in arrival order: a seeded shuffle, then uniform draws with replacement
    until the next one would push requested GPU beyond ``inflation`` x capacity."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(tasks)).tolist()
    asked = np.array([t.requested_milli for t in tasks], dtype=np.int64)
    total = int(asked.sum())
    limit = inflation * capacity_milli
    if total > limit:  # the trace alone is more than the target: cut it, as inflation would
        kept, total = [], 0
        for i in order:
            if total + asked[i] > limit:
                break
            kept.append(i)
            total += int(asked[i])
        return kept
    while True:
        j = int(rng.integers(len(tasks)))
        if total + asked[j] > limit:
            return order
        order.append(j)
        total += int(asked[j])


def protocol_nodes(nodes: Sequence[Node], seed: int) -> list[Node]:
    """The fleet renamed as the authors' simulator names it for a run: ``<k>-<name>``, with
    ``k`` (zero-padded) from a seeded permutation of 0..n-1.

    Their simulator (``hkust-adsl/kubernetes-scheduler-simulator``, ``syncClusterResourceList``
    in ``pkg/simulator/simulator.go``) sorts the nodes by name and prefixes each with an index
    from ``rand.Perm`` of the run's seed before creating them, and its kube-scheduler gives equal
    scores to the smallest node name (see
    :func:`~gpuaas.engine.policies.base.name_order_ties`). So ties go in a random node order,
    fixed for the run and different per seed, not in file order. The baselines with integer
    scores (packing, clustering: every node scores 0 for a CPU-only task) depend on it: in file
    order the CPU-only tasks pile onto the first nodes of the file on every seed, and those two
    landed up to 1.2 points from the published medians (within 0.35 with this renaming).
    Policies that do not break ties by name are unaffected.
    """
    width = len(str(max(len(nodes) - 1, 0)))
    perm = np.random.default_rng(seed + _NODE_ORDER_STREAM).permutation(len(nodes)).tolist()
    return [
        dataclasses.replace(node, name=f"{k:0{width}d}-{node.name}")
        for node, k in zip(nodes, perm, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class RunResult:
    """One protocol run: allocation % at arrived 0..max %, counts and wall time."""

    allocation_pct: tuple[float, ...]
    placed: int
    failed: int
    seconds: float

    def unallocated_at(self, arrived_pct: int) -> float:
        return 100.0 - self.allocation_pct[arrived_pct]


def run_protocol(
    nodes: Sequence[Node],
    tasks: Sequence[TraceTask],
    policy: str | Policy,
    seed: int,
    inflation: float = 1.3,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Run the FGD protocol once; ``policy`` is a name (built with the trace's task mix) or an
    instance. ``progress(done, total)`` is called every 500 tasks. The nodes are renamed as
    :func:`protocol_nodes` describes, so placements name the renamed nodes."""
    started = time.perf_counter()
    snap = Snapshot.from_nodes(protocol_nodes(nodes, seed))
    capacity = int(snap.whole_gpus.sum()) * MILLI
    if capacity == 0:
        raise GpuaasError("the fleet has no whole-mode GPUs: the protocol measures GPU allocation")
    aliases = model_aliases(nodes)
    requests = [to_request(t, aliases) for t in tasks]
    shapes = [PodShape.of(r) for r in requests]
    if isinstance(policy, str):
        policy = make_policy(policy, mix=TaskMix.from_shapes(shapes), seed=seed)
    order = protocol_order(tasks, capacity, seed, inflation)
    rng = np.random.default_rng(seed + 1_000_003)
    top = round(inflation * 100)
    record = np.full(top + 1, np.nan)
    next_pct = 0
    arrived = 0
    placed = failed = 0
    hooks = hasattr(policy, "on_reserve")
    for step, i in enumerate(order):
        state = CycleState(pod=requests[i], shape=shapes[i], rng=rng)
        result = place_shape(snap, state, policy)
        if isinstance(result, Placement):
            snap.reserve(result.node, result.assignment)
            if hooks:
                policy.on_reserve(snap, requests[i], result.assignment)  # type: ignore[attr-defined]
            placed += 1
        else:
            failed += 1
        arrived += tasks[i].requested_milli
        while next_pct <= top and arrived * 100 >= next_pct * capacity:
            record[next_pct] = snap.allocated_milli() * 100.0 / capacity
            next_pct += 1
        if progress is not None and step % 500 == 0:
            progress(step, len(order))
    final = snap.allocated_milli() * 100.0 / capacity
    record[np.isnan(record)] = final
    if progress is not None:
        progress(len(order), len(order))
    return RunResult(tuple(float(x) for x in record), placed, failed, time.perf_counter() - started)


def unallocated_lower_bound(
    tasks: Sequence[TraceTask], order: Sequence[int], capacity_milli: int, arrived_pct: int = 100
) -> float:
    """A floor on unallocated GPU % at ``arrived_pct`` that holds for ANY placement policy.

    Two facts bound the free capacity X when the arrived workload first reaches the mark:

    - a share task asking d > 500 milli never shares its GPU with another such task, so if it
      is placed it leaves a hole of 1000 - d that only tasks asking at most that much can fill:
      X >= (holes of placed big tasks) - (milli of all small tasks that could fill them);
    - X = (milli of failed tasks) - overshoot, where overshoot is how far the arrived workload
      passed the mark (arrived minus the mark, a property of the order alone).

    A policy might make big tasks fail instead of leaving holes; failing one costs d but saves
    only its hole, so the cheapest mix fails the tasks with the best hole/d ratio first. For every
    hole size h < 500 (tasks asking >= 1000 - h, fillers asking <= h) the fractional optimum of
    that trade-off is a valid floor; the bound is the largest.
    """
    mark = arrived_pct * capacity_milli
    big: list[int] = []
    small: list[int] = []
    arrived = 0
    for i in order:
        if arrived * 100 >= mark:
            break
        task = tasks[i]
        arrived += task.requested_milli
        if task.num_gpu == 1 and task.gpu_milli < MILLI:
            (big if task.gpu_milli > MILLI // 2 else small).append(task.gpu_milli)
    if not big or arrived * 100 < mark:
        return 0.0
    overshoot = (arrived * 100 - mark) / 100.0
    asks = np.array(big, dtype=np.float64)
    fill = np.array(small, dtype=np.float64)
    best = 0.0
    for h in np.unique(MILLI - asks).tolist():
        d = np.sort(asks[MILLI - asks <= h])  # smallest ask first: best hole/ask ratio
        left = float((MILLI - d).sum() - fill[fill <= h].sum())  # holes not fillable
        failed = 0.0
        value = max(left, -overshoot)
        for ask in d.tolist():
            hole = MILLI - ask
            if left - hole >= failed + ask - overshoot:
                left -= hole
                failed += ask
                value = max(left, failed - overshoot)
            else:
                t = (left - failed + overshoot) / (hole + ask)
                value = failed + t * ask - overshoot
                break
        best = max(best, value)
    return best * 100.0 / capacity_milli


#: ``derive_variant`` kinds and what their percentage measures.
VARIANT_KINDS = {
    "gpushare": "share of GPU tasks' requested milli-GPU asked by GPU-sharing tasks (0-100)",
    "multigpu": "share of GPU tasks' requested milli-GPU asked by multi-GPU tasks (0-100)",
    "gpuspec": "share of GPU tasks, by count, restricted to GPU models (0-100)",
    "cpu": "number of CPU-only tasks, % of the source's (0-1000)",
}
#: Offset of the random stream that derives a variant (distinct from the protocol's streams).
_VARIANT_STREAM = 3_000_017


def _is_share(t: TraceTask) -> bool:
    return t.num_gpu == 1 and t.gpu_milli < MILLI


def _count_for_milli_share(percent: float, total: int, a: float, b: float) -> int:
    """How many of ``total`` tasks must come from a pool of mean ask ``a`` (the rest from a
    pool of mean ask ``b``) for the first pool to ask ``percent`` of the milli-GPU, in
    expectation: n a / (n a + (total - n) b) = p."""
    p = percent / 100.0
    if p <= 0.0:
        return 0
    if p >= 1.0:
        return total
    return min(total, max(0, round(p * total * b / (a * (1.0 - p) + p * b))))


def derive_variant(
    tasks: Sequence[TraceTask],
    kind: str,
    percent: float,
    seed: int,
    spec_tasks: Sequence[TraceTask] | None = None,
) -> list[TraceTask]:
    """A pod list "sampled from the default one, emphasizing certain types of workloads", as
    the FGD authors derived their trace variants (alibaba/clusterdata, cluster-trace-gpu-v2023).

    Every task is one of ``tasks`` (drawn with replacement), so every shape is real; only the
    proportions change. The measures follow the authors' published files, which
    ``../shared/data/openb`` lets us check: their ``gpushare40`` has GPU-sharing tasks asking
    40.1 % of the GPU tasks' milli-GPU (56.6 % of them by count), ``multigpu20`` multi-GPU tasks
    asking 20.4 %, ``gpuspec10`` 10.4 % of the GPU tasks (by count) restricted to models.

    - ``gpushare`` / ``multigpu``: the GPU tasks are redrawn, as many as before, so that tasks of
      that class ask ``percent`` % of their milli-GPU in expectation (the class count follows
      from the two pools' mean asks); CPU-only tasks are kept.
    - ``gpuspec``: ``percent`` % of the GPU tasks (rounded) are drawn from restricted tasks of
      ``spec_tasks`` (or of ``tasks``), shape and ``gpu_spec`` together as a row of that file
      (restrictions in the trace go with task shapes: P100 with shares, G2 with 8-GPU tasks),
      the rest from the unrestricted GPU tasks of ``tasks``; CPU-only tasks are kept.
    - ``cpu``: the GPU tasks are kept and CPU-only tasks drawn to ``percent`` % of their number
      (the task count changes, as in the authors' ``cpu050``; the protocol inflates by GPU
      ask, so the CPU-only count relative to GPU tasks is what matters).

    The result is deterministic for ``(tasks, kind, percent, seed, spec_tasks)`` and in a
    seeded random order; tasks are renamed ``<kind><percent>-<index>``.
    """
    limit = 1000.0 if kind == "cpu" else 100.0
    if kind not in VARIANT_KINDS:
        raise ValueError(f"unknown variant kind {kind!r}; choose one of {', '.join(VARIANT_KINDS)}")
    if not 0.0 <= percent <= limit:
        raise ValueError(f"{kind} percent must be between 0 and {limit:g}, got {percent:g}")
    rng = np.random.default_rng(seed + _VARIANT_STREAM)
    cpu_only = [t for t in tasks if t.num_gpu == 0]
    gpu = [t for t in tasks if t.num_gpu > 0]

    def draw(pool: Sequence[TraceTask], n: int, what: str) -> list[TraceTask]:
        if n and not pool:
            raise ValueError(f"{kind}:{percent:g} needs {what} tasks and the source has none")
        return [pool[i] for i in rng.integers(len(pool), size=n).tolist()] if n else []

    if kind == "cpu":
        out = gpu + draw(cpu_only, round(len(cpu_only) * percent / 100.0), "CPU-only")
    elif kind == "gpuspec":
        source = spec_tasks if spec_tasks is not None else tasks
        restricted = [t for t in source if t.num_gpu > 0 and t.gpu_spec]
        free = [t for t in gpu if not t.gpu_spec]
        n = round(len(gpu) * percent / 100.0)
        out = cpu_only + draw(restricted, n, "model-restricted GPU")
        out += draw(free, len(gpu) - n, "unrestricted GPU")
    else:
        member = _is_share if kind == "gpushare" else (lambda t: t.num_gpu >= 2)
        inside = [t for t in gpu if member(t)]
        outside = [t for t in gpu if not member(t)]
        mean = [
            float(np.mean([t.requested_milli for t in pool])) if pool else 1.0
            for pool in (inside, outside)
        ]
        n = _count_for_milli_share(percent, len(gpu), mean[0], mean[1])
        label = "GPU-sharing" if kind == "gpushare" else "multi-GPU"
        out = cpu_only + draw(inside, n, label) + draw(outside, len(gpu) - n, "other GPU")
    order = rng.permutation(len(out)).tolist()
    tag = f"{kind}{percent:g}"
    return [dataclasses.replace(out[i], name=f"{tag}-{j:05d}") for j, i in enumerate(order)]


def parse_variant(text: str) -> tuple[str, float]:
    """``gpushare:80`` -> ("gpushare", 80.0); ValueError naming the accepted forms."""
    kind, sep, number = text.strip().partition(":")
    kind = kind.strip().lower()
    forms = "; ".join(f"{k}:P ({v})" for k, v in VARIANT_KINDS.items())
    if not sep or kind not in VARIANT_KINDS:
        raise ValueError(f"{text!r}: expected KIND:PERCENT, one of {forms}")
    try:
        percent = float(number)
    except ValueError:
        raise ValueError(f"{text!r}: PERCENT must be a number ({forms})") from None
    limit = 1000.0 if kind == "cpu" else 100.0
    if not 0.0 <= percent <= limit:
        raise ValueError(f"{text!r}: {kind} PERCENT must be between 0 and {limit:g}")
    return kind, percent
