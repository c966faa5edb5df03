"""``gpuaas serve`` in a subprocess on a fresh port, for tests that kill and restart a server,
and the stream of submissions they kill it in."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from job_world import jobs

from gpuaas.model.job_state import FINAL
from gpuaas.store.db import Database


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``gpuaas serve ARGS --port P`` with ``admin_token``, its output appended to ``log``;
    returns once ``/healthz`` answers."""

    def __init__(self, args: list[str], log: Path, admin_token: str, startup: float = 60.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-c", "from gpuaas.cli.main import app; app()", "serve",
                   *args, "--port", str(self.port)]  # fmt: skip
        env = dict(os.environ, GPUAAS_ADMIN_TOKEN=admin_token)
        self.token = admin_token
        self.log_path = log
        self.log = log.open("ab")
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + startup  # a deadline: a loaded machine starts slowly
        while time.monotonic() < deadline:
            assert self.process.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()  # the caller never gets this server to stop: do not leave it running
        raise AssertionError("the server did not come up")

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10,
                            headers={"Authorization": f"Bearer {self.token}"})  # fmt: skip

    def kill(self) -> None:
        """SIGKILL: no shutdown of any kind (its reconciler process dies with it)."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.log.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


# --- the kill -9 tests' stream (tests/service/test_restart.py, test_usage_restart.py) -------


def post_all(client: httpx.Client, writes: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """POST each body to its URL; each must create (201)."""
    for url, body in writes:
        r = client.post(url, json=body)
        assert r.status_code == 201, (url, r.text)


def stream(
    url: str, token: str, spec: Callable[[int], dict[str, Any]], acked: dict[int, int],
    stop: threading.Event, start: int = 0, limit: int | None = None, pause: float = 0.03,
) -> None:  # fmt: skip
    """Submit ``spec(i)`` for i = start, start + 1, ... until stopped, the server dies or
    ``limit`` were acknowledged; ``acked``: index -> job id. ``pause`` between two keeps the
    stream one the small fleet works off within the test."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        i = start
        while not stop.is_set() and (limit is None or i < start + limit):
            try:
                r = client.post("/v1/tenants/acme/jobs", json=spec(i), timeout=5)
            except httpx.TransportError:
                return  # the server was killed mid-request: this one was never acknowledged
            assert r.status_code in (200, 201), r.text
            acked[i] = r.json()["id"]
            i += 1
            stop.wait(pause)


def kill_mid_stream(
    server: Server, spec: Callable[[int], dict[str, Any]], acked: dict[int, int],
    ready: Callable[[], bool], *, start: int = 0, limit: int | None = None,
    pause: float = 0.03, wait: float = 60.0, after: float = 0.5, kill: bool = True,
) -> None:  # fmt: skip
    """Stream submissions to ``server`` (:func:`stream`), wait until ``ready()`` (at most
    ``wait`` seconds: the reconciler's process may take seconds to start on a busy machine)
    and ``after`` seconds more, then SIGKILL the server (``kill``; otherwise stop
    submitting and leave it running) and return once the stream has ended."""
    stop = threading.Event()
    streamer = threading.Thread(
        target=stream, args=(server.url, server.token, spec, acked, stop, start, limit, pause)
    )
    streamer.start()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not ready():
        time.sleep(0.1)
    time.sleep(after)
    if not kill:
        stop.set()
    else:
        server.kill()
    streamer.join(10)
    stop.set()


def all_final(db_url: str, seconds: float) -> dict[int, str]:
    """Job id -> state once every job is finished, or after ``seconds`` (a deadline on a
    loaded machine, not a measurement): the states as they are then."""
    db = Database(db_url)
    try:
        deadline = time.monotonic() + seconds
        while True:
            with db.sessions() as s:
                states = {i: j.state for i, j in jobs(s).items()}
            if all(state in FINAL for state in states.values()) or time.monotonic() > deadline:
                return states
            time.sleep(0.25)
    finally:
        db.dispose()
