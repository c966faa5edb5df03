"""Usage records carry the measured utilisation in the running service: the server's start
and the reconciler give metering the very telemetry windows the API reads, so a job a
user cancels and a job that finishes on its own are both recorded with their devices'
measured mean (each device's, in the one device naming), read back through
``GET /v1/tenants/{tenant}/usage``."""

from __future__ import annotations

import pytest
from test_clusters_api import World, job
from test_utilisation_api import (
    WINDOW,
    running,
    world,  # noqa: F401  (the app and its fed reconciler, a fixture)
)


def gpu_records(w: World, job_id: int) -> list[dict[str, object]]:
    page = w.ok("GET", f"/v1/tenants/acme/usage?job={job_id}", w.admin())
    return [r for r in page["items"] if r["device"] not in ("cpu", "memory")]


def test_a_cancelled_and_a_finished_job_are_recorded_with_their_measured_utilisation(
    world: World,  # noqa: F811
) -> None:
    w = world
    cancelled = w.submit("acme", job("busy", gpus=2, utilization={"gpu": 70}))
    finished = w.submit("acme", job("short", gpus=1, duration=WINDOW + 2, utilization={"gpu": 30}))
    running(w, cancelled, finished)

    w.ok("POST", f"/v1/tenants/acme/jobs/{cancelled}/cancel", w.user())
    w.settle(lambda: w.job(cancelled).state == "Cancelled")
    records = gpu_records(w, cancelled)
    assert len(records) >= 2
    for record in records:
        assert record["utilization"] == pytest.approx(0.7, abs=0.05), record

    w.settle(lambda: w.job(finished).state == "Succeeded", seconds=30)
    records = gpu_records(w, finished)
    assert records
    for record in records:
        assert record["utilization"] == pytest.approx(0.3, abs=0.05), record
