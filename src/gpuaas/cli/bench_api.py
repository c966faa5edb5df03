"""``gpuaas bench api``: job submissions per second through the real server.

It starts ``gpuaas serve`` in a subprocess (uvicorn, a real socket) with the reconciler ON over a
small simulated fleet, the configuration a user actually runs, so the reconciler's admission
cycles compete with the submissions for the database. Through the API it then sets up a tenant,
a flavor, a cluster queue, a local queue and a tenant-user token, and submits ``--jobs`` jobs
from ``--clients`` concurrent keep-alive clients, each with an idempotency key. At the end every
acknowledged job must be listed by the API; anything else is reported as an error.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast
from urllib.parse import urlsplit

import httpx
import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaas.cli.bench import bench_app
from gpuaas.client.sdk import ApiError, Client
from gpuaas.model.errors import GpuaasError

T = TypeVar("T")
TENANT = "bench"
FLAVOR = "bench-gpu"
CLUSTER_QUEUE = "bench-cq"
QUEUE = "bench"
USER = "bench-user"
POOL_LABEL = "gpuaas.io/pool"
GPUS_PER_NODE = 8
STARTUP_TIMEOUT = 180.0  # a deadline (a loaded machine starts slowly), not a measurement


class BenchError(Exception):
    """The benchmark cannot run (database not empty, server did not start)."""


@dataclass(slots=True)
class Outcome:
    """What the submitting clients saw."""

    latencies: list[float] = field(default_factory=list)
    #: when each answered request was sent (``time.time()``), beside its latency: ``--trace``
    #: lines slow requests up against the server's own events
    sent: list[float] = field(default_factory=list)
    job_ids: set[int] = field(default_factory=set)
    created: int = 0
    replayed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    elapsed: float = 0.0
    #: CPU seconds the server process (API) and its children (the reconciler) spent while the
    #: clients submitted; None where /proc cannot say (not Linux)
    server_cpu: float | None = None
    children_cpu: float | None = None
    #: CPU seconds the load generator itself (this process) spent while the clients submitted
    client_cpu: float | None = None
    #: open loop (``--rate``) only: the planned rate, the requests that left more than
    #: :data:`LATE_AFTER` after their planned time (and the worst lateness, s), and the most
    #: connections open at once
    offered_rate: float | None = None
    late: int = 0
    worst_late: float = 0.0
    connections: int = 0


# -- the server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_fleet(directory: Path, nodes: int) -> Path:
    """A small H100 fleet in one pool, so the reconciler has real placement work to do."""
    fleet = {
        "apiVersion": "gpuaas.io/v1",
        "kind": "Fleet",
        "metadata": {"name": "bench"},
        "nodes": [
            {
                "name": "bench-{i:03}",
                "count": nodes,
                "cpu": "192",
                "memory": "2Ti",
                "gpus": {"model": "H100-80GB", "count": GPUS_PER_NODE},
                "topology": {"zone": "bench", "rack": "rack-{i/8}"},
                "labels": {POOL_LABEL: "bench"},
            }
        ],
    }
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False), encoding="utf-8")
    return path


def require_empty_database(url: str) -> None:
    """Refuse a database that already holds tables: the benchmark creates its own schema,
    tenant and queues, and must never touch someone's data."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.engine import make_url

    from gpuaas.store.db import normalise_url

    try:
        normalised = normalise_url(url)
    except GpuaasError as exc:
        raise BenchError(str(exc)) from None
    sqlite_file = make_url(normalised).database if normalised.startswith("sqlite") else None
    if sqlite_file is not None and not Path(sqlite_file).exists():
        return  # a new SQLite file: empty by definition
    engine = create_engine(normalised)
    try:
        with engine.connect() as connection:
            tables = inspect(connection).get_table_names()
    except Exception as exc:  # any driver error: the URL is unusable
        raise BenchError(f"cannot open the database {url}: {exc}") from None
    finally:
        engine.dispose()
    if tables:
        raise BenchError(
            f"the database {url} is not empty ({len(tables)} tables, e.g. {sorted(tables)[0]}): "
            "bench api needs an empty database (it creates the schema and its own tenant)"
        )


class Server:
    """``gpuaas serve`` in a subprocess; its output goes to a log file shown on failure."""

    def __init__(
        self, db_url: str, workdir: Path, fleet: Path | None, reconcile: bool,
        metering: bool = True,
    ) -> None:  # fmt: skip
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_token = "gpa_bench-" + secrets.token_urlsafe(24)
        self.log = workdir / "server.log"
        command = [
            sys.executable,
            "-c",
            "from gpuaas.cli.main import app; app()",
            "serve",
            "--db",
            db_url,
            "--data-dir",
            str(workdir),
            "--port",
            str(self.port),
        ]
        if fleet is not None:
            command += ["--fleet", str(fleet)]
        if not reconcile:
            command.append("--no-reconcile")
        if not metering:  # usage records off: what metering costs (docs/benchmarks.md)
            command.append("--no-metering")
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # the limiter runs, far above what one bench token sends (docs/benchmarks.md)
        env = {**os.environ, "GPUAAS_ADMIN_TOKEN": self.admin_token}
        env.setdefault("GPUAAS_RATE_PER_TOKEN", "1000000")
        env.setdefault("GPUAAS_RATE_PER_TENANT", "1000000")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"the server exited at start:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise BenchError(f"the server did not answer in {STARTUP_TIMEOUT:.0f}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process, from ``/proc`` (None if it cannot be read).

    The machine running the benchmark is often shared: wall-clock rates move with the load, the
    CPU a submission costs the server much less, so the benchmark reports both."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return [int(c) for t in tasks for c in (t / "children").read_text().split()]
    except OSError:
        return []


def tree_cpu(pid: int) -> tuple[float | None, float | None]:
    """CPU seconds of the process and, summed, of its live children."""
    own = cpu_seconds(pid)
    children = [cpu_seconds(child) for child in children_of(pid)]
    return own, (sum(c for c in children if c is not None) if own is not None else None)


# -- setup through the API --------------------------------------------------------------------


def settled(call: Callable[[], T], wait: float = 5.0) -> T:
    """Run a setup call, retrying briefly while the server does not yet see the object made by
    the previous call: a server whose request transaction commits after its answer is sent
    (FastAPI's default scope for dependencies with ``yield``) can answer 401/404/422. Only
    the unmeasured setup is retried; a lost acknowledgement in the measured phase is reported."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return call()
        except ApiError as exc:
            if exc.status not in (401, 404, 422) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def queue_spec(cpu: int, gpus: int, memory: str) -> dict[str, Any]:
    """A ClusterQueue of the bench flavor with nominal quota for GPUs, CPU and memory."""
    return {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu", "cpu", "memory"],
                "flavors": [
                    {
                        "name": FLAVOR,
                        "resources": [
                            {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                            {"name": "cpu", "nominalQuota": cpu},
                            {"name": "memory", "nominalQuota": memory},
                        ],
                    }
                ],
            }
        ],
    }


def set_up_tenant(admin: Client, gpus: int) -> str:
    """Flavor, tenant with capacity, its cluster queue and local queue, and a tenant-user;
    returns that user's token."""
    cpu, memory = gpus * 24, f"{gpus * 256}Gi"
    settled(lambda: admin.create_flavor(FLAVOR, {"nodeLabels": {POOL_LABEL: "bench"}}))
    capacity = {FLAVOR: {"nvidia.com/gpu": str(gpus), "cpu": str(cpu), "memory": memory}}
    settled(lambda: admin.create_tenant(TENANT, display_name="bench api", capacity=capacity))
    spec = queue_spec(cpu, gpus, memory)
    settled(lambda: admin.create_cluster_queue(CLUSTER_QUEUE, spec, owner=TENANT))
    settled(lambda: admin.create_local_queue(QUEUE, CLUSTER_QUEUE, tenant=TENANT))
    settled(lambda: admin.set_member(TENANT, USER, "tenant-user"))
    issued = settled(lambda: admin.create_member_token(TENANT, USER, "bench"))
    token = str(issued["token"])
    with Client(admin.url, token) as user:  # the new token and the queue, as the user sees them
        settled(lambda: user.get_local_queue(QUEUE, tenant=TENANT))
    return token


def job_spec(run: str, index: int | str, duration: float) -> dict[str, Any]:
    return {
        "name": f"bench-{index}",
        "kind": "batch",
        "queue": QUEUE,
        "idempotencyKey": f"{run}-{index}",
        "command": ["sleep", str(int(duration))],
        "duration": duration,
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "resources": {"nvidia.com/gpu": 1, "cpu": "4", "memory": "32Gi"},
            }
        ],
    }


# -- the load ---------------------------------------------------------------------------------
#
# The load generator runs on the same cores as the server it measures, so every microsecond of
# its CPU is taken from the server. It is therefore written the way a load generator in C would
# be (wrk, h2load), in Python: each client is an asyncio ``Protocol`` on one keep-alive HTTP/1.1
# connection that writes its next request from the callback that completes the previous answer
# (a closed loop without a task, a future or a stream per request); a request is a pre-rendered
# byte template with the job number put in twice (the same bytes ``json.dumps`` of
# :func:`job_spec` gives: a test holds them equal); an answer is framed by its
# ``Content-Length`` (the only framing the server uses: anything else is counted as an error and
# the connection dropped), its status read and, for a 2xx, its body parsed for the job id. The
# latency of a request runs from just before its bytes are written to the callback that
# receives its answer's last byte. Progress is drawn from a timer, not per request.


class ProtocolError(Exception):
    """An answer that cannot be framed (no ``Content-Length``, or bytes nobody asked for)."""


@dataclass(frozen=True, slots=True)
class RequestTemplate:
    """``POST /v1/tenants/{TENANT}/jobs`` as bytes, with the job number's two places left open.

    Rendering a request is then two byte joins, not a dict built and serialised per request."""

    head: bytes  # request line and headers, up to the Content-Length value
    body: tuple[bytes, bytes, bytes]  # the JSON body around the job number's two places

    @classmethod
    def for_run(cls, host: str, token: str, run: str, duration: float) -> RequestTemplate:
        marker = "2718281828459045"  # a number no job can have: where the job number goes
        text = json.dumps(job_spec(run, marker, duration))
        body = tuple(part.encode() for part in text.split(marker))
        if len(body) != 3:
            raise ValueError(f"the job body holds the job number {len(body) - 1} times, not 2")
        # the headers an ordinary client sends (aiohttp, which this replaced, sent these), so
        # the server parses what it parses in use
        head = (
            f"POST /v1/tenants/{TENANT}/jobs HTTP/1.1\r\n"
            f"Host: {host}\r\n"
            "Accept: */*\r\n"
            "Accept-Encoding: gzip, deflate\r\n"
            "User-Agent: gpuaas-bench-api\r\n"
            f"Authorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
            "Content-Length: "
        ).encode()
        return cls(head, (body[0], body[1], body[2]))

    def body_of(self, index: int) -> bytes:
        number = b"%d" % index
        return number.join(self.body)

    def render(self, index: int) -> bytes:
        body = self.body_of(index)
        return b"%s%d\r\n\r\n%s" % (self.head, len(body), body)


def answer_head(head: bytes) -> tuple[int, int, bool]:
    """Status, body length and whether the server keeps the connection, from an answer's head
    (the bytes before the blank line)."""
    if not head.startswith(b"HTTP/1.1 "):
        raise ProtocolError(f"not an HTTP/1.1 answer: {head[:40]!r}")
    status = int(head[9:12])
    lowered = head.lower()
    at = lowered.find(b"\r\ncontent-length:")
    if at < 0:
        raise ProtocolError("an answer without Content-Length")
    end = lowered.find(b"\r\n", at + 2)
    length = int(lowered[at + 17 : end if end >= 0 else len(lowered)])
    return status, length, b"\r\nconnection: close" not in lowered


class LoadClient(asyncio.Protocol):
    """One closed-loop client: one connection, one request in flight, the next one written as
    the previous answer's last byte arrives."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.transport: asyncio.Transport  # set when connected, before any other callback
        self.buffer = b""
        self.in_flight = False
        self.sent = 0.0  # time.time() of the request in flight (for --trace)
        self.started = 0.0  # perf_counter() just before its bytes were written
        #: perf_counter() when its bytes were written, for the timeout: the open loop's
        #: ``started`` is the planned time, which a request held back may be long past
        self.written = 0.0
        self.closed: asyncio.Future[None] = load.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.load.connected(self)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        buffer = self.buffer + data if self.buffer else data
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            self.buffer = buffer
            return
        try:
            status, length, keep = answer_head(buffer[:end])
        except (ProtocolError, ValueError) as exc:
            self.fail(f"{type(exc).__name__}: {exc}")
            return
        complete = end + 4 + length
        if len(buffer) < complete:
            self.buffer = buffer
            return
        if len(buffer) > complete or not self.in_flight:
            self.fail("ProtocolError: bytes after the answer")
            return
        self.buffer = b""
        self.in_flight = False
        self.load.answered(self, status, buffer[end + 4 : complete], now)
        if keep:
            self.load.send(self)
        else:
            self.transport.close()

    def fail(self, kind: str) -> None:
        """Count the request in flight as failed and drop the connection (the client opens
        another)."""
        if self.in_flight:
            self.in_flight = False
            self.load.failed(kind)
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.in_flight:
            self.in_flight = False
            self.load.failed(type(exc).__name__ if exc else "ServerDisconnected")
        self.load.disconnected(self)
        if not self.closed.done():
            self.closed.set_result(None)


class Load:
    """What the clients share: the job numbers, the request template and the outcome."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, template: RequestTemplate, jobs: int,
        timeout: float,
    ) -> None:  # fmt: skip
        self.loop = loop
        self.template = template
        self.jobs = jobs
        self.timeout = timeout
        self.numbers = itertools.count()
        self.outcome = Outcome()
        self.clients: set[LoadClient] = set()
        self.spent = False  # every job number has been taken

    def connected(self, client: LoadClient) -> None:
        self.clients.add(client)
        self.send(client)

    def disconnected(self, client: LoadClient) -> None:
        self.clients.discard(client)

    def failed(self, kind: str) -> None:
        """A request that got no answer (or none that can be framed)."""
        self.outcome.errors[kind] += 1

    def take(self) -> int | None:
        """The next job number, or None when every job has been sent."""
        index = next(self.numbers)
        if index < self.jobs:
            return index
        self.spent = True
        return None

    def send(self, client: LoadClient) -> None:
        index = self.take()
        if index is None:
            client.transport.close()
            return
        request = self.template.render(index)
        client.in_flight = True
        client.sent = time.time()
        client.started = client.written = time.perf_counter()
        client.transport.write(request)

    def answered(self, client: LoadClient, status: int, body: bytes, now: float) -> None:
        self.outcome.latencies.append(now - client.started)
        self.outcome.sent.append(client.sent)
        record(self.outcome, status, body)

    def expire(self) -> None:
        """Fail every request older than the timeout (checked once a second, not per request)."""
        now = time.perf_counter()
        for client in list(self.clients):
            if client.in_flight and now - client.written > self.timeout:
                client.fail("TimeoutError")

    async def client(self, host: str, port: int) -> None:
        """One client: a connection, and another whenever the server drops it, until every job
        has been sent (a connection that cannot be made fails one job)."""
        while not self.spent:
            try:
                _, protocol = await self.loop.create_connection(
                    lambda: LoadClient(self), host, port
                )
            except OSError as exc:
                if self.take() is None:
                    return
                self.outcome.errors[type(exc).__name__] += 1
                continue
            await protocol.closed


#: a request that leaves more than this after its planned time counts as late: the event loop's
#: timers fire to the millisecond (uvloop's resolution), so up to about 1 ms is the timer's own
LATE_AFTER = 0.002


class ScheduledLoad(Load):
    """The open loop (``--rate``): request ``i`` is planned at ``t0 + i / rate``, whatever the
    server does, and sent then on an idle keep-alive connection of a pool that grows on demand
    up to ``connections``. A request whose time has come while every connection is busy waits
    for the first to free up (oldest first); its latency still runs FROM ITS PLANNED TIME, so a
    stalled server is charged for every request its stall held back (no coordinated omission,
    as in wrk2), and how many left late, and by how much, is counted. Each job is still sent
    once; the run ends when every job has been answered or has failed."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, template: RequestTemplate, jobs: int,
        timeout: float, *, rate: float, connections: int, host: str, port: int,
    ) -> None:  # fmt: skip
        super().__init__(loop, template, jobs, timeout)
        self.interval = 1.0 / rate
        self.rate = rate
        self.max_connections = connections
        self.host, self.port = host, port
        self.idle: list[LoadClient] = []
        self.opening = 0
        self.next_index = 0  # the next request to leave (all before it have)
        self.settled = 0  # answered or failed
        self.t0 = math.inf  # perf_counter() of request 0's planned time (none before start)
        self.epoch0 = 0.0  # the same instant as time.time(), for --trace
        self.timer: asyncio.Handle | None = None
        self.finished: asyncio.Future[None] = loop.create_future()
        self.outcome.offered_rate = rate

    async def warm(self, count: int) -> None:
        """Open ``count`` connections before the first planned time, as wrk2 opens its
        connections first: the first requests should not pay for a TCP handshake."""
        self.opening += count
        self.connections_now()
        await asyncio.gather(*(self.open() for _ in range(count)))

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.epoch0 = time.time()
        self.due()

    def planned(self, index: int) -> float:
        return self.t0 + index * self.interval

    def due(self) -> None:
        """Send every request whose time has come while a connection is idle; open connections
        for those still waiting; wake again at the next planned time."""
        self.timer = None
        now = time.perf_counter()
        while self.next_index < self.jobs and self.planned(self.next_index) <= now and self.idle:
            client = self.idle.pop()
            if not client.transport.is_closing():
                self.dispatch(client, now)
        if self.next_index >= self.jobs:
            return
        if self.planned(self.next_index) <= now:  # waiting for a connection
            waiting = min(self.jobs, int((now - self.t0) * self.rate) + 1) - self.next_index
            room = self.max_connections - len(self.clients) - self.opening
            for _ in range(min(waiting - self.opening, room)):
                self.opening += 1
                self.connections_now()
                self.loop.create_task(self.open())
            if len(self.clients) + self.opening >= self.max_connections:
                # the pool is full and behind: the next connection to free up takes the oldest
                # waiting request, and the schedule is looked at again when the backlog is gone
                # (send) or a connection is lost: no timer per planned request meanwhile, whose
                # wake-ups would take CPU from the server exactly when it is overloaded
                return
        upcoming = max(self.next_index, int((now - self.t0) * self.rate) + 1)
        while upcoming < self.jobs and self.planned(upcoming) <= now:
            upcoming += 1
        if upcoming < self.jobs:
            # rounded up to the millisecond: a timer never fires before the planned time
            delay = math.ceil((self.planned(upcoming) - now) * 1000) / 1000
            self.timer = self.loop.call_later(delay, self.due)

    def connections_now(self) -> None:
        self.outcome.connections = max(self.outcome.connections, len(self.clients) + self.opening)

    def dispatch(self, client: LoadClient, now: float) -> None:
        index = self.next_index
        self.next_index += 1
        if self.next_index >= self.jobs:
            self.spent = True
        planned = self.planned(index)
        late = now - planned
        if late > LATE_AFTER:
            self.outcome.late += 1
            if late > self.outcome.worst_late:
                self.outcome.worst_late = late
        client.in_flight = True
        client.started = planned  # the latency runs from the planned time, not the send
        client.written = now
        client.sent = self.epoch0 + index * self.interval
        client.transport.write(self.template.render(index))
        if self.spent:
            for idle in self.idle:
                idle.transport.close()
            self.idle.clear()

    async def open(self) -> None:
        """One more connection for the pool; one that cannot be made fails the oldest waiting
        request (each job is sent once), as the closed loop does."""
        try:
            await self.loop.create_connection(lambda: LoadClient(self), self.host, self.port)
        except OSError as exc:
            self.opening -= 1
            if self.next_index < self.jobs:
                self.next_index += 1
                self.spent = self.next_index >= self.jobs
                self.failed(type(exc).__name__)
            self.wake()

    def wake(self) -> None:
        """Look at the schedule again soon (a connection lost or not made while requests may
        be waiting, and no timer due)."""
        if self.timer is None and not self.spent and self.t0 != math.inf:
            self.timer = self.loop.call_soon(self.due)

    def connected(self, client: LoadClient) -> None:
        self.opening -= 1
        self.clients.add(client)
        self.connections_now()
        self.send(client)

    def send(self, client: LoadClient) -> None:
        """A connection is free (new, or its answer read): the oldest request whose time has
        come leaves on it now, or it waits in the pool."""
        if self.spent:
            client.transport.close()
            return
        now = time.perf_counter()
        if self.planned(self.next_index) <= now:
            self.dispatch(client, now)
        else:
            self.idle.append(client)
            self.wake()  # the backlog is gone: the timer takes over again

    def disconnected(self, client: LoadClient) -> None:
        self.clients.discard(client)
        if client in self.idle:
            self.idle.remove(client)
        self.wake()

    def answered(self, client: LoadClient, status: int, body: bytes, now: float) -> None:
        super().answered(client, status, body, now)
        self.settle()

    def failed(self, kind: str) -> None:
        super().failed(kind)
        self.settle()

    def settle(self) -> None:
        self.settled += 1
        if self.settled >= self.jobs and not self.finished.done():
            if self.timer is not None:
                self.timer.cancel()
            for client in list(self.clients):
                client.transport.close()
            self.finished.set_result(None)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (it comes with ``uvicorn[standard]``), which
    takes less of the generator's CPU per request; asyncio's own otherwise."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def event_loop_name() -> str:
    return "uvloop" if loop_factory() is not None else "asyncio"


async def submit_all(
    url: str,
    token: str,
    server_pid: int | None,
    clients: int,
    jobs: int,
    duration: float,
    progress: Progress,
    *,
    timeout: float = 60.0,
    rate: float | None = None,
) -> Outcome:
    """``clients`` closed-loop clients, each on its own keep-alive connection, take job numbers
    from one counter until ``jobs`` are sent (see the paragraph above :class:`RequestTemplate`);
    with ``rate``, the open loop of :class:`ScheduledLoad` over up to ``clients`` connections.

    The outcome carries the generator's own CPU time (``time.process_time`` of this process,
    every thread of it) beside the server's, so a run shows what the load itself cost."""
    split = urlsplit(url)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    loop = asyncio.get_running_loop()
    template = RequestTemplate.for_run(split.netloc, token, secrets.token_hex(6), duration)
    load: Load
    if rate is None:
        load = Load(loop, template, jobs, timeout)
    else:
        load = ScheduledLoad(
            loop, template, jobs, timeout, rate=rate, connections=clients, host=host, port=port
        )
    task = progress.add_task("submitting", total=jobs)

    def tick() -> None:
        load.expire()
        progress.update(task, completed=len(load.outcome.latencies), refresh=True)
        ticker[0] = loop.call_later(1.0, tick)

    ticker = [loop.call_later(1.0, tick)]
    cpu_before = tree_cpu(server_pid) if server_pid is not None else (None, None)
    client_before = time.process_time()
    began = time.perf_counter()
    try:
        if isinstance(load, ScheduledLoad):
            # enough connections for 10 ms answers at the rate; more are opened on demand
            await load.warm(min(clients, max(1, math.ceil(load.rate / 100)), jobs))
            load.start()
            await load.finished
        else:
            await asyncio.gather(*(load.client(host, port) for _ in range(clients)))
    finally:
        ticker[0].cancel()
    outcome = load.outcome
    # the open loop's run begins at its first planned time (after the connections are made)
    start = load.t0 if isinstance(load, ScheduledLoad) else began
    outcome.elapsed = time.perf_counter() - start
    outcome.client_cpu = time.process_time() - client_before
    cpu_after = tree_cpu(server_pid) if server_pid is not None else (None, None)
    if cpu_before[0] is not None and cpu_after[0] is not None:
        outcome.server_cpu = cpu_after[0] - cpu_before[0]
        outcome.children_cpu = (cpu_after[1] or 0.0) - (cpu_before[1] or 0.0)
    progress.update(task, completed=jobs)
    return outcome


def job_id_of(payload: bytes) -> int:
    """The job id a 2xx answer names. The server writes the job's view with ``id`` first
    (``{"id":42,...}``), so the number is read there without decoding the rest, a sixth of the
    load generator's CPU otherwise; a body of any other shape is decoded in full."""
    if payload.startswith(b'{"id":'):
        end = payload.find(b",", 6)
        if end > 6:
            return int(payload[6:end])
    return int(json.loads(payload)["id"])


def record(outcome: Outcome, status: int, payload: bytes) -> None:
    """Count one answer: a 2xx by the job id its body names (an acknowledgement the final
    listing must contain), anything else as an error by its status and problem detail."""
    if status in (200, 201):
        try:
            job_id = job_id_of(payload)
        except (ValueError, KeyError, TypeError):
            outcome.errors[f"{status} without a job id: {payload[:80]!r}"] += 1
            return
        outcome.job_ids.add(job_id)
        if status == 201:
            outcome.created += 1
        else:
            outcome.replayed += 1
        return
    try:
        detail = str(json.loads(payload).get("detail", ""))
    except (ValueError, AttributeError):
        detail = payload[:120].decode(errors="replace")
    outcome.errors[f"{status}: {detail[:120]}"] += 1


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of already sorted values."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarise(
    outcome: Outcome,
    listed: dict[int, str],
    *,
    clients: int,
    jobs: int,
    database: str,
    reconcile: bool,
    nodes: int,
) -> dict[str, Any]:
    lat = sorted(outcome.latencies)
    acknowledged = len(outcome.job_ids)
    missing = len(outcome.job_ids - listed.keys())
    open_loop = outcome.offered_rate is not None
    return {
        # closed: each client sends when answered; open: on a fixed schedule (--rate), latency
        # from each request's planned time
        "mode": "open" if open_loop else "closed",
        **(
            {
                "offered_per_s": outcome.offered_rate,
                "late_to_leave": outcome.late,
                "worst_late_ms": round(outcome.worst_late * 1000, 2),
                "connections": outcome.connections,
            }
            if open_loop
            else {}
        ),
        # answered requests per second over the run (in the open loop: the achieved rate)
        "submissions_per_s": round(len(lat) / outcome.elapsed, 1) if outcome.elapsed else 0.0,
        "p50_ms": round(percentile(lat, 50) * 1000, 2),
        "p99_ms": round(percentile(lat, 99) * 1000, 2),
        "p999_ms": round(percentile(lat, 99.9) * 1000, 2),
        "max_ms": round(lat[-1] * 1000, 2) if lat else 0.0,
        "mean_ms": round(statistics.fmean(lat) * 1000, 2) if lat else 0.0,
        # the API process's CPU per submission (the reconciler's process apart): on a shared
        # machine a steadier figure than the rate
        "server_cpu_ms_per_submission": (
            round(outcome.server_cpu / len(lat) * 1000, 3)
            if outcome.server_cpu is not None and lat
            else None
        ),
        # the load generator's own CPU per answered request (this process): it shares the
        # machine with the server, so what it costs is taken from what the server can do
        "client_cpu_ms_per_submission": (
            round(outcome.client_cpu / len(lat) * 1000, 3)
            if outcome.client_cpu is not None and lat
            else None
        ),
        "reconciler_cpu_s": (
            round(outcome.children_cpu, 2) if outcome.children_cpu is not None else None
        ),
        "errors": sum(outcome.errors.values()),
        "error_kinds": dict(outcome.errors.most_common(5)),
        "jobs": jobs,
        "clients": clients,
        "acknowledged": acknowledged,
        "created": outcome.created,
        "replayed": outcome.replayed,
        "listed": len(listed),
        "missing": missing,
        "states": dict(Counter(listed.values()).most_common()),
        "elapsed_s": round(outcome.elapsed, 3),
        "database": database,
        "reconciler": reconcile,
        "fleet": f"{nodes} nodes x {GPUS_PER_NODE} H100" if nodes else "none",
    }


def write_trace(path: Path, outcome: Outcome) -> None:
    """``sent latency`` per answered request, in the order answered."""
    lines = (f"{s:.6f} {lat:.6f}\n" for s, lat in zip(outcome.sent, outcome.latencies, strict=True))
    path.write_text("".join(lines), encoding="utf-8")


def list_every_job(url: str, token: str) -> dict[int, str]:
    """Job id -> state, through the API's pages (the proof that every ack was stored)."""
    with Client(url, token, timeout=120.0) as client:
        return {int(job["id"]): str(job["state"]) for job in client.iter_jobs(TENANT)}


def show_result(result: dict[str, Any]) -> None:
    console = Console()
    load = (
        f"{result['offered_per_s']:g}/s offered (open loop) over up to {result['clients']} "
        f"connections"
        if result["mode"] == "open"
        else f"{result['clients']} clients"
    )
    title = (
        f"bench api: {result['jobs']} jobs from {load}, "
        f"{result['database']}, reconciler {'ON' if result['reconciler'] else 'off'} "
        f"({result['fleet']})"
    )
    table = Table(title=title)
    headers = ("submissions/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "server CPU ms/sub",
               "errors", "acked", "listed")  # fmt: skip
    for header in headers:
        table.add_column(header, justify="right")
    table.add_row(
        f"{result['submissions_per_s']:.1f}",
        f"{result['p50_ms']:.1f}",
        f"{result['p99_ms']:.1f}",
        f"{result['p999_ms']:.1f}",
        f"{result['max_ms']:.1f}",
        "-" if (cpu := result["server_cpu_ms_per_submission"]) is None else f"{cpu:.2f}",
        str(result["errors"]),
        str(result["acknowledged"]),
        str(result["listed"]),
    )
    console.print(table)
    if result["mode"] == "open":
        console.print(
            f"open loop: latency from each request's planned send time; "
            f"{result['late_to_leave']} requests left more than {LATE_AFTER * 1000:g} ms late "
            f"(worst {result['worst_late_ms']:.1f} ms), {result['connections']} connections",
            markup=False,
        )
    states = ", ".join(f"{state} {n}" for state, n in result["states"].items())
    console.print(f"job states at the end: {states or 'none'}", markup=False)
    for kind, count in result["error_kinds"].items():
        console.print(f"error x{count}: {kind}", markup=False)


#: the closed loop's clients, and the open loop's fewest connections
DEFAULT_CLIENTS = 32
#: the open loop's default connections carry a server stall this long (s) at the offered rate:
#: with fewer, requests planned during a stall wait at the generator (still charged from their
#: planned time, but then the generator, not the server, sets when they are sent)
STALL_CARRIED = 0.5


def connections_for(rate: float | None) -> int:
    """``--clients`` when not given: 32 for the closed loop; for the open loop at ``rate``/s,
    enough connections for every request planned during a 0.5 s stall (at most 1,000)."""
    if rate is None:
        return DEFAULT_CLIENTS
    return min(1000, max(DEFAULT_CLIENTS, math.ceil(rate * STALL_CARRIED)))


def database_kind(url: str) -> str:
    return "postgresql" if url.startswith(("postgres", "postgresql")) else "sqlite"


@bench_app.command("api")
def bench_api(
    clients: Annotated[
        int | None,
        typer.Option(
            "--clients",
            min=1,
            max=1000,
            help=(
                "Closed loop: concurrent clients (default 32). With --rate: the most connections "
                "to use (default: enough to carry a 0.5 s stall at the rate, at least 32)."
            ),
        ),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate",
            min=0.001,
            help=(
                "Open loop: send R requests per second on a fixed schedule (request i at "
                "t0 + i/R) whatever the answers, latency measured from each planned time (no "
                "coordinated omission). Default: the closed loop of --clients."
            ),
        ),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", min=1)] = 20_000,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="An EMPTY database (postgresql://...); default: a fresh SQLite in a temp dir.",
        ),
    ] = None,
    nodes: Annotated[
        int, typer.Option("--nodes", min=1, max=1000, help="Simulated 8-GPU nodes.")
    ] = 4,
    reconcile: Annotated[
        bool,
        typer.Option("--reconcile/--no-reconcile", help="Run admission while submitting."),
    ] = True,
    duration: Annotated[
        float, typer.Option("--duration", min=1, help="Each job's simulated run time (s).")
    ] = 30.0,
    metering: Annotated[
        bool,
        typer.Option("--metering/--no-metering", help="Write usage records (docs/billing.md)."),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Write each answered request's send time (epoch s) and latency (s), one a line.",
        ),
    ] = None,
) -> None:
    """Submissions per second and latency of `POST /v1/tenants/{t}/jobs` on a real server.

    Default: a closed loop of --clients. --rate R: an open loop, R requests/s on a schedule."""
    err = Console(stderr=True)
    clients = clients or connections_for(rate)
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-api-") as tmp:
        workdir = Path(tmp)
        db_url = db or f"sqlite:///{workdir / 'bench.db'}"
        try:
            if db is not None:
                require_empty_database(db)
            server = Server(db_url, workdir, write_fleet(workdir, nodes), reconcile, metering)
            err.print(
                f"starting gpuaas serve on {server.url} ({database_kind(db_url)}, reconciler "
                f"{'ON' if reconcile else 'off'}, {nodes} nodes x {GPUS_PER_NODE} GPUs)",
                markup=False,
            )
            server.start()
            try:
                with Client(server.url, server.admin_token) as admin:
                    token = set_up_tenant(admin, nodes * GPUS_PER_NODE)
                progress = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=err,
                    transient=True,
                    auto_refresh=False,  # drawn by the load's own 1 s timer: no thread of its own
                )
                with progress, asyncio.Runner(loop_factory=loop_factory()) as runner:
                    outcome = runner.run(
                        submit_all(
                            server.url,
                            token,
                            server.pid,
                            clients,
                            jobs,
                            duration,
                            progress,
                            rate=rate,
                        )
                    )
                listed = list_every_job(server.url, token)
            finally:
                server.stop()
        except ApiError as exc:
            err.print(f"error: setting up through the API failed: {exc.detail}", markup=False)
            raise typer.Exit(1) from None
        except (BenchError, httpx.HTTPError) as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
    result = summarise(
        outcome,
        listed,
        clients=clients,
        jobs=jobs,
        database=database_kind(db_url),
        reconcile=reconcile,
        nodes=nodes,
    )
    result["metering"] = metering
    result["event_loop"] = event_loop_name()
    if trace is not None:
        write_trace(trace, outcome)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        show_result(result)
    if result["errors"] or result["missing"] or result["acknowledged"] != jobs:
        err.print(
            f"error: {result['errors']} failed submissions, {result['missing']} acknowledged "
            "jobs not listed",
            markup=False,
        )
        raise typer.Exit(1)
