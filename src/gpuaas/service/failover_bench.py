"""``gpuaas bench failover``: how soon a new leader admits, and how soon it has the whole backlog.

The world: ``tenants`` tenants, each with a LocalQueue into a ClusterQueue of its own, all in
one cohort (nominal quota an equal share of the fleet, borrowing allowed), two priority
classes, ``nodes`` nodes of 8 H100s. A first leader admits until the fleet is full (jobs of
1, 2, 4 and 8 GPUs running for hours on the simulated backend) and stops; then ``pending``
jobs are written straight into the table in the rows :func:`gpuaas.service.jobs.prepare_job`
makes (a hundred thousand submissions through the API would time the API, not the leader),
and ``freed`` of the running jobs are marked Succeeded, as if they ended while no process led:
their devices are what the new leader can admit onto.

Then, twice on the same database:

- *restart*: a new :class:`~gpuaas.service.reconciler.Reconciler` steps on the wall clock from
  its construction;
- *takeover*: a second reconciler steps beside a leader (and is refused the lock) until the
  leader stops; from that moment it takes the lock and leads.

Each reports the seconds (wall and this process's CPU) from its start to the end of the step
that stored its first admission, and to the end of the step after which every pending job of the
database was in its engine.

And, on request, a real takeover (*kill*, :func:`kill`): two ``gpuaas serve`` processes on the
database, the leader killed with SIGKILL, timed from the kill to the standby's first admission
(wall, and the standby's reconciler process's CPU).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select, text, update

from gpuaas.model.job_state import ACTIVE, JobState
from gpuaas.service.fleet import register_nodes
from gpuaas.service.governance import put_objects
from gpuaas.service.jobs import prepare_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Membership, Tenant, User

KUEUE = "kueue.x-k8s.io/v1beta2"
GPUS_PER_NODE = 8
SIZES = (1, 1, 1, 2, 2, 4, 8)  # GPUs per job, drawn uniformly
CHUNK = 5_000
#: the first leader's start: recent, so running jobs have no whole hour of usage to meter yet
T0 = time.time() - 600


def governance(tenants: int, gpus: int) -> list[dict[str, Any]]:
    """A flavor, one ClusterQueue per tenant in one cohort, the tenants' LocalQueues, and
    priority classes ``high`` (1000) and ``low`` (0)."""
    share = max(1, gpus // tenants)
    docs: list[dict[str, Any]] = [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "h100"}, "spec": {}},
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
         "value": 1000},
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "low"},
         "value": 0},
    ]  # fmt: skip
    for t in range(tenants):
        docs.append(
            {
                "apiVersion": KUEUE,
                "kind": "ClusterQueue",
                "metadata": {"name": f"cq-{t}"},
                "spec": {
                    "cohortName": "all",
                    "namespaceSelector": {},
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "h100",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": str(share * 16)},
                                        {"name": "memory", "nominalQuota": f"{share * 64}Gi"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": share},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        docs.append(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": "default", "namespace": f"t{t}"},
                "spec": {"clusterQueue": f"cq-{t}"},
            }
        )
    return docs


def spec(name: str, gpus: int, priority: str, hours: float) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "training",
        "queue": "default",
        "priorityClass": priority,
        "command": ["python", "train.py"],
        "duration": hours * 3600,
        "podSets": [
            {"name": "main", "count": 1, "resources": {"cpu": str(2 * gpus),
                                                        "memory": f"{8 * gpus}Gi",
                                                        "nvidia.com/gpu": gpus}}
        ],
    }  # fmt: skip


@dataclass(frozen=True, slots=True)
class World:
    tenants: list[tuple[Tenant, int]]  # (tenant, its user id)
    nodes: int


def build(db: Database, tenants: int, nodes: int) -> World:
    db.upgrade()
    out = []
    with db.session() as s:
        for t in range(tenants):
            tenant = Tenant(name=f"t{t}", display_name=f"T{t}", capacity={}, created_at=0.0)
            user = User(name=f"u{t}", created_at=0.0)
            s.add_all([tenant, user])
            s.flush()
            s.add(Membership(user_id=user.id, tenant_id=tenant.id, role="tenant-user",
                             created_at=0.0))  # fmt: skip
            out.append((tenant, user.id))
        put_objects(s, [(d, None, None) for d in governance(tenants, nodes * GPUS_PER_NODE)], 0.0)
        register_nodes(s, [{"name": "node-{i}", "count": nodes, "cpu": "128", "memory": "1Ti",
                            "gpus": {"model": "H100-80GB", "count": GPUS_PER_NODE},
                            "topology": {"zone": "z1", "rack": "rack-{i}"}}], 0.0)  # fmt: skip
        s.expunge_all()
    return World(out, nodes)


def _rows(db: Database, world: World, count: int, at: float, rng: random.Random) -> list[dict]:
    """``count`` prepared job rows (one :func:`prepare_job` per tenant x size x priority, then
    copied with a name and a creation time of their own)."""
    templates: dict[tuple[int, int, str], dict[str, Any]] = {}
    with db.session() as s:
        for t, (tenant, user) in enumerate(world.tenants):
            for gpus in sorted(set(SIZES)):
                for priority in ("high", "low"):
                    doc = JobSpec.model_validate(spec("x", gpus, priority, 6.0))
                    templates[(t, gpus, priority)] = prepare_job(s, tenant, user, doc, at)
        s.rollback()
    rows = []
    for i in range(count):
        t = rng.randrange(len(world.tenants))
        key = (t, rng.choice(SIZES), "high" if rng.random() < 0.2 else "low")
        row = dict(templates[key])
        row["name"] = f"j{i}"
        row["spec"] = {**row["spec"], "name": f"j{i}"}
        row["created_at"] = row["updated_at"] = at + i * 1e-3
        rows.append(row)
    return rows


def insert_rows(db: Database, rows: list[dict[str, Any]]) -> None:
    for i in range(0, len(rows), CHUNK):
        with db.session() as s:
            s.execute(insert(Job), rows[i : i + CHUNK])


def seed(db: Database, world: World, settings: Settings, pending: int, seed: int = 1) -> None:
    """A full fleet (admitted by a first leader, which then stops) and ``pending`` jobs behind
    it (the first leader's own leftovers among them)."""
    rng = random.Random(seed)
    first = _rows(db, world, world.nodes * GPUS_PER_NODE, T0, rng)  # more than fits
    insert_rows(db, first)
    leader = Reconciler(db, settings)
    try:
        for k in range(3):
            leader.step(T0 + 1 + k)
    finally:
        leader.stop()
    with db.session() as s:  # what the first leader did not admit joins the backlog
        s.execute(update(Job).where(Job.state == JobState.PENDING.value).values(
            created_at=T0 + 10 + Job.id * 1e-3, updated_at=T0 + 10))  # fmt: skip
    insert_rows(db, _rows(db, world, pending - _count(db, JobState.PENDING), T0 + 1_000, rng))


def free(db: Database, count: int, seed: int = 1) -> None:
    """``count`` running jobs end while no process leads (the new leader admits onto them)."""
    rng = random.Random(seed)
    with db.session() as s:
        active = list(s.scalars(select(Job.id).where(Job.state.in_([a.value for a in ACTIVE]))
                                .order_by(Job.id)))  # fmt: skip
        ended = rng.sample(active, min(count, len(active)))
        s.execute(update(Job).where(Job.id.in_(ended)).values(
            state=JobState.SUCCEEDED.value, finished_at=T0 + 20, updated_at=T0 + 20))  # fmt: skip


def empty(db: Database) -> None:
    """Drop every table of a PostgreSQL database the benchmark was given empty (checked by the
    command first), so the next run starts from nothing."""
    with db.engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))


def _count(db: Database, state: JobState) -> int:
    with db.sessions() as s:
        return s.scalar(select(func.count()).select_from(Job).where(Job.state == state.value)) or 0


@dataclass(frozen=True, slots=True)
class Timing:
    """From a leader's start: to the end of the step that stored its first admission, and to
    the end of the step after which the whole backlog was in its engine (wall and CPU s)."""

    first_admission: float
    first_admission_cpu: float
    full_load: float
    full_load_cpu: float
    steps_to_full_load: int
    admitted_at_first: int

    def to_json(self) -> dict[str, float | int | None]:
        def seconds(value: float) -> float | None:
            return None if math.isnan(value) else round(value, 3)

        return {
            "first_admission_s": round(self.first_admission, 3),
            "first_admission_cpu_s": round(self.first_admission_cpu, 3),
            "full_load_s": seconds(self.full_load),
            "full_load_cpu_s": seconds(self.full_load_cpu),
            "steps_to_full_load": self.steps_to_full_load,
            "admitted_by_first_admission": self.admitted_at_first,
        }


def _admitted_since(db: Database, start: float) -> int:
    """Jobs admitted at ``start`` or later (the reconciler stamps its step's time)."""
    with db.sessions() as s:
        return s.scalar(select(func.count()).select_from(Job).where(
            Job.admitted_at >= start)) or 0  # fmt: skip


def lead(db: Database, reconciler: Reconciler, interval: float, limit: float = 900.0) -> Timing:
    """Step ``reconciler`` every ``interval`` s (as the reconciler's loop does) from now until
    it has admitted and holds every pending job of the database; the clock starts now."""
    start = time.time()
    wall, cpu = time.perf_counter(), time.process_time()
    first: tuple[float, float, int] | None = None
    full: tuple[float, float, int] | None = None
    steps = 0
    while first is None or full is None:
        if time.perf_counter() - wall > limit:
            raise TimeoutError(f"no admission or no full load after {limit:.0f} s")
        assert reconciler.step(time.time()), "the reconciler does not lead"
        steps += 1
        at = (time.perf_counter() - wall, time.process_time() - cpu)
        if first is None:
            admitted = _admitted_since(db, start)
            if admitted > 0:
                first = (*at, admitted)
        if full is None and getattr(reconciler, "loaded", True):
            full = (*at, steps)
        time.sleep(interval)
    return Timing(first[0], first[1], full[0], full[1], full[2], first[2])


def restart(db: Database, settings: Settings, freed: int) -> Timing:
    """The leader died; ``freed`` jobs ended meanwhile; a new process starts and leads."""
    free(db, freed)
    reconciler = Reconciler(db, settings)
    try:
        return lead(db, reconciler, settings.reconcile_interval)
    finally:
        reconciler.stop()


def takeover(db: Database, settings: Settings, freed: int) -> Timing:
    """A standby is refused the lock while a leader leads; the leader stops (its lock is free);
    the clock starts then, and the standby steps until it leads, admits and has loaded all."""
    leader = Reconciler(db, settings)
    standby = Reconciler(db, settings)
    try:
        assert leader.step(time.time())
        assert not standby.step(time.time())
        leader.stop()
        free(db, freed)  # (not timed: a database write the dead leader's jobs would make)
        return lead(db, standby, settings.reconcile_interval)
    finally:
        leader.stop()
        standby.stop()


# --- a real takeover: two servers on one database, the leader killed ----------------------


def _children(pid: int) -> list[int]:
    """``pid``'s child processes (Linux: /proc/PID/task/*/children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Server:
    """``gpuaas serve --db URL`` on a free port, its output in ``log``; :meth:`health` polls
    ``/healthz`` (which says whether the process leads)."""

    def __init__(self, db_url: str, data_dir: Path, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log = log
        command = [sys.executable, "-c", "from gpuaas.cli.main import app; app()", "serve",
                   "--db", db_url, "--data-dir", str(data_dir),
                   "--port", str(self.port)]  # fmt: skip
        env = dict(os.environ, GPUAAS_ADMIN_TOKEN=secrets.token_urlsafe(24))
        with log.open("ab") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=out)

    def health(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return dict(json.loads(r.read()))
        except (OSError, ValueError):
            return None

    def wait(self, leader: bool | None, limit: float) -> None:
        """Until ``/healthz`` answers (and says ``leader``, unless None)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()[-2000:]}")
            health = self.health()
            if health is not None and (leader is None or health.get("leader") is leader):
                return
            time.sleep(0.05)
        raise TimeoutError(f"the server did not come up (leader={leader}) in {limit:.0f} s")

    def reconciler(self) -> int | None:
        """The pid of its reconciler process (the child multiprocessing spawned; not the
        resource tracker beside it)."""
        for pid in _children(self.process.pid):
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        return None

    def signal(self, signum: int) -> None:
        """``signum`` to the server and its reconciler process both."""
        child = self.reconciler()
        self.process.send_signal(signum)
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _settle(pid: int, limit: float, window: float = 1.0) -> None:
    """Until process ``pid`` spends almost no CPU over ``window`` seconds (a standby's
    reconciler process imports for seconds after the server answers, then only asks for the
    lock every step)."""
    deadline = time.monotonic() + limit
    before = _cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = _cpu_seconds(pid)
        if now - before < 0.05 * window:
            return
        before = now
    raise TimeoutError(f"the standby's reconciler did not settle in {limit:.0f} s")


def kill(db: Database, settings: Settings, freed: int, limit: float = 600.0) -> Timing:
    """Two ``gpuaas serve`` processes on the database; the first leads (its reconciler process
    loads the backlog) and the second stands by. ``freed`` running jobs end in the database
    while the leader leads (its engine still holds them: it learns of ends from its backend,
    so it does not admit onto them), then the leader is killed with SIGKILL, and the clock
    starts (the leader frozen with SIGSTOP a moment before, so that nothing it stores can pass
    for the new leader's). Timed: until a job is admitted at or after the kill (the database
    polled every 10 ms; the new leader stamps its step's time), wall seconds and the standby's
    reconciler process's CPU seconds. The full load is not visible from outside (NaN here)."""
    work = settings.data_dir
    leader = _Server(db.url, work / "leader", work / "leader.log")
    standby: _Server | None = None
    try:
        leader.wait(leader=True, limit=limit)
        standby = _Server(db.url, work / "standby", work / "standby.log")
        standby.wait(leader=False, limit=limit)
        reconciler = standby.reconciler()
        assert reconciler is not None, "the standby runs no reconciler process"
        _settle(reconciler, limit)  # a warm standby: imported, and refused the lock since
        free(db, freed)
        # frozen first: whatever the old leader stored, it stored before ``start``
        leader.signal(signal.SIGSTOP)
        cpu = _cpu_seconds(reconciler)
        start = time.time()
        wall = time.perf_counter()
        leader.signal(signal.SIGKILL)  # as a machine or an OOM kill would
        leader.process.wait(10)
        while True:
            admitted = _admitted_since(db, start)
            if admitted:
                break
            if time.perf_counter() - wall > limit:
                raise TimeoutError(f"no admission {limit:.0f} s after the leader was killed")
            if standby.process.poll() is not None:
                raise RuntimeError(f"the standby exited: {standby.log.read_text()[-2000:]}")
            time.sleep(0.01)
        first, first_cpu = time.perf_counter() - wall, _cpu_seconds(reconciler) - cpu
        return Timing(first, first_cpu, math.nan, math.nan, 0, admitted)
    finally:
        leader.stop()
        if standby is not None:
            standby.stop()
