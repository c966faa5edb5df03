"""Utilisation through the API and /metrics, on the simulated fleet fed by the reconciler:
a job's, a node's and a tenant cluster's windows with the access of the job, the node and
the cluster (a tenant-user reads its own jobs only; another tenant's job or cluster is a 404;
nodes are the provider's), dcgm-like gauges, and a node whose exporter cannot be reached
shown with its condition."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_clusters_api import World, bm_body, job

from conftest import ADMIN_TOKEN, Api, make_settings
from gpuaas.service.app import create_app
from gpuaas.service.reconciler import Reconciler

WINDOW = 4.0


@pytest.fixture
def world(sqlite_url: str, tmp_path: Path) -> Iterator[World]:
    # a 4 s window: once a job runs, the samples of its devices before its start fall out
    # (and a loaded machine still reads within the window after a step)
    settings = make_settings(sqlite_url, tmp_path, telemetry_interval=0, telemetry_window=WINDOW)
    app = create_app(settings)
    with TestClient(app) as client:
        w = World(Api(client, ADMIN_TOKEN), tmp_path)
        # the reconciler feeds the very windows the API reads (app.state.utilisation)
        w.reconciler = Reconciler(w.db, w.settings, app.state.telemetry,
                                  utilisation=app.state.utilisation)  # fmt: skip
        w.build()
        yield w
        w.reconciler.stop()


def running(w: World, *ids: int) -> None:
    w.settle(lambda: all(w.job(i).state == "Running" for i in ids))
    until = time.time() + WINDOW + 0.2  # a window's worth of samples taken while they run
    while time.time() < until:
        w.reconciler.step(time.time())
        time.sleep(0.02)


def get(w: World, url: str, token: str) -> Any:
    return w.api.as_(token).get(url)


def test_jobs_nodes_and_clusters_read_their_windows_with_their_access(world: World) -> None:
    w = world
    w.ok("POST", "/v1/tenants/acme/clusters", w.admin(), json=bm_body(2))
    w.settle(lambda: w.cluster()["state"] == "Ready")
    mine = w.submit("acme", job("inside", gpus=4, cluster="bm", utilization={"gpu": 70}))
    theirs = w.submit("globex", job("shared", gpus=8, utilization={"gpu": 30, "memory": 10}))
    running(w, mine, theirs)

    r = get(w, f"/v1/tenants/acme/jobs/{mine}/utilization", w.user())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tenant"] == "acme" and body["cluster"] == "bm" and body["windowSeconds"] == WINDOW
    assert body["window"]["known"] and body["window"]["utilization"] == pytest.approx(70, abs=3)
    assert len(body["devices"]) == 4
    node = body["devices"][0]["node"]
    assert {d["node"] for d in body["devices"]} == {node}
    assert {d["device"] for d in body["devices"]} <= {f"gpu-{i}" for i in range(8)}

    # another tenant sees neither the job nor the cluster, by either tenant's path
    for url in (f"/v1/tenants/acme/jobs/{mine}/utilization",
                f"/v1/tenants/globex/jobs/{mine}/utilization",
                "/v1/tenants/acme/clusters/bm/utilization",
                "/v1/tenants/globex/clusters/bm/utilization"):  # fmt: skip
        assert get(w, url, w.user("globex")).status_code == 404, url
        assert get(w, url, w.admin("globex")).status_code == 404, url
    # a tenant-user reads its own jobs only; nodes are the provider's
    assert get(w, f"/v1/nodes/{node}/utilization", w.admin()).status_code == 403
    assert get(w, f"/v1/tenants/globex/jobs/{theirs}/utilization",
               w.user("globex")).status_code == 200  # fmt: skip

    w.reconciler.step(time.time())  # fresh samples: the window is short
    cluster = get(w, "/v1/tenants/acme/clusters/bm/utilization", w.user()).json()
    assert len(cluster["nodes"]) == 2 and node in {n["node"] for n in cluster["nodes"]}
    # 4 of the cluster's 16 GPUs at 70 %, the rest idle
    assert cluster["window"]["utilization"] == pytest.approx(70 * 4 / 16, abs=2)

    w.reconciler.step(time.time())
    view = get(w, f"/v1/nodes/{node}/utilization", ADMIN_TOKEN).json()
    assert view["dcgmExporter"] is None and view["condition"] is None
    assert len(view["devices"]) == 8
    held = [d for d in view["devices"] if d["jobs"]]
    assert len(held) == 4 and all(d["jobs"] == [mine] for d in held)
    assert all(d["source"] == "synthetic" for d in view["devices"])
    idle = [d for d in view["devices"] if not d["jobs"]]
    assert all(d["window"]["utilization"] == 0 for d in idle)
    assert get(w, "/v1/nodes/nope/utilization", ADMIN_TOKEN).status_code == 404

    w.reconciler.step(time.time())
    text = w.api.get("/metrics").text
    series = re.findall(r"^gpuaas_gpu_utilization\{(.*)\} (.*)$", text, re.M)
    assert len(series) == 6 * 8  # one per metered device of the fleet
    labelled = [labels for labels, _ in series if f'job="{mine}"' in labels]
    assert len(labelled) == 4 and all('tenant="acme"' in x for x in labelled)
    assert re.search(rf'^gpuaas_job_gpu_utilization\{{job="{mine}",tenant="acme"\}} 0\.[67]',
                     text, re.M)  # fmt: skip
    assert re.search(r'^gpuaas_cluster_gpu_utilization\{cluster="bm",tenant="acme"\} 0\.1', text,
                     re.M)  # fmt: skip
    assert re.search(r'^gpuaas_gpu_telemetry_known\{device="gpu-0",node="n1"\} 1\.0$', text, re.M)


def test_a_job_that_holds_nothing_reads_null(world: World) -> None:
    w = world
    w.settle()
    waiting = w.submit("acme", job("pending", gpus=8))  # no reconciler step yet: Pending
    body = get(w, f"/v1/tenants/acme/jobs/{waiting}/utilization", w.user()).json()
    assert body["window"] is None and body["devices"] == []


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_node_naming_an_unreachable_exporter_shows_why(world: World) -> None:
    w = world
    url = f"http://127.0.0.1:{closed_port()}/metrics"
    entry = w.ok("GET", "/v1/nodes/n6")["spec"]
    bad = {**entry, "telemetry": {"dcgmExporter": "n6:9400/metrics"}}
    r = w.api.put("/v1/nodes", json={"apiVersion": "gpuaas.io/v1", "kind": "Fleet",
                                     "nodes": [bad]})  # fmt: skip
    assert r.status_code == 422 and "telemetry.dcgmExporter" in r.text, r.text
    entry["telemetry"] = {"dcgmExporter": url}
    w.ok("PUT", "/v1/nodes", json={"apiVersion": "gpuaas.io/v1", "kind": "Fleet",
                                   "nodes": [entry]})  # fmt: skip
    assert w.ok("GET", "/v1/nodes/n6")["spec"]["telemetry"] == {"dcgmExporter": url}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        w.reconciler.step(time.time())
        view = w.ok("GET", "/v1/nodes/n6/utilization")
        if view["condition"] is not None:
            break
        time.sleep(0.05)
    assert view["dcgmExporter"] == url
    assert view["condition"]["reason"]["code"] == "TelemetryScrapeFailed"
    assert url in view["condition"]["reason"]["message"]
    assert view["window"] is None and view["devices"] == []  # read from the exporter only
    text = w.api.get("/metrics").text
    assert 'gpuaas_node_telemetry_condition{code="TelemetryScrapeFailed",node="n6"} 1.0' in text
    assert re.search(r'^gpuaas_dcgm_scrapes_total\{outcome="failed"\} [1-9]', text, re.M)


@pytest.mark.parametrize(
    ("utilization", "field"),
    [
        ({"gpu": 150}, "utilization.gpu"),
        ({"gpu": -1}, "utilization.gpu"),
        ({"gpu": 50, "memory": 101}, "utilization.memory"),
        ({"gpu": 50, "amplitude": 20}, "period"),
        ({"gpu": 50, "period": 0}, "utilization.period"),
        ({"gpu": 50, "phase": 3}, "utilization.phase"),
        ("busy", "utilization"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_field(
    world: World, utilization: Any, field: str
) -> None:
    r = world.api.as_(world.user()).post(
        "/v1/tenants/acme/jobs", json=job("bad", gpus=1, utilization=utilization)
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert field in r.text, r.text
    assert world.api.as_(world.user()).get("/v1/tenants/acme/jobs").json()["items"] == []
