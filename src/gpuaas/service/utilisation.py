"""GPU utilisation over a rolling window, per device, node, job and tenant cluster.

This is the service's :class:`~gpuaas.model.telemetry.UtilisationReader`: the autoscalers, the
idle pool and metering read it; the reconciler feeds it every cycle with the samples of the
backends that are a :class:`~gpuaas.backends.base.TelemetrySource` (the simulated fleet) and
with the dcgm-exporter scrapes (:mod:`gpuaas.service.dcgm_scrape`), and tells it who holds what:
which node has which metered devices and belongs to which cluster, which job holds which of
them (from the jobs' recorded placements, in the one device naming of
:mod:`gpuaas.supply.telemetry`).

Semantics, in one paragraph each:

- **Window.** A device's summary covers the samples of the last ``window`` seconds (5 min by
  default, ``Settings.telemetry_window``): ``mean`` is the mean of those readings, ``peak`` the
  highest, ``samples`` how many, ``span`` from the oldest to the newest, ``until`` the time the
  window ends at (now), ``memory_used_bytes`` the newest memory reading. Memory is bounded per
  device whatever the sampling rate: a ring of ``buckets`` slots (60 by default, 5 s each in a
  5-min window) holding each slot's sum, count, peak and time range, so a window's edges are
  a slot wide and the ring never grows.
- **Staleness.** A window whose newest sample is older than ``stale_after`` seconds (60 by
  default, ``Settings.telemetry_stale_after``) is *unknown*: its summary has ``samples == 0``
  (``known`` is False), never a mean of 0. An idle timer fed by telemetry that stopped
  arriving (an exporter down, a backend gone) would read idle and scale in busy nodes; an
  unknown window stops it instead.
- **Aggregates.** A node, a job and a cluster are their metered devices: ``mean`` is the mean
  of the devices' means (each device weighs the same), ``peak`` the highest peak, ``samples``
  the sum, ``memory_used_bytes`` the sum. Devices never heard of are left out; if none was
  heard of the answer is None (no telemetry); if any one is unknown (stale) the aggregate is
  unknown too, so a half-reporting cluster is never read as half idle. A job on a shared GPU
  (time-sliced, MPS, a milli-GPU share) reads its GPU's utilisation, its neighbours' work
  included: DCGM cannot tell the processes on one GPU apart.
- **Cluster** keys are the ``<tenant>.<cluster>`` value of the nodes' ``gpuaas.io/cluster``
  label; a cluster's devices are those of the nodes carrying it, idle ones included (idle
  devices read 0), so it reads the cluster's utilisation, not its jobs'.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from gpuaas.engine.reasons import Reason
from gpuaas.model.telemetry import DeviceSample, UtilSource, UtilSummary
from gpuaas.service.settings import Settings

#: Defaults (``Settings.telemetry_window`` / ``telemetry_stale_after`` override them).
DEFAULT_WINDOW = 300.0
DEFAULT_STALE_AFTER = 60.0
DEFAULT_BUCKETS = 60


class DeviceWindow:
    """One device's ring of ``buckets`` slots over ``window`` seconds (see the module
    docstring). Slot ``k % buckets`` holds the samples whose time falls in
    ``[k * width, (k + 1) * width)``; a sample older than the ring's oldest slot is dropped."""

    __slots__ = (
        "counts",
        "epochs",
        "firsts",
        "lasts",
        "memory",
        "memory_total",
        "newest",
        "peaks",
        "source",
        "sums",
        "width",
    )

    def __init__(self, window: float, buckets: int = DEFAULT_BUCKETS) -> None:
        if window <= 0 or buckets < 1:
            raise ValueError(f"a window needs a positive length and slots, got {window}, {buckets}")
        self.width = window / buckets
        self.epochs = [-1] * buckets
        self.sums = [0.0] * buckets
        self.counts = [0] * buckets
        self.peaks = [0.0] * buckets
        self.firsts = [0.0] * buckets
        self.lasts = [0.0] * buckets
        self.newest = -math.inf
        self.memory = 0
        self.memory_total = 0
        self.source = UtilSource.SYNTHETIC

    @property
    def size(self) -> int:
        return len(self.epochs)

    def add(self, at: float, util: float, memory: int = 0, memory_total: int = 0) -> None:
        k = math.floor(at / self.width)
        i = k % self.size
        if self.epochs[i] != k:
            if self.epochs[i] > k:  # older than the ring holds
                return
            self.epochs[i] = k
            self.sums[i] = 0.0
            self.counts[i] = 0
            self.peaks[i] = util
            self.firsts[i] = at
            self.lasts[i] = at
        self.sums[i] += util
        self.counts[i] += 1
        self.peaks[i] = max(self.peaks[i], util)
        self.firsts[i] = min(self.firsts[i], at)
        self.lasts[i] = max(self.lasts[i], at)
        if at >= self.newest:
            self.newest = at
            self.memory = memory
            self.memory_total = memory_total

    def summary(self, until: float, stale_after: float) -> UtilSummary:
        """The window ending at ``until``; unknown (``samples == 0``) when the newest sample
        is older than ``stale_after`` or none falls in the window."""
        if until - self.newest > stale_after:
            return _unknown(self.newest)
        top = math.floor(until / self.width)
        total = 0.0
        count = 0
        peak = 0.0
        first = math.inf
        last = -math.inf
        for i, k in enumerate(self.epochs):
            if top - self.size < k <= top and self.counts[i]:
                total += self.sums[i]
                count += self.counts[i]
                peak = max(peak, self.peaks[i])
                first = min(first, self.firsts[i])
                last = max(last, self.lasts[i])
        if count == 0:
            return _unknown(self.newest)
        mean = min(max(total / count, 0.0), peak)  # float sums: never above the peak
        return UtilSummary(mean, peak, count, last - first, until, self.memory)


def _unknown(newest: float) -> UtilSummary:
    return UtilSummary(0.0, 0.0, 0, 0.0, newest if math.isfinite(newest) else 0.0)


def combine(parts: Iterable[UtilSummary | None]) -> UtilSummary | None:
    """An aggregate of device summaries (see the module docstring): None when no device was
    heard of, unknown when any heard-of device is unknown."""
    heard = [p for p in parts if p is not None]
    if not heard:
        return None
    if any(not p.known for p in heard):
        return _unknown(min(p.until for p in heard))
    return UtilSummary(
        mean=sum(p.mean for p in heard) / len(heard),
        peak=max(p.peak for p in heard),
        samples=sum(p.samples for p in heard),
        span=max(p.span for p in heard),
        until=max(p.until for p in heard),
        memory_used_bytes=sum(p.memory_used_bytes for p in heard),
    )


@dataclass(frozen=True, slots=True)
class Holding:
    """What a running job holds: its tenant, the cluster key it runs in (``""``: the shared
    pool) and its metered devices as ``(node, device)``."""

    tenant: str
    devices: tuple[tuple[str, str], ...]
    cluster: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """Why a node's telemetry is missing or partial since ``at``: a reason whose code is one
    of ``TelemetryScrapeFailed``, ``TelemetryUnreadable``, ``TelemetryPartial``."""

    reason: Reason
    at: float


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One metered device's reading for ``/metrics`` and the node view."""

    node: str
    device: str
    summary: UtilSummary
    memory_total_bytes: int
    source: UtilSource
    jobs: tuple[int, ...]


class Utilisation:
    """The rolling windows (see the module docstring). Thread-safe: the reconciler and the
    scrape thread write, requests read. ``clock`` gives the time a window ends at (the wall
    clock; tests pass their own)."""

    def __init__(
        self,
        window: float = DEFAULT_WINDOW,
        stale_after: float = DEFAULT_STALE_AFTER,
        buckets: int = DEFAULT_BUCKETS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if window <= 0:
            raise ValueError(f"window: must be positive, got {window}")
        if stale_after <= 0:
            raise ValueError(f"stale_after: must be positive, got {stale_after}")
        self.window = window
        self.stale_after = stale_after
        self.buckets = buckets
        self.clock = clock
        self._lock = threading.Lock()
        self._devices: dict[tuple[str, str], DeviceWindow] = {}
        self._fleet: dict[str, tuple[str, ...]] | None = None  # node -> metered devices
        self._clusters: dict[str, tuple[str, ...]] = {}  # cluster key -> nodes
        self._jobs: dict[int, Holding] = {}
        self._holders: dict[tuple[str, str], tuple[int, ...]] = {}
        self._conditions: dict[str, NodeCondition] = {}

    @classmethod
    def of(cls, settings: Settings) -> Utilisation:
        """The windows a server's settings ask for."""
        return cls(settings.telemetry_window, settings.telemetry_stale_after)

    # --- writing ------------------------------------------------------------------------

    def record(self, samples: Iterable[DeviceSample]) -> int:
        """Take readings in; returns how many were kept (a device the fleet does not have,
        once the fleet is known, is not)."""
        kept = 0
        with self._lock:
            fleet = self._fleet
            for s in samples:
                key = (s.node, s.device)
                ring = self._devices.get(key)
                if ring is None:
                    if fleet is not None and s.device not in fleet.get(s.node, ()):
                        continue
                    ring = self._devices[key] = DeviceWindow(self.window, self.buckets)
                ring.add(s.at, min(max(s.util, 0.0), 1.0), s.memory_used_bytes,
                         s.memory_total_bytes)  # fmt: skip
                ring.source = s.source
                kept += 1
        return kept

    def set_fleet(self, nodes: Mapping[str, tuple[Iterable[str], str]]) -> None:
        """The fleet as it is: per node its metered devices and its cluster key (``""``:
        none). Windows of devices no longer in the fleet are dropped (bounded memory)."""
        fleet = {name: tuple(devices) for name, (devices, _) in nodes.items()}
        clusters: dict[str, list[str]] = {}
        for name, (_, cluster) in nodes.items():
            if cluster:
                clusters.setdefault(cluster, []).append(name)
        with self._lock:
            self._fleet = fleet
            self._clusters = {k: tuple(sorted(v)) for k, v in clusters.items()}
            for key in [k for k in self._devices if k[1] not in fleet.get(k[0], ())]:
                del self._devices[key]
            for name in [n for n in self._conditions if n not in fleet]:
                del self._conditions[name]

    def set_holdings(self, jobs: Mapping[int, Holding]) -> None:
        """The running jobs and what they hold (replaces the previous set)."""
        holders: dict[tuple[str, str], list[int]] = {}
        for job_id, holding in jobs.items():
            for key in holding.devices:
                holders.setdefault(key, []).append(job_id)
        with self._lock:
            self._jobs = dict(jobs)
            self._holders = {k: tuple(sorted(v)) for k, v in holders.items()}

    def set_condition(self, node: str, condition: NodeCondition | None) -> None:
        """A node's telemetry trouble (None: it reports fine)."""
        with self._lock:
            if condition is None:
                self._conditions.pop(node, None)
            else:
                self._conditions[node] = condition

    # --- reading: the UtilisationReader -------------------------------------------------

    def device(self, node: str, device: str) -> UtilSummary | None:
        now = self.clock()
        with self._lock:
            return self._device(node, device, now)

    def node(self, node: str) -> UtilSummary | None:
        now = self.clock()
        with self._lock:
            return combine(self._device(node, d, now) for d in self._node_devices(node))

    def job(self, job_id: int) -> UtilSummary | None:
        now = self.clock()
        with self._lock:
            holding = self._jobs.get(job_id)
            if holding is None:
                return None
            return combine(self._device(n, d, now) for n, d in holding.devices)

    def cluster(self, key: str) -> UtilSummary | None:
        now = self.clock()
        with self._lock:
            return combine(
                self._device(n, d, now)
                for n in self._clusters.get(key, ())
                for d in self._node_devices(n)
            )

    # --- reading: views -----------------------------------------------------------------

    def holding(self, job_id: int) -> Holding | None:
        with self._lock:
            return self._jobs.get(job_id)

    def condition(self, node: str) -> NodeCondition | None:
        with self._lock:
            return self._conditions.get(node)

    def conditions(self) -> dict[str, NodeCondition]:
        with self._lock:
            return dict(self._conditions)

    def node_rows(self, node: str) -> list[DeviceRow]:
        """Each metered device of ``node`` that was heard of, with its summary and holders."""
        now = self.clock()
        with self._lock:
            return [r for d in self._node_devices(node) if (r := self._row(node, d, now))]

    def rows(self) -> Iterator[DeviceRow]:
        """Every device heard of (for ``/metrics``), by node and device."""
        now = self.clock()
        with self._lock:
            keys = sorted(self._devices)
            rows = [r for n, d in keys if (r := self._row(n, d, now))]
        yield from rows

    def jobs(self) -> dict[int, Holding]:
        with self._lock:
            return dict(self._jobs)

    def clusters(self) -> list[str]:
        with self._lock:
            return sorted(self._clusters)

    # --- inside the lock ----------------------------------------------------------------

    def _device(self, node: str, device: str, now: float) -> UtilSummary | None:
        ring = self._devices.get((node, device))
        return None if ring is None else ring.summary(now, self.stale_after)

    def _node_devices(self, node: str) -> tuple[str, ...]:
        if self._fleet is not None and node in self._fleet:
            return self._fleet[node]
        return tuple(sorted(d for n, d in self._devices if n == node))

    def _row(self, node: str, device: str, now: float) -> DeviceRow | None:
        ring = self._devices.get((node, device))
        if ring is None:
            return None
        return DeviceRow(node, device, ring.summary(now, self.stale_after), ring.memory_total,
                         ring.source, self._holders.get((node, device), ()))  # fmt: skip
