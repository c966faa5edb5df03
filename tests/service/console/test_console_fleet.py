"""The provider's console pages without a browser: the fleet heatmap's data and legend, nodes
with cordon / drain / partition (confirming what was done, or the API's error next to the
field, nothing changed), tenants and grants, the idle pool, utilisation; a platform viewer
reads but may not act, a tenant role sees none of it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from console_world import DEMO_ADMIN, World, demo_world, log_in
from fastapi.testclient import TestClient

from gpuaas.service.fleet_view import BACKGROUND, contrast

NODE = "h100-005"
TABLES = ("/fleet/nodes", "/fleet/tenants")
MIG_NODE = "a100-mig-03"
PAGES = ["/fleet", "/fleet/nodes", "/fleet/tenants", "/fleet/idle", "/fleet/utilisation",
         f"/fleet/nodes/{NODE}"]  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with demo_world(tmp_path_factory.mktemp("console-fleet")) as world:
        yield world


def _admin(client: TestClient) -> dict[str, str]:
    return {"Authorization": f"Bearer {DEMO_ADMIN}"}


def _node(client: TestClient, name: str) -> dict:
    return client.get(f"/v1/nodes/{name}", headers=_admin(client)).json()


def _errors(html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", e).strip()
            for e in re.findall(r'class="error"[^>]*>(.*?)</(?:p|div)>', html, re.S)]  # fmt: skip


def test_every_provider_page_renders_for_the_provider_admin(world: World) -> None:
    client, _ = world
    log_in(client, DEMO_ADMIN)
    for path in PAGES:
        r = client.get(path)
        assert r.status_code == 200, (path, r.text[-1500:])
        assert "<h1>" in r.text
    nav = client.get("/fleet").text
    for title in ("Fleet", "Nodes", "Tenants &amp; grants", "Idle pool", "Utilisation"):
        assert f">{title}</a>" in nav


def test_the_heatmap_carries_the_apis_picture_and_a_legend_with_contrast(world: World) -> None:
    client, _ = world
    log_in(client, DEMO_ADMIN)
    html = client.get("/fleet").text
    carried = json.loads(re.search(r'<script id="fleet-data"[^>]*>(.*?)</script>', html,
                                   re.S).group(1))  # type: ignore[union-attr]  # fmt: skip
    api = client.get("/v1/fleet/picture", headers=_admin(client)).json()
    assert carried == api
    assert api["nodes"] == 66 and api["gpus"] == sum(
        len(gpus) for g in api["groups"] for *_, gpus in g["nodes"]
    )
    groups = {(g["rack"], g["nvlink"]) for g in api["groups"]}
    assert {("rack-h1", "nvl-h1"), ("rack-h8", "nvl-h8"), ("rack-c1", "")} <= groups
    swatches = re.findall(r'<li data-key="([^"]+)" data-colour="(#[0-9a-f]{6})">', html)
    assert [k for k, _ in swatches] == [e["key"] for e in api["legend"]]
    for key, colour in swatches:
        assert contrast(colour, BACKGROUND) >= 3.0, key


def test_the_picture_polls_with_an_etag(world: World) -> None:
    client, _ = world
    log_in(client, DEMO_ADMIN)
    first = client.get("/fleet/picture.json")
    etag = first.headers["etag"]
    assert first.status_code == 200 and first.json()["etag"] == etag.strip('"')
    again = client.get("/fleet/picture.json", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    api = client.get("/v1/fleet/picture", headers={**_admin(client), "If-None-Match": etag})
    assert api.status_code == 304


def test_cordon_drain_uncordon_confirm_what_they_did(world: World) -> None:
    client, _ = world
    csrf = log_in(client, DEMO_ADMIN)
    page = client.get(f"/fleet/nodes/{NODE}").text
    assert 'data-confirm="Drain h100-005? Its jobs are requeued."' in page
    for action, state, said in (("cordon", "cordoned", "cordoned: no new pods go there"),
                                ("drain", "draining", "draining: cordoned, its jobs are requeued"),
                                ("uncordon", "ok", "uncordoned: it takes pods again")):  # fmt: skip
        r = client.post(f"/fleet/nodes/{NODE}/{action}", data={"csrf": csrf})
        assert r.status_code == 200, r.text[-1500:]
        assert f"Node {NODE} {said}." in r.text
        assert f'id="node-state">{state}<' in r.text
    assert not _node(client, NODE)["cordoned"]
    picture = client.get("/v1/fleet/picture", headers=_admin(client)).json()
    assert "unavailable" in [e["key"] for e in picture["legend"]]


def test_a_write_without_the_csrf_token_changes_nothing(world: World) -> None:
    client, _ = world
    log_in(client, DEMO_ADMIN)
    r = client.post(f"/fleet/nodes/{NODE}/cordon", data={})
    assert r.status_code == 403
    assert not _node(client, NODE)["cordoned"]


def test_bad_partitioning_is_shown_next_to_the_field_and_nothing_changes(world: World) -> None:
    client, _ = world
    csrf = log_in(client, DEMO_ADMIN)
    before = _node(client, MIG_NODE)["spec"]
    r = client.post(f"/fleet/nodes/{MIG_NODE}/partition",
                    data={"csrf": csrf, "partitioning": "all-9g.99gb"})  # fmt: skip
    assert r.status_code == 422
    error = re.search(r'id="f-partitioning-error">([^<]+)<', r.text)
    assert error and "9g.99gb" in error.group(1), r.text[-2000:]
    assert 'value="all-9g.99gb"' in r.text  # what was typed stays
    bad_json = client.post(f"/fleet/nodes/{MIG_NODE}/partition",
                           data={"csrf": csrf, "partitioning": '{"mig": '})  # fmt: skip
    assert bad_json.status_code == 422
    assert re.search(r'id="f-partitioning-error">not valid JSON', bad_json.text)
    assert _node(client, MIG_NODE)["spec"] == before


def test_repartitioning_a_free_node_says_what_it_did(world: World) -> None:
    client, _ = world
    csrf = log_in(client, DEMO_ADMIN)
    shared = '{"timeSlicing": {"replicas": 2}}'
    r = client.post(f"/fleet/nodes/{MIG_NODE}/partition",
                    data={"csrf": csrf, "partitioning": shared})  # fmt: skip
    assert r.status_code == 200, r.text[-2000:]
    assert f"Node {MIG_NODE} repartitioned" in r.text
    assert "time-sliced ×2" in r.text
    gpus = _node(client, MIG_NODE)["gpus"]
    assert {g["partition"]["mode"] for g in gpus} == {"time-sliced"}


def test_a_platform_viewer_reads_but_its_writes_get_the_apis_refusal(world: World) -> None:
    client, tokens = world
    csrf = log_in(client, tokens["olga"])
    for path in PAGES:
        assert client.get(path).status_code == 200, path
    r = client.post(f"/fleet/nodes/{NODE}/cordon", data={"csrf": csrf})
    assert r.status_code == 403
    assert any("provider-admin" in e for e in _errors(r.text)), _errors(r.text)
    assert not _node(client, NODE)["cordoned"]


def test_a_tenant_role_sees_no_provider_page(world: World) -> None:
    client, tokens = world
    log_in(client, tokens["alice"])
    home = client.get("/t/acme-ai/jobs").text
    assert "/fleet" not in home
    for path in PAGES:
        r = client.get(path)
        # a page is the API's 403; a table page shows the API's refusal in place of rows
        assert r.status_code == (200 if path in TABLES else 403), path
        assert "needs a platform-wide role" in r.text, path
        assert "<td" not in r.text or 'class="empty"' in r.text, path
    assert "globex" not in client.get("/fleet/tenants").text


def test_tenants_grants_and_the_idle_pool(world: World) -> None:
    client, _ = world
    log_in(client, DEMO_ADMIN)
    tenants = client.get("/fleet/tenants").text
    api = client.get("/v1/fleet/tenants", headers=_admin(client)).json()["items"]
    assert {t["name"] for t in api} >= {"acme-ai"}
    for t in api:
        assert f">{t['name']}<" in tenants
        assert (
            f'aria-label="{t["name"]}: {t["heldGpus"]} GPUs held of {t["grantedGpus"]} granted"'
            in tenants
        )
    idle = client.get("/fleet/idle").text
    assert "No idle pool is registered" in idle
    assert re.search(r'id="idle-total">[\d.]+ GPUs free', idle)


def test_utilisation_hours_out_of_range_is_shown_next_to_the_field(world: World) -> None:
    client, _ = world
    log_in(client, DEMO_ADMIN)
    r = client.get("/fleet/utilisation", params={"hours": "0"})
    assert r.status_code == 422
    assert re.search(r'id="f-hours-error">[^<]*1', r.text), r.text[-1500:]
    ok = client.get("/fleet/utilisation", params={"hours": "48"})
    assert ok.status_code == 200 and 'class="chart" data-chart=' in ok.text
    assert re.search(r'id="chart-words">Last hour: [\d.]+% of \d+ GPUs allocated', ok.text)
