"""The console as its people use it, in Debian's Chromium: a tenant user, a tenant admin and
the provider admin log in (keyboard only), walk their pages and do what the pages offer; a
foreign tenant's objects never appear; bad input is shown next to its field with the API's
message and creates nothing; every form field has a label; live regions change without a
reload. A screenshot of each main view is saved (``GPUAAS_CONSOLE_SCREENSHOTS`` names the
directory; a temporary one otherwise).

Needs Debian's Chromium (`make test` installs it) and the playwright driver, never
``playwright install``; skips with a clear message where either is missing. One server and one
browser for the module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_server import ConsoleServer

from gpuaas.service.headless import CHROMIUM_ARGS, chromium_binary

CHROMIUM = chromium_binary()
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser")]
TENANT = "acme-ai"
FOREIGN = "globex-research"
WAIT_MS = 60_000  # a loaded 2-core machine: admission, a process start and a poll


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    s = ConsoleServer(tmp_path_factory.mktemp("console-browser"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def browser(server: ConsoleServer) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_ARGS))
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    named = os.environ.get("GPUAAS_CONSOLE_SCREENSHOTS")
    path = Path(named) if named else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_in(browser: Any, server: ConsoleServer, who: str) -> Any:
    """A fresh browser context logged in as ``who``, by keyboard: type the token, press Enter."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=server.url)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto("/login")
    assert_labelled(page)
    field = page.get_by_label("API token")
    field.fill(server.tokens[who])
    field.press("Enter")
    page.wait_for_url(re.compile(r".*/(t/|nothing|fleet|nodes|tenants).*"))
    return page


def assert_labelled(page: Any) -> None:
    """Every visible form control has a label (or an aria-label); the page has one h1, a
    main landmark and a language."""
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea')]
            .filter(e => e.type !== 'hidden')
            .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                         && !e.getAttribute('aria-labelledby'))
            .map(e => e.name || e.id)"""
    )
    assert unlabelled == [], f"{page.url}: fields without a label: {unlabelled}"
    assert page.locator("h1").count() == 1
    assert page.locator("main").count() == 1
    assert page.evaluate("document.documentElement.lang") == "en"


def shoot(page: Any, shots: Path, name: str) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    assert (shots / f"{name}.png").stat().st_size > 10_000


def error_of(page: Any, field_id: str) -> str:
    """The message shown under a field, which the field names with aria-describedby."""
    field = page.locator(f"#{field_id}")
    assert field.get_attribute("aria-invalid") == "true"
    described = field.get_attribute("aria-describedby")
    return page.locator(f"#{described}").inner_text()


def job_count(server: ConsoleServer, who: str) -> int:
    with server.api(who) as api:
        n, params = 0, {"limit": 1000}
        while True:
            answer = api.get(f"/v1/tenants/{TENANT}/jobs", params=params)
            assert answer.status_code == 200, answer.text
            n += len(answer.json()["items"])
            if answer.json()["next"] is None:
                return n
            params["after"] = answer.json()["next"]


def test_a_tenant_user_submits_watches_and_cancels_jobs(
    browser: Any, server: ConsoleServer, shots: Path
) -> None:
    page = log_in(browser, server, "arjun")
    assert page.url.endswith(f"/t/{TENANT}/jobs")
    nav = page.locator("nav").inner_text()
    assert "Jobs" in nav and "Submit a job" in nav
    assert "Clusters" not in nav and FOREIGN not in nav  # a tenant-user's menu, one tenant
    assert_labelled(page)
    shoot(page, shots, "user-jobs")

    # the submit form shows the profile's range and follows the chosen profile
    page.get_by_role("link", name="Submit a job").click()
    assert_labelled(page)
    profiles = page.locator("#profiles").inner_text()
    assert "Min" in profiles and "Default" in profiles and "Max" in profiles
    page.get_by_label("Hardware profile").select_option("h100-1x")
    gpus = page.get_by_label("GPUs per pod")
    assert gpus.get_attribute("max") == "4"
    assert "min 1, default 1, max 4" in page.locator("#f-gpus ~ .help").inner_text()
    shoot(page, shots, "user-submit")

    # bad input: the API's message under the field, nothing created
    before = job_count(server, "arjun")
    page.get_by_label("Job name").fill("Bad_Name")
    page.get_by_label("Command").fill("sh -c 'echo hi'")
    page.get_by_label("Command").press("Enter")  # keyboard submit
    assert "DNS-1123" in error_of(page, "f-name")
    page.get_by_label("Job name").fill("too-many-gpus")
    page.get_by_label("GPUs per pod").fill("9")
    page.get_by_role("button", name="Submit job").click()
    assert "above the maximum 4" in error_of(page, "f-gpus")
    assert page.get_by_label("Job name").input_value() == "too-many-gpus"  # what was typed
    assert job_count(server, "arjun") == before

    # a good one: its page confirms, and state and logs arrive without a reload
    page.get_by_label("GPUs per pod").fill("")
    page.get_by_label("Command").fill("sh -c 'echo hello-from-the-console; sleep 2; echo bye'")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(rf".*/t/{TENANT}/jobs/\d+$"))
    assert "submitted" in page.locator(".flash").inner_text()
    page.evaluate("window.__notReloaded = true")
    page.wait_for_function(
        "document.querySelector('#job-logs').textContent.includes('hello-from-the-console')",
        timeout=WAIT_MS * 2,
    )
    page.wait_for_function(
        "document.querySelector('#job-state').textContent.trim() === 'Succeeded'",
        timeout=WAIT_MS * 2,
    )
    assert page.evaluate("window.__notReloaded") is True
    events = page.locator("#job-events").inner_text()
    assert "Pending" in events and "Running" in events and "Succeeded" in events
    assert "unit-hours" in page.locator("#job-cost").inner_text()
    assert page.get_by_role("button", name="Cancel job").count() == 0  # finished: gone, live
    shoot(page, shots, "user-job")

    # YAML: several documents, one bad: the API's errors by the text area, none created
    before = job_count(server, "arjun")
    page.goto(f"/t/{TENANT}/submit")
    pods = "podSets: [{count: 1, hardwareProfile: h100-1x}]\n"
    good = "name: yaml-one\ncommand: [sh, -c, 'sleep 600']\n" + pods
    bad = "---\nname: Yaml_Two\ncommand: [x]\n" + pods
    page.get_by_label(re.compile("Job spec")).fill(good + bad)
    page.get_by_role("button", name="Submit YAML").click()
    assert "DNS-1123" in error_of(page, "f-yaml")
    assert job_count(server, "arjun") == before
    page.get_by_label(re.compile("Job spec")).fill(good)
    page.get_by_role("button", name="Submit YAML").click()
    page.wait_for_url(re.compile(rf".*/t/{TENANT}/jobs/\d+$"))
    job_id = page.url.rsplit("/", 1)[1]

    # cancel (the confirmation accepted), confirmed, and the state follows
    page.get_by_role("button", name="Cancel job").click()
    page.wait_for_url(re.compile(rf".*/jobs/{job_id}$"))
    assert "cancellation requested" in page.locator(".flash").inner_text()
    page.wait_for_function("document.querySelector('#job-state').textContent.includes('Cancelled')")

    # the jobs list filters on the server
    page.goto(f"/t/{TENANT}/jobs")
    page.get_by_label("State").select_option("Cancelled")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r".*state=Cancelled.*"))
    states = page.locator("#live table.list tbody td:nth-child(5)").all_inner_texts()
    assert states and set(states) == {"Cancelled"}
    assert job_id in page.locator("#live").inner_text()
    page.goto(f"/t/{TENANT}/jobs?state=Bogus")  # a filter the API refuses, by the filter
    assert "unknown state" in error_of(page, "filter-state")
    page.context.close()


def test_a_tenant_admin_runs_clusters_quotas_users_and_budgets(
    browser: Any, server: ConsoleServer, shots: Path
) -> None:
    # the provider adds two spare nodes no flavor of the demo's covers, and lets the tenant
    # carve clusters from that GPU model
    spare = [
        {"name": f"console-spare-{i}", "cpu": "64", "memory": "512Gi",
         "gpus": {"model": "H100-80GB", "count": 8}, "labels": {"gpuaas.io/pool": "spare"},
         "topology": {"rack": "spare-rack", "nvlinkDomain": "spare-nvl"}}
        for i in (1, 2)
    ]  # fmt: skip
    with server.api("admin") as api:
        r = api.post(
            "/v1/nodes", json={"apiVersion": "gpuaas.io/v1", "kind": "Fleet", "nodes": spare}
        )
        assert r.status_code in (200, 201), r.text
        r = api.put(f"/v1/tenants/{TENANT}/cluster-allowance",
                    json={"gpuModels": ["H100-80GB"], "nodeLimit": 3})  # fmt: skip
        assert r.status_code == 200, r.text
    page = log_in(browser, server, "alice")
    nav = page.locator("nav").inner_text()
    for title in (
        "Clusters",
        "Queues and quotas",
        "Users and limits",
        "Usage and budgets",
        "Alerts",
    ):
        assert title in nav

    # clusters: bad input by the field, then one created on a flavor with free nodes
    page.get_by_role("link", name="Clusters").click()
    assert_labelled(page)
    page.get_by_label("Cluster name").fill("train-a")
    page.get_by_label("Kind").select_option("baremetal")
    page.get_by_label("Flavor").select_option("")
    page.get_by_label("or GPU model").select_option("H100-80GB")
    page.get_by_label("Nodes", exact=True).fill("9")
    page.get_by_role("button", name="Create cluster").click()
    assert "node limit of 3" in error_of(page, "f-count")
    assert "train-a" not in page.locator("#clusters").inner_text()  # nothing half-created
    assert page.get_by_label("or GPU model").input_value() == "H100-80GB"  # as typed
    page.get_by_label("Nodes", exact=True).fill("1")
    page.get_by_label("Most nodes the pool may scale to").fill("2")
    page.get_by_label("Nodes", exact=True).press("Enter")
    page.wait_for_url(re.compile(r".*/clusters/train-a$"))
    assert "Cluster train-a created" in page.locator(".flash").inner_text()
    page.wait_for_function(
        "document.querySelector('#cluster-state').textContent.trim() === 'Ready'",
        timeout=WAIT_MS * 2,
    )
    assert "Ready" in page.locator("#cluster-events").inner_text()
    assert_labelled(page)
    shoot(page, shots, "admin-cluster")
    page.get_by_label("Nodes in pool gpu").fill("50")
    page.get_by_role("button", name="Scale gpu").click()
    assert "above the pool's max of 2" in error_of(page, "f-count-gpu")
    page.get_by_label("Nodes in pool gpu").fill("2")
    page.get_by_role("button", name="Scale gpu").click()
    assert "pool gpu scaled to 2" in page.locator(".flash").inner_text()
    page.wait_for_function(  # the live region follows the worker: carved, then ready
        "document.querySelector('#cluster-events').textContent.includes('ready on 2 node')",
        timeout=WAIT_MS * 2,
    )
    page.get_by_role("button", name="Delete cluster train-a").click()
    page.wait_for_url(re.compile(r".*/clusters$"))
    assert "deletion started" in page.locator(".flash").inner_text()
    shoot(page, shots, "admin-clusters")

    # queues and quotas: bars with their meaning in words
    page.get_by_role("link", name="Queues and quotas").click()
    bars = page.locator(".bar[role=img]")
    assert bars.count() >= 2
    assert "GPUs held of" in (bars.first.get_attribute("aria-label") or "")
    assert "may still borrow" in page.locator("main").inner_text()
    shoot(page, shots, "admin-queues")

    # users and per-user limits
    page.get_by_role("link", name="Users and limits").click()
    assert_labelled(page)
    members = page.locator("#members").inner_text()
    assert "alice" in members and "arjun" in members
    assert "gina" not in members and "gus" not in members  # the foreign tenant's people
    page.get_by_label("Local queue").select_option("h100")
    page.get_by_label("Jobs one user may hold at once").fill("0")
    page.get_by_role("button", name="Set the per-user limit").click()
    assert "greater than or equal to 1" in error_of(page, "f-user_limit")
    page.get_by_label("Jobs one user may hold at once").fill("3")
    page.get_by_label("Jobs one user may hold at once").press("Enter")
    assert "at most 3 jobs per user" in page.locator(".flash").inner_text()
    assert "3" in page.locator("#user-limits").inner_text()
    shoot(page, shots, "admin-users")

    # usage and budgets, with the forecast
    page.get_by_role("link", name="Usage and budgets").click()
    assert_labelled(page)
    page.get_by_label("Budget name").fill("monthly")
    page.get_by_label("Amount", exact=True).fill("lots")
    page.get_by_role("button", name="Create budget").click()
    assert "not a decimal number" in error_of(page, "f-amount")
    page.get_by_label("Amount", exact=True).fill("1000")
    page.get_by_role("button", name="Create budget").click()
    assert "Budget monthly created" in page.locator(".flash").inner_text()
    budget = page.locator("#budget-monthly").inner_text()
    assert "spent of" in budget and "forecast" in budget
    shoot(page, shots, "admin-usage")

    page.get_by_role("link", name="Alerts").click()
    assert page.locator("#alerts").count() == 1
    shoot(page, shots, "admin-alerts")
    page.context.close()


def test_a_foreign_tenants_objects_never_appear(browser: Any, server: ConsoleServer) -> None:
    with server.api("gus") as api:
        spec = {"name": "globex-secret-job", "command": ["sleep", "600"],
                "podSets": [{"count": 1, "hardwareProfile": "l40s-1x"}]}  # fmt: skip
        profiles = api.get(f"/v1/tenants/{FOREIGN}/hardware-profiles").json()["items"]
        spec["podSets"][0]["hardwareProfile"] = profiles[0]["name"]
        r = api.post(f"/v1/tenants/{FOREIGN}/jobs", json=spec)
        assert r.status_code == 201, r.text
        foreign_id = r.json()["id"]
    for who in ("arjun", "alice"):
        page = log_in(browser, server, who)
        for path in ("/jobs", "/jobs?after=0", "/submit"):
            page.goto(f"/t/{TENANT}{path}")
            assert "globex-secret-job" not in page.content()
        answer = page.goto(f"/t/{TENANT}/jobs/{foreign_id}")
        assert answer is not None and answer.status == 404
        answer = page.goto(f"/t/{FOREIGN}/jobs")
        assert answer is not None and answer.status == 404
        assert "globex-secret-job" not in page.content()
        page.context.close()


def test_a_tenant_user_gets_no_admin_page(browser: Any, server: ConsoleServer) -> None:
    page = log_in(browser, server, "arjun")
    for path in ("/clusters", "/queues", "/users", "/usage", "/alerts"):
        answer = page.goto(f"/t/{TENANT}{path}")
        assert answer is not None and answer.status == 403, path
    page.context.close()


def test_the_provider_admin_sees_every_tenant_and_logs_out(
    browser: Any, server: ConsoleServer
) -> None:
    page = log_in(browser, server, "admin")
    for tenant in (TENANT, FOREIGN):
        answer = page.goto(f"/t/{tenant}/jobs")
        assert answer is not None and answer.status == 200
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r".*/login$"))
    assert "Logged out" in page.locator(".flash").inner_text()
    answer = page.goto(f"/t/{TENANT}/jobs")
    assert answer is not None and "/login" in page.url
    page.context.close()


def test_docs_render_offline_with_the_authorize_button(browser: Any, server: ConsoleServer) -> None:
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    outside: list[str] = []
    page.on(
        "request",
        lambda req: outside.append(req.url) if not req.url.startswith(server.url) else None,
    )
    page.goto("/docs")
    page.get_by_role("button", name=re.compile("Authorize")).first.wait_for(timeout=WAIT_MS)
    tags = page.locator(".opblock-tag")
    assert tags.count() > 5  # the API's sections, drawn
    tags.first.click()
    page.locator(".opblock").first.wait_for()  # a section opens on its operations
    assert outside == [], outside  # nothing fetched from anywhere else
    context.close()
