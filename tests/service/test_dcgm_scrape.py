"""Scraping dcgm-exporters over real HTTP (a local server serving the fixtures): readings land
in the windows under the project's device names; a refused connection, a timeout, an HTTP
error and text that is not metrics each become the node's condition and an outcome count,
never an exception, and never stop the other nodes' scrapes."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuaas.engine.reasons import Code
from gpuaas.model.devices import GPU
from gpuaas.model.node import Node
from gpuaas.service.dcgm_scrape import Outcome, Scraper, exporter_url
from gpuaas.service.utilisation import Utilisation
from gpuaas.supply.partition import partition_gpu

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
H_UUID = ["GPU-5a1c0e1e-7b2d-4c55-9a0e-1f6d2c3b4a01", "GPU-5a1c0e1e-7b2d-4c55-9a0e-1f6d2c3b4a02"]
A_UUID = ["GPU-9e3f7a10-2c4b-4d1e-8f0a-6b5c4d3e2f01", "GPU-9e3f7a10-2c4b-4d1e-8f0a-6b5c4d3e2f02"]

PAGES = {
    "/h100": (200, (FIXTURES / "h100-whole-dcgm3.prom").read_text()),
    "/mig": (200, (FIXTURES / "a100-mig-dcgm4.prom").read_text()),
    "/mig-no-dcp": (200, (FIXTURES / "a100-mig-no-dcp.prom").read_text()),
    "/broken": (500, "exporter fell over\n"),
    "/garbage": (200, "<html>{{{ not metrics\n"),
}


class Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(5.0)
        status, body = PAGES.get(self.path, (404, "no such page\n"))
        data = body.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the scraper gave up waiting (the timeout case)
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def h100(name: str, url: str) -> Node:
    gpus = [GPU(i, H_UUID[i], "H100-80GB", 81559) for i in range(2)]
    return Node(name, 128000, 1 << 40, gpus=gpus, dcgm_exporter=url)


def a100(name: str, url: str) -> Node:
    mig = partition_gpu("A100-80GB", {"mig": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}})
    gpus = [GPU(0, A_UUID[0], "A100-80GB", 81920, mig), GPU(1, A_UUID[1], "A100-80GB", 81920)]
    return Node(name, 128000, 1 << 40, gpus=gpus, dcgm_exporter=url)


def test_exporters_are_scraped_and_every_failure_is_a_condition(server: str) -> None:
    nodes = [
        h100("ok", f"{server}/h100"),
        a100("mig", f"{server}/mig"),
        a100("mig-old", f"{server}/mig-no-dcp"),
        h100("broken", f"{server}/broken"),
        h100("garbage", f"{server}/garbage"),
        h100("slow", f"{server}/slow"),
        h100("refused", f"http://127.0.0.1:{closed_port()}/metrics"),
        h100("nonsense-url", "not a url at all"),
    ]
    outcomes: Counter[str] = Counter()
    u = Utilisation(stale_after=60)
    scraper = Scraper(u, interval=3600, timeout=2.0, on_scrape=lambda o: outcomes.update([o]))
    scraper.set_targets({n.name: (n, exporter_url(n) or "") for n in nodes}, start=False)
    done = scraper.scrape_all()
    assert len(done) == len(nodes)
    assert outcomes == Counter({Outcome.OK: 2, Outcome.PARTIAL: 1, Outcome.FAILED: 4,
                                Outcome.UNREADABLE: 1})  # fmt: skip

    gpu0 = u.device("ok", "gpu-0")
    assert gpu0 is not None and gpu0.known and gpu0.mean == pytest.approx(0.826512)
    assert u.condition("ok") is None
    instance = u.device("mig", "gpu-0-mig-3g40gb-4")
    assert instance is not None and instance.mean == pytest.approx(0.91)
    node = u.node("mig")
    assert node is not None and node.samples == 5
    # the old exporter's MIG rows are unknown (not idle), its whole GPU is read
    partial = u.condition("mig-old")
    assert partial is not None and partial.reason.code is Code.TELEMETRY_PARTIAL
    assert "gpu-0-mig-3g40gb-4" in partial.reason.fields["unreported"]
    assert u.device("mig-old", "gpu-0-mig-3g40gb-4") is None
    assert u.device("mig-old", "gpu-1") is not None

    for name in ("broken", "slow", "refused", "nonsense-url"):
        cond = u.condition(name)
        assert cond is not None and cond.reason.code is Code.TELEMETRY_SCRAPE_FAILED, name
        assert u.node(name) is None
    broken = u.condition("broken")
    assert broken is not None and "500" in broken.reason.render()
    garbage = u.condition("garbage")
    assert garbage is not None and garbage.reason.code is Code.TELEMETRY_UNREADABLE


def test_the_scrape_thread_runs_until_stopped_and_a_recovered_exporter_clears_its_condition(
    server: str,
) -> None:
    u = Utilisation()
    node = h100("n1", f"{server}/broken")
    scraper = Scraper(u, interval=0.05, timeout=1.0)
    scraper.set_targets({"n1": (node, f"{server}/broken")})  # starts the thread
    try:
        deadline = time.time() + 10
        while u.condition("n1") is None and time.time() < deadline:
            time.sleep(0.02)
        assert u.condition("n1") is not None
        scraper.set_targets({"n1": (node, f"{server}/h100")})
        while u.condition("n1") is not None and time.time() < deadline:
            time.sleep(0.02)
        assert u.condition("n1") is None
        assert u.device("n1", "gpu-0") is not None
    finally:
        scraper.stop()
