"""The simulated fleet: durations (declared, sampled, bounded), speed, resume and cancel."""

from __future__ import annotations

import pytest

from gpuaas.backends import BackendJob, EventKind, SimBackend
from gpuaas.backends.sim import SAMPLED_MAX, SAMPLED_MIN, job_duration, sampled_duration


def job(job_id: int, **spec: object) -> BackendJob:
    return BackendJob(job_id, f"job-{job_id}", dict(spec))


def kinds(events: list) -> list[tuple[int, str, float]]:
    return [(e.job_id, e.kind.value, e.at) for e in events]


def test_a_job_starts_at_the_next_poll_and_ends_after_its_duration_over_speed() -> None:
    backend = SimBackend(speed=10)
    backend.launch(job(1, duration=100))
    assert kinds(backend.poll(50.0)) == [(1, "started", 50.0)]
    assert backend.poll(59.9) == []
    assert kinds(backend.poll(61.0)) == [(1, "succeeded", 60.0)]
    assert backend.running() == set()


def test_completions_come_in_time_order_after_the_starts() -> None:
    backend = SimBackend()
    backend.launch(job(1, duration=30))
    backend.launch(job(2, duration=10))
    assert [e.kind for e in backend.poll(0.0)] == [EventKind.STARTED, EventKind.STARTED]
    assert kinds(backend.poll(100.0)) == [(2, "succeeded", 10.0), (1, "succeeded", 30.0)]


def test_sampled_durations_are_deterministic_and_bounded() -> None:
    samples = [sampled_duration(i) for i in range(1, 200)]
    assert samples == [sampled_duration(i) for i in range(1, 200)]
    assert all(SAMPLED_MIN <= d <= SAMPLED_MAX for d in samples)
    assert len(set(samples)) > 150  # not one value for everyone
    long = next(i for i in range(1, 1000) if sampled_duration(i) > 600)
    assert job_duration(job(long, maxRunTime=600)) == 600
    assert job_duration(job(long)) == sampled_duration(long)
    assert job_duration(job(long, duration=5, maxRunTime=1)) == 5  # declared wins: it may overrun


def test_a_resumed_job_keeps_its_original_start() -> None:
    backend = SimBackend(speed=2)
    backend.launch(BackendJob(7, "resumed", {"duration": 100}, started_at=1000.0))
    assert backend.poll(1020.0) == []  # no second "started": it was running before the restart
    assert kinds(backend.poll(1050.0)) == [(7, "succeeded", 1050.0)]


def test_cancelled_jobs_report_nothing() -> None:
    backend = SimBackend()
    backend.launch(job(1, duration=10))
    backend.poll(0.0)
    backend.cancel(1)
    backend.cancel(99)  # unknown ids are ignored
    assert backend.poll(100.0) == []


def test_speed_must_be_positive() -> None:
    with pytest.raises(ValueError, match="speed"):
        SimBackend(speed=0)
