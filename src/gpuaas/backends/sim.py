"""The simulated fleet: a job "runs" on its placement for its duration, in real time.

A job runs for ``spec.duration`` seconds, or, when it declares none, for a duration drawn from
its id (deterministic: the same job always takes as long), bounded by ``maxRunTime``; divided by
``speed`` so a demo moves faster than life. Time is whatever :meth:`SimBackend.poll` is told, so
tests drive it without sleeping. A job launched with ``started_at`` (after a restart) keeps its
original start, so nothing in flight is lost or run twice.

It is a :class:`~gpuaas.backends.base.TelemetrySource`: told the fleet's nodes
(:meth:`SimBackend.observe_fleet`), it reads every metered device at each :meth:`samples`
call, synthesised from the running jobs' declared profiles (:mod:`gpuaas.backends.sim_telemetry`;
idle devices read 0), the same for the same ``seed``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from gpuaas.backends.base import DEFAULT_GRACE, BackendEvent, BackendJob, EventKind
from gpuaas.backends.sim_telemetry import Synthesiser
from gpuaas.model.node import Node
from gpuaas.model.telemetry import DeviceSample

#: Sampled durations (seconds of job time): log-uniform between a minute and two hours.
SAMPLED_MIN = 60.0
SAMPLED_MAX = 7200.0


def sampled_duration(job_id: int) -> float:
    """A duration for a job that declares none, the same for the same id."""
    u = random.Random(job_id * 2654435761 % 2**32).random()
    return math.exp(math.log(SAMPLED_MIN) + u * (math.log(SAMPLED_MAX) - math.log(SAMPLED_MIN)))


def job_duration(job: BackendJob) -> float:
    """Seconds of job time ``job`` runs on the simulated fleet."""
    declared = job.spec.get("duration")
    if declared is not None:
        return float(declared)
    duration = sampled_duration(job.id)
    limit = job.spec.get("maxRunTime")
    return min(duration, float(limit)) if limit is not None else duration


@dataclass(slots=True)
class _Run:
    job: BackendJob
    started_at: float | None  # None: launched, starts at the next poll
    ends_at: float = math.inf
    reported_start: bool = False


class SimBackend:
    """Jobs run for their duration / ``speed`` wall seconds from their start."""

    name = "sim"
    #: in memory and on the caller's clock: called inline, within the reconciler's step
    blocking = False

    def __init__(self, speed: float = 1.0, seed: int = 0) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.time_scale = speed
        self._runs: dict[int, _Run] = {}
        self._telemetry = Synthesiser(seed, speed)

    def observe_fleet(self, nodes: Iterable[Node]) -> None:
        """The nodes whose devices :meth:`samples` reads (the reconciler passes this
        backend's nodes whenever the fleet changes)."""
        self._telemetry.set_nodes(nodes)

    def samples(self, now: float) -> list[DeviceSample]:
        """Every device of the observed nodes read at ``now`` (a job reads from its start)."""
        runs = [
            (job_id, run.job.spec, run.started_at, run.job.pods)
            for job_id, run in sorted(self._runs.items())
            if run.started_at is not None and run.started_at <= now
        ]
        return self._telemetry.samples(now, runs)

    def launch(self, job: BackendJob) -> None:
        run = _Run(job, job.started_at, reported_start=job.started_at is not None)
        if job.started_at is not None:
            run.ends_at = job.started_at + job_duration(job) / self.time_scale
        self._runs[job.id] = run

    def cancel(self, job_id: int, grace: float = DEFAULT_GRACE) -> None:
        self._runs.pop(job_id, None)

    def running(self) -> set[int]:
        return set(self._runs)

    def poll(self, now: float) -> list[BackendEvent]:
        events: list[BackendEvent] = []
        for job_id, run in sorted(self._runs.items()):
            if run.started_at is None:
                run.started_at = now
                run.ends_at = now + job_duration(run.job) / self.time_scale
            if not run.reported_start:
                run.reported_start = True
                events.append(BackendEvent(job_id, EventKind.STARTED, run.started_at))
        done = sorted(
            (run.ends_at, job_id) for job_id, run in self._runs.items() if run.ends_at <= now
        )
        for ends_at, job_id in done:
            del self._runs[job_id]
            events.append(BackendEvent(job_id, EventKind.SUCCEEDED, ends_at, "completed"))
        return events
