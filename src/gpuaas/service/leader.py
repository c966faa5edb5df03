"""The reconciler in a process of its own, beside the API server.

Admission and the backend's bookkeeping are CPU work in Python: in the API's process they share
the GIL with the event loop, and every reconcile step shows up as latency on the requests being
served at that moment (measured: p99 of job submission 140 ms with the reconciler as a thread,
55 ms with it in its own process, at about 1,200 submissions/s). ``gpuaas serve`` therefore runs
it in a child process (spawned, so it shares nothing with the server but the database); tests
and embedded uses keep the thread.

The child dies with its parent: Linux's parent-death signal where available, and a check of
the parent's pid every step otherwise, so a server killed with SIGKILL leaves no reconciler
behind to hold the leader lock. Its Prometheus counters reach ``/metrics`` through
prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set by the server before
either process imports prometheus_client).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from gpuaas.service.settings import Settings

log = logging.getLogger("gpuaas.reconciler")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare_metrics_dir(data_dir: Path) -> Path:
    """A fresh directory for the processes' metric files, exported in the environment (it must be
    set before prometheus_client is imported in any process)."""
    path = data_dir / f"metrics-{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    for stale in data_dir.glob("metrics-*"):  # left by servers that were killed
        pid = stale.name.removeprefix("metrics-")
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(path)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ReconcilerProcess:
    """Starts and stops the child; ``is_leader`` is what the child last reported."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        context = multiprocessing.get_context("spawn")
        # a raw byte, no lock (and so no semaphore to leak): one writer, one reader
        self._leading: ctypes.c_byte = context.Value("b", 0, lock=False)  # type: ignore[assignment]
        self._process = context.Process(
            target=run,
            args=(settings, os.getpid(), self._leading),
            name="gpuaas-reconciler",
            daemon=True,
        )

    @property
    def is_leader(self) -> bool:
        return self._process.is_alive() and bool(self._leading.value)

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        if self._process.is_alive():
            self._process.terminate()  # SIGTERM: the child finishes its step and releases
            self._process.join(timeout=30)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(timeout=5)


#: The reconciler child's niceness, added to the server's. Under ``bench api`` the server, the
#: load generator and the child share two cores; at equal priority the child's steps (a second
#: of engine work at 20,000 pending, and its collections) took the cores from the API server
#: in bursts in which all 32 clients waited. At +5 the scheduler still gives it about a quarter
#: of a contended core (so a step holding SQLite's write lock is not stalled for long) and all
#: of an idle one: admission runs on what the API leaves (docs/benchmarks.md, helper apitail).
RECONCILER_NICE = 5


def _lower_priority() -> None:
    """Make this process (the reconciler child) yield the CPU to the API server."""
    with contextlib.suppress(OSError):  # not permitted here: run at the server's priority
        os.nice(RECONCILER_NICE)


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run(settings: Settings, parent: int, leading: ctypes.c_byte) -> None:
    """The child's main loop: one reconcile step every ``settings.reconcile_interval``."""
    _die_with_parent()
    _lower_priority()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops us

    from gpuaas.service import collector
    from gpuaas.service.reconciler import Reconciler
    from gpuaas.service.telemetry import Telemetry
    from gpuaas.store.checkpointer import Checkpoints
    from gpuaas.store.db import Database

    if settings.catalogue is not None:  # the server's catalogue file: same models here
        from gpuaas.supply.catalogue_file import use_catalogue

        use_catalogue(settings.catalogue)
    # the server's thread checkpoints the WAL: none in this process's commits, which hold the
    # writers' file lock the submissions wait on (store/checkpointer.py)
    db = Database(settings.url, Checkpoints.ELSEWHERE)
    reconciler = Reconciler(db, settings, Telemetry())
    # the server's collector tuning here too: the engine keeps every pending job alive, so each
    # full collection walked the backlog (0.5-0.7 s at 20,000 pending, seven in a `bench api`
    # run, half the child's CPU) on the two cores the API server needs
    collector.tune()
    try:
        while not stopping and os.getppid() == parent:
            try:
                leading.value = int(reconciler.step(time.time()))
            except Exception:
                log.exception("reconcile step failed; the engine is rebuilt on the next step")
            deadline = time.monotonic() + settings.reconcile_interval
            while not stopping and time.monotonic() < deadline:
                time.sleep(min(0.05, settings.reconcile_interval))
    finally:
        leading.value = 0
        reconciler.stop()
        db.dispose()
