"""A diurnal workload: tenants whose demand rises by day and falls at night.

The model, so a figure measured on it can be read:

- **Arrivals** are a non-homogeneous Poisson process per tenant (drawn by thinning), with a
  sinusoidal day: ``rate(t) = mean x (1 + a cos(2 pi (t - peak_hour) / 1 day))``. Jobs run for a
  while, so the *load* (GPUs the arrived jobs would hold if they all ran at once) follows the
  rate smoothed by the run times; ``a`` is chosen so that the load, not the arrival rate, swings
  ``peak_to_trough`` : 1 (the smoothing of a sinusoid by run times D is the factor
  ``|E[1 - exp(-i w D)]| / (w E[D])``, computed on a fixed sample of the duration law). When even
  ``a = 1`` (no arrivals at the trough) cannot reach the ratio, ``a`` is 1 and the generator says
  so through :func:`load_profile` (the measured ratio).
- **Level**: at the peak hour the load is ``peak_load`` of the ``gpus`` it is sized for.
- **Sizes** (GPUs per job) are drawn by count from a distribution: the ITP trace's own
  (:func:`itp_sizes`, e.g. cluster04: 75 % of jobs ask 1 GPU, 18 % ask 8, a few 16-64) or the
  built-in :data:`DEFAULT_SIZES` close to it. Jobs of more than 8 GPUs are gangs of 8-GPU pods
  (:func:`~gpuaas.sim.traces.itp_workload`).
- **Run times** are lognormal (median ``duration_median``, ``duration_sigma``), cut at
  ``duration_max``. ITP's own run times (median 2.2 h, a tail of days) would smooth a day's
  cycle away, which is why they are not used here: replay the ITP trace itself
  (``--trace itp:``) to see its timestamps.
- **Tenants** share the load equally; each job belongs to one tenant (its cluster). A tenant's
  day may be shifted (``phase_hours``), e.g. a second site in another time zone.

Everything is deterministic for a seed.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

from gpuaas.model.errors import InvalidValue
from gpuaas.sim.traces import SimJob, TraceError, itp_workload

DAY = 86400.0

#: GPUs per job by count, close to ITP cluster04's (1: 75 %, 8: 18 %, the rest 2-64).
DEFAULT_SIZES: tuple[tuple[int, float], ...] = (
    (1, 0.75),
    (2, 0.01),
    (4, 0.03),
    (8, 0.18),
    (16, 0.015),
    (32, 0.01),
    (64, 0.005),
)


@dataclass(frozen=True, slots=True)
class DiurnalSpec:
    """What the generator makes (see the module docstring for the model)."""

    gpus: int
    days: float = 7.0
    peak_to_trough: float = 10.0
    peak_load: float = 0.7
    peak_hour: float = 14.0
    tenants: int = 4
    phase_hours: tuple[float, ...] = ()
    sizes: tuple[tuple[int, float], ...] = DEFAULT_SIZES
    max_job_gpus: int = 0  # larger sizes are dropped (0: keep all)
    duration_median: float = 1200.0
    duration_sigma: float = 1.0
    duration_max: float = 6 * 3600.0
    checkpoint: float = 600.0
    seed: int = 0

    def validate(self) -> None:
        if self.gpus < 1:
            raise InvalidValue("gpus", f"must be at least 1, got {self.gpus}")
        if not 0 < self.days <= 366:
            raise InvalidValue("days", f"must be in (0, 366], got {self.days:g}")
        if self.peak_to_trough < 1:
            raise InvalidValue("peak_to_trough", f"must be at least 1, got {self.peak_to_trough:g}")
        if not 0 < self.peak_load <= 10:
            raise InvalidValue("peak_load", f"must be in (0, 10], got {self.peak_load:g}")
        if self.tenants < 1:
            raise InvalidValue("tenants", f"must be at least 1, got {self.tenants}")
        if len(self.phase_hours) > self.tenants:
            raise InvalidValue("phase_hours", "has more entries than there are tenants")
        if self.duration_median <= 0 or self.duration_sigma < 0:
            raise InvalidValue("duration", "needs a median > 0 and a sigma >= 0")
        if self.duration_max < self.duration_median:
            raise InvalidValue("duration_max", "must be at least the median")
        if not self.kept_sizes():
            raise InvalidValue("sizes", "no size with a positive weight fits max_job_gpus")

    def kept_sizes(self) -> list[tuple[int, float]]:
        cap = self.max_job_gpus or math.inf
        return [(g, w) for g, w in self.sizes if g >= 1 and w > 0 and g <= cap]


def itp_sizes(path: str | PathLike[str]) -> tuple[tuple[int, float], ...]:
    """The GPUs-per-job distribution (by count) of an ITP ``clusterNN.csv``."""
    path = Path(path)
    counts: dict[int, int] = {}
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            for line, row in enumerate(csv.DictReader(fh), start=2):
                try:
                    gpus = int(float(row["num_gpu"]))
                except (KeyError, TypeError, ValueError):
                    raise TraceError(f"{path}: line {line}: num_gpu: expected a number") from None
                if gpus >= 1:
                    counts[gpus] = counts.get(gpus, 0) + 1
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    total = sum(counts.values())
    if not total:
        raise TraceError(f"{path}: no jobs")
    return tuple((g, c / total) for g, c in sorted(counts.items()))


def _mean_clipped_lognormal(median: float, sigma: float, cap: float) -> float:
    """E[min(D, cap)] for D lognormal(ln median, sigma)."""
    if sigma == 0:
        return min(median, cap)
    mu = math.log(median)
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    z = (math.log(cap) - mu) / sigma
    return math.exp(mu + sigma**2 / 2) * phi(z - sigma) + cap * (1 - phi(z))


def smoothing(spec: DiurnalSpec) -> float:
    """How much of a daily sinusoid in the arrival rate survives in the load (0..1), for the
    spec's run-time law (a fixed sample, so it does not move with the seed)."""
    rng = np.random.default_rng(12345)
    d = np.minimum(
        rng.lognormal(math.log(spec.duration_median), spec.duration_sigma, 200_000),
        spec.duration_max,
    )
    w = 2 * math.pi / DAY
    return float(abs(np.mean(1 - np.exp(-1j * w * d))) / (w * d.mean()))


def amplitude(spec: DiurnalSpec) -> float:
    """The rate's relative amplitude ``a`` that gives the load its peak-to-trough (at most 1)."""
    wanted = (spec.peak_to_trough - 1) / (spec.peak_to_trough + 1)
    return min(1.0, wanted / smoothing(spec))


def diurnal_jobs(spec: DiurnalSpec) -> list[SimJob]:
    """The jobs of ``spec``, sorted by arrival; job names are ``<tenant>-<n>``, tenants
    ``t0``, ``t1``, ...; every job checkpoints every ``spec.checkpoint`` seconds."""
    spec.validate()
    rng = np.random.default_rng(spec.seed)
    sizes = spec.kept_sizes()
    choices = np.array([g for g, _ in sizes], dtype=np.int64)
    weights = np.array([w for _, w in sizes], dtype=float)
    weights /= weights.sum()
    mean_gpus = float((choices * weights).sum())
    mean_run = _mean_clipped_lognormal(spec.duration_median, spec.duration_sigma, spec.duration_max)
    a = amplitude(spec)
    smooth = smoothing(spec)
    # load(t) = L (1 + a s cos): the peak L (1 + a s) is peak_load x gpus
    mean_load = spec.peak_load * spec.gpus / (1 + a * smooth)
    rate = mean_load / (mean_gpus * mean_run)  # jobs per second, all tenants
    horizon = spec.days * DAY
    per_tenant = rate / spec.tenants
    jobs: list[SimJob] = []
    w = 2 * math.pi / DAY
    for k in range(spec.tenants):
        tenant = f"t{k}"
        phase = spec.phase_hours[k] if k < len(spec.phase_hours) else 0.0
        peak_at = (spec.peak_hour + phase) * 3600.0
        top = per_tenant * (1 + a)
        n = rng.poisson(top * horizon)
        times = np.sort(rng.uniform(0.0, horizon, n))
        keep = rng.uniform(0.0, 1.0, n) < (1 + a * np.cos(w * (times - peak_at))) / (1 + a)
        times = times[keep]
        m = len(times)
        gpus = rng.choice(choices, size=m, p=weights)
        runs = np.minimum(
            rng.lognormal(math.log(spec.duration_median), spec.duration_sigma, m),
            spec.duration_max,
        )
        for j in range(m):
            name = f"{tenant}-{j:06d}"
            run = max(1.0, round(float(runs[j]), 3))
            jobs.append(
                SimJob(
                    name=name,
                    submit=round(float(times[j]), 3),
                    duration=run,
                    workload=itp_workload(name, int(gpus[j])),
                    tenant=tenant,
                    checkpoint=spec.checkpoint,
                )
            )
    jobs.sort(key=lambda j: (j.submit, j.name))
    return jobs


def load_profile(jobs: Sequence[SimJob], bucket: float = 3600.0) -> np.ndarray:
    """Mean GPUs the jobs would hold per ``bucket`` of time if each ran at its arrival (the
    offered load, before any queueing)."""
    if not jobs:
        return np.zeros(0)
    start = min(j.submit for j in jobs)
    end = max(j.submit + j.duration for j in jobs)
    n = max(1, math.ceil((end - start) / bucket))
    gpu_s = np.zeros(n)
    for job in jobs:
        g = job.milli_gpu / 1000.0
        lo, hi = job.submit - start, job.submit - start + job.duration
        b0, b1 = int(lo // bucket), min(int(hi // bucket), n - 1)
        if b0 == b1:
            gpu_s[b0] += g * (hi - lo)
            continue
        gpu_s[b0] += g * ((b0 + 1) * bucket - lo)
        gpu_s[b0 + 1 : b1] += g * bucket
        gpu_s[b1] += g * (hi - b1 * bucket)
    return gpu_s / bucket


def peak_to_trough(jobs: Sequence[SimJob], days: float) -> float:
    """The offered load's peak-to-trough: the hour of the day with the most load over the one
    with the least, each averaged over the days after the first (the first starts empty); NaN
    for less than a day."""
    prof = load_profile(jobs)
    if len(prof) < 24:
        return math.nan  # less than a day: no day to compare hours within
    whole = int(days)
    if whole < 2 or len(prof) < whole * 24:
        hours = prof[: max(24, len(prof) // 24 * 24)]
    else:
        hours = prof[24 : whole * 24]
    by_hour = hours[: len(hours) // 24 * 24].reshape(-1, 24).mean(axis=0)
    low = float(by_hour.min())
    return float(by_hour.max()) / low if low > 0 else math.inf
