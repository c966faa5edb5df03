"""``gpuaas serve`` in a subprocess on a fresh port, for tests that kill and restart a server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


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
