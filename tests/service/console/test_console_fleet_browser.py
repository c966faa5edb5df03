"""The provider's console as a person sees it, in Debian's headless Chromium: on the openb
fleet (1,213 nodes) with jobs, tenants, tenant clusters and the idle pool, log in with the
keyboard, see the fleet heatmap drawn (one SVG, every GPU) with a legend whose colours have
contrast, filter the nodes table, cordon and uncordon a node through its confirmation (and a
dismissed confirmation doing nothing), get a bad partitioning's error next to its field, and
read the tenants, the idle pool and the utilisation chart. Every form field has a label.

Each main view is saved as a screenshot (the test's tmp dir; also ``$GPUAAS_CONSOLE_SCREENSHOTS``
when set: ``docs/screenshots/`` holds the ones the README shows).

Needs Debian's Chromium, the playwright driver and ../shared/data/openb; skips with a clear
message where one is missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuaas.service import console_bench as cb
from gpuaas.service.headless import CHROMIUM_ARGS, chromium_binary
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database

CHROMIUM = chromium_binary()
#: one worker runs the whole module: under ``--dist loadgroup`` a test without a group is
#: scheduled on its own, so a test could land on another worker, with module fixtures of its
#: own (another store, server and browser, no cookie): the "lost session" of 2026-11-26
pytestmark = pytest.mark.xdist_group("console_fleet_browser")
OPENB = Path(__file__).resolve().parents[3] / "../shared/data/openb/openb_node_list_gpu_node.csv"
JOBS = 6000

#: WCAG contrast of two ``rgb(r, g, b)`` colours, computed in the page from what it shows
CONTRAST_JS = """
([a, b]) => {
  const lum = (css) => {
    const [r, g, b] = css.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number).map((c) => {
      c /= 255; return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}
"""
FREE_NODE_JS = """
() => {
  const data = JSON.parse(document.getElementById('fleet-data').textContent);
  const free = data.legend.findIndex((e) => e.key === 'free');
  for (const g of data.groups) for (const n of g.nodes)
    if (n[3].length && n[3].every((parts) => parts.every((p) => p[0] === free))) return n[0];
  return null;
}
"""
UNLABELLED_JS = """
() => [...document.querySelectorAll('main input:not([type=hidden]), main select, main textarea')]
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
  .map((el) => el.name || el.id)
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not OPENB.exists():
        pytest.skip(f"{OPENB} is absent (../shared/data holds the openb trace)")
    data = tmp_path_factory.mktemp("console-browser")
    url = f"sqlite:///{data / 'gpuaas.db'}"
    db = Database(url)
    db.upgrade()
    cb.build(db, OPENB, JOBS)
    db.dispose()
    settings = Settings(db_url=url, data_dir=data, reconcile=False, admin_token=cb.ADMIN_TOKEN)
    with cb.serving(settings) as base:
        yield base


@pytest.fixture(scope="module")
def page(served: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=list(CHROMIUM_ARGS))  # fmt: skip
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 1000})
            pg.set_default_timeout(30_000)
            yield pg
        finally:
            browser.close()


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    targets = [tmp_path]
    if os.environ.get("GPUAAS_CONSOLE_SCREENSHOTS"):
        targets.append(Path(os.environ["GPUAAS_CONSOLE_SCREENSHOTS"]))
    for target in targets:
        target.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(target / f"{name}.png"), full_page=True)
    assert (tmp_path / f"{name}.png").stat().st_size > 10_000


def _labelled(page: Any) -> None:
    assert page.evaluate(UNLABELLED_JS) == [], "form fields without a label"


def _log_in(page: Any, served: str) -> None:
    """Log in with the keyboard. Each test does, so none depends on another's session: the
    module's tests once ran on different xdist workers (it had no ``xdist_group``), and a
    test on a fresh worker found a fresh browser without a cookie (a redirect to /login)."""
    page.context.clear_cookies()
    page.goto(f"{served}/login")
    _labelled(page)
    page.get_by_label("API token").fill(cb.ADMIN_TOKEN)
    page.get_by_label("API token").press("Enter")  # keyboard submit
    page.wait_for_url(f"{served}/fleet")


def test_log_in_with_the_keyboard_and_see_the_fleet(page: Any, served: str, tmp_path: Path) -> None:
    _log_in(page, served)
    page.wait_for_selector("#heatmap svg")
    gpus = page.evaluate("JSON.parse(document.getElementById('fleet-data').textContent).gpus")
    assert gpus == 6212
    cells = int(page.get_attribute("#heatmap", "data-cells") or 0)
    assert cells >= gpus  # every GPU drawn, a shared one as several parts
    box = page.locator("#heatmap svg").bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 300
    # the legend: every swatch 3:1 against the page, its words 4.5:1
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    swatches = page.locator("#legend .swatch")
    assert swatches.count() >= 8
    for i in range(swatches.count()):
        colour = swatches.nth(i).evaluate("e => getComputedStyle(e).backgroundColor")
        assert page.evaluate(CONTRAST_JS, [colour, background]) >= 3.0, colour
        text = swatches.nth(i).evaluate("e => getComputedStyle(e.parentElement).color")
        assert page.evaluate(CONTRAST_JS, [text, background]) >= 4.5, text
    keys = page.eval_on_selector_all("#legend li", "els => els.map(e => e.dataset.key)")
    assert {"free", "pool", "cluster:tenant-00.train"} <= set(keys)
    # hovering a GPU names its node and owners
    page.locator("#heatmap rect[data-n]").nth(100).hover()
    tip = page.locator("#heatmap-tip")
    assert tip.is_visible() and "openb-node-" in tip.inner_text()
    page.wait_for_selector("div.chart .uplot")
    _shot(page, tmp_path, "provider-fleet")


def test_nodes_filter_cordon_uncordon_and_a_partition_error(
    page: Any, served: str, tmp_path: Path
) -> None:
    _log_in(page, served)
    free = page.evaluate(FREE_NODE_JS)  # a node nothing runs on: it may be repartitioned
    assert free
    page.goto(f"{served}/fleet/nodes")
    _labelled(page)
    page.get_by_label("GPU model").fill("T4")
    page.get_by_label("GPU model").press("Enter")
    page.wait_for_url("**/fleet/nodes?*model=T4*")
    models = page.eval_on_selector_all("table.list tbody tr td:nth-child(2)",
                                       "tds => tds.map(t => t.textContent)")  # fmt: skip
    assert models and set(models) == {"T4"}
    assert page.get_by_role("link", name="Next page").is_visible()
    _shot(page, tmp_path, "provider-nodes")
    node = page.locator("table.list tbody tr td:first-child a").first
    name = node.inner_text()
    node.click()
    page.wait_for_url(f"**/fleet/nodes/{name}")
    # a dismissed confirmation does nothing
    page.once("dialog", lambda d: d.dismiss())
    page.get_by_role("button", name="Drain").click()
    assert page.locator("#node-state").inner_text() == "ok"
    # an accepted one does it and says so
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Cordon").click()
    page.wait_for_selector(".flash")
    assert f"Node {name} cordoned" in page.locator(".flash").inner_text()
    assert page.locator("#node-state").inner_text() == "cordoned"
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Uncordon").click()
    page.wait_for_selector(".flash")
    assert page.locator("#node-state").inner_text() == "ok"
    # the API's error for the field, next to it, announced by the field
    page.goto(f"{served}/fleet/nodes/{free}")
    _labelled(page)
    field = page.get_by_label("Partitioning")
    field.fill("all-9g.99gb")
    field.press("Enter")
    page.wait_for_selector("#f-partitioning-error")
    assert page.get_by_label("Partitioning").get_attribute("aria-describedby") == (
        "f-partitioning-error"
    )
    error = page.locator("#f-partitioning-error").inner_text()
    assert error, "the API's message"
    _shot(page, tmp_path, "provider-node")


def test_tenants_idle_pool_and_utilisation(page: Any, served: str, tmp_path: Path) -> None:
    _log_in(page, served)
    page.goto(f"{served}/fleet/tenants")
    rows = page.locator("table.list tbody tr")
    assert rows.count() == 25
    assert page.locator(".grant-bars li").count() == 25
    # every cell's words 4.5:1 against what is behind them (a highlighted cell too)
    for cell in page.locator("table.list tbody td").all()[:80]:
        fg, bg = cell.evaluate(
            "e => { let b = e, c;"
            " do { c = getComputedStyle(b).backgroundColor; b = b.parentElement; }"
            " while (b && (c === 'rgba(0, 0, 0, 0)' || c === 'transparent'));"
            " return [getComputedStyle(e).color, c]; }"
        )
        assert page.evaluate(CONTRAST_JS, [fg, bg]) >= 4.5, (cell.inner_text(), fg, bg)
    _shot(page, tmp_path, "provider-tenants")
    page.goto(f"{served}/fleet/idle")
    assert "60 nodes" in page.locator("#pool-size").inner_text()
    assert page.locator("#revenue tbody tr").count() >= 1
    assert "USD" in page.locator("#revenue").inner_text()
    _shot(page, tmp_path, "provider-idle-pool")
    page.goto(f"{served}/fleet/utilisation")
    _labelled(page)
    page.wait_for_selector("div.chart .uplot canvas")
    assert "allocated" in page.locator("#chart-words").inner_text()
    _shot(page, tmp_path, "provider-utilisation")
    page.get_by_label("Hours back").fill("0")
    page.get_by_label("Hours back").press("Enter")
    page.wait_for_selector("#f-hours-error")
