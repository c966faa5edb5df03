"""The app on a real port, in its own process, for the browser tests: the demo's fleet,
tenants and users on SQLite, jobs run by the local backend (real processes, so a job's output
is real), the demo's background stream of jobs slowed to one batch an hour."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from console_world import DEMO_ADMIN, demo_tokens

_LAUNCH = """
import sys
from pathlib import Path
import uvicorn
from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings
data, port, admin = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
settings = Settings(db_url=f"sqlite:///{data}/gpuaas.db", data_dir=data, demo=True,
                    backend="local", admin_token=admin, demo_job_interval=3600.0)
uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ConsoleServer:
    def __init__(self, data: Path, startup: float = 180.0) -> None:
        self.data = data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = data / "server.log"
        self.log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH, str(data), str(self.port), DEMO_ADMIN],
            stdout=self.log,
            stderr=self.log,
            env=dict(os.environ),
        )
        deadline = time.monotonic() + startup  # a loaded 2-core machine starts slowly
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log_path.read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            self.stop()
            raise AssertionError("the server did not come up")
        self.tokens = demo_tokens(data)

    def api(self, who: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {self.tokens[who]}"})  # fmt: skip

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.reap_jobs()
        self.log.close()

    def reap_jobs(self) -> None:
        """Kill the local backend's jobs this server started: they run in process groups of
        their own so that they outlive a server restart (the backend adopts them again), which
        is right in production and a leak in a test. Found by their wrapper's command line,
        which names a pod directory under this server's data directory."""
        mine = str(self.data)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            words = [a.decode(errors="replace") for a in argv]
            if any(w.endswith("wrapper.py") for w in words) and any(
                w.startswith(mine) for w in words
            ):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)
