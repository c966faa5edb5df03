"""``gpuaas serve`` prints the one-time admin token only once the first start has succeeded
(the port bound): a start that fails prints none, and the next start prints a working one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

SERVE = [sys.executable, "-c", "from gpuaas.cli.main import app; app()", "serve", "--no-reconcile"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUAAS_ADMIN_TOKEN"}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def test_the_token_is_printed_by_the_start_that_succeeds(tmp_path: Path) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text("kind: NotAFleet\n", encoding="utf-8")
    port = free_port()
    failed = subprocess.run(
        [*SERVE, "--data-dir", str(tmp_path), "--port", str(port), "--fleet", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(),
    )
    assert failed.returncode != 0
    assert "admin token:" not in failed.stdout + failed.stderr

    # the port is taken: the start fails after the app started, still printing no token
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        busy = subprocess.run(
            [*SERVE, "--data-dir", str(tmp_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env=environment(),
        )
    assert busy.returncode != 0
    assert "admin token:" not in busy.stdout + busy.stderr

    server = subprocess.Popen(
        [*SERVE, "--data-dir", str(tmp_path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment(),
    )
    try:
        token = None
        deadline = time.monotonic() + 120
        assert server.stdout is not None
        while token is None and time.monotonic() < deadline:
            line = server.stdout.readline()
            assert line or server.poll() is None, "the server exited"
            if line.startswith("provider admin token:"):
                token = line.split(":", 1)[1].strip()
        assert token is not None
        who = httpx.get(
            f"http://127.0.0.1:{port}/v1/whoami", headers={"Authorization": f"Bearer {token}"}
        )
        assert who.status_code == 200 and who.json()["platformRole"] == "provider-admin"
    finally:
        server.terminate()
        server.wait(30)
