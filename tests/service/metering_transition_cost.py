"""Metering's CPU per job transition, in-process (not a test: a measurement for
docs/benchmarks.md, "Metering's cost per transition").

A SQLite world of two nodes (tests' ``job_world``), eight one-GPU jobs admitted by the real
reconciler, then ``rounds`` x 8 closes and opens (``usage.close``/``usage.open_``, each in a
transaction of its own, as ``jobs.transition`` calls them), timed with ``process_time``
(SQLite runs in the process, so its work counts). ``--profile`` prints cProfile's top entries.

    PYTHONPATH=src:tests/service python tests/service/metering_transition_cost.py 60
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from job_world import build_world, job_spec

from gpuaas.service import usage
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Tenant

T0 = datetime(2026, 11, 30, 22, tzinfo=UTC).timestamp()


def main(rounds: int, profile: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gpuaas-metering-cost-"))
    db = Database(f"sqlite:///{tmp}/m.db")
    world = build_world(db, quota_gpus=16, nodes=2)
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        for i in range(16):
            spec = JobSpec.model_validate(job_spec(f"j{i}", gpus=1, duration=10**6))
            submit_job(s, tenant, world["alice"], spec, T0)
    reconciler = Reconciler(db, Settings(db_url=db.url, data_dir=tmp))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    reconciler.stop()
    with db.sessions() as s:
        jobs = sorted(usage.open_jobs(s))

    def work(t: float) -> float:
        for _ in range(rounds):
            for job in jobs:
                t += 0.37
                with db.session() as s:
                    usage.close(s, job, t)
                with db.session() as s:
                    usage.open_(s, job, t)
        return t

    t = work(T0 + 10)  # warm: caches, compiled statements
    c0 = time.process_time()
    t = work(t)
    cpu = time.process_time() - c0
    n = 2 * rounds * len(jobs)
    print(f"jobs {len(jobs)}, transitions {n}, CPU {1000 * cpu / n:.3f} ms per transition")
    if profile:
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        work(t)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    db.dispose()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, "--profile" in sys.argv)
