"""A refused request leaves its keep-alive connection usable: on one HTTP/1.1 socket to a real
uvicorn, each bad body below is a 422 problem, and the request after it on the same socket is
answered.

Once a quantity of 4,301 digits (Python's integer-string limit) was a 500 and the next request
on the connection was reset; these are that input and its friends.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from serve_process import free_port

from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings

TOKEN = "gpa_keepalive-admin-token-0123"
JOBS = "/v1/tenants/acme/jobs"


def _job(resources: dict[str, object]) -> bytes:
    spec = {"name": "j", "command": ["true"], "podSets": [{"resources": resources}]}
    return json.dumps(spec).encode()


BAD_BODIES = {
    "gpu-4301-digits": _job({"nvidia.com/gpu": "9" * 4301}),
    "gpu-4301-digit-int": b'{"name": "j", "command": ["true"], "podSets": [{"resources": '
    b'{"nvidia.com/gpu": ' + b"9" * 4301 + b"}}]}",
    "memory-4301-digits-milli": _job({"memory": "1" * 4301 + "m"}),
    "cpu-exponent": _job({"cpu": "1e999999"}),
    "malformed-json": b'{"name": "j", ',
    "invalid-utf8": b'{"name": "\xff\xfe"}',
    "unpaired-surrogate": b'{"name": "\\ud800", "command": ["true"], "podSets": [{}]}',
    "nested-deep": b"[" * 100_000 + b"]" * 100_000,
}


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        pass


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp: Path = tmp_path_factory.mktemp("keepalive")
    settings = Settings(db_url=f"sqlite:///{tmp / 'gpuaas.db'}", data_dir=tmp,
                        reconcile=False, admin_token=TOKEN)  # fmt: skip
    chosen = free_port()
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=chosen, log_level="warning"
    )
    server = _Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield chosen
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_refused_body_leaves_the_connection_usable(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    tenant = json.dumps({"name": "acme", "displayName": "Acme"})
    connection.request("POST", "/v1/tenants", body=tenant, headers=headers)
    answer = connection.getresponse()
    assert answer.status == 201, answer.read()
    answer.read()
    sock = connection.sock
    for name, body in BAD_BODIES.items():
        connection.request("POST", JOBS, body=body, headers=headers)
        answer = connection.getresponse()
        problem = json.loads(answer.read())
        assert answer.status == 422, (name, answer.status, problem)
        assert answer.getheader("content-type", "").startswith("application/problem+json"), name
        assert not answer.will_close, name  # the server keeps the connection open
        connection.request("GET", "/v1/whoami", headers=headers)
        after = connection.getresponse()
        assert after.status == 200, (name, after.status, after.read())
        assert json.loads(after.read())["user"] == "admin"
        assert connection.sock is sock, name  # the same socket, never reconnected
    connection.close()
