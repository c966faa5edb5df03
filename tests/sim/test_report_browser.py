"""The HTML report as a person sees it: opened in headless Chromium, its plots drawn with data.

Needs Debian's Chromium (`make test` installs it) and the playwright driver; skips with a clear
message where either is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaas.service.headless import CHROMIUM_ARGS, chromium_binary
from gpuaas.sim.fleet_auto import auto_fleet
from gpuaas.sim.metrics import summarize
from gpuaas.sim.report import render_html
from gpuaas.sim.simulate import SimConfig, simulate
from gpuaas.sim.traces import generate_jobs

CHROMIUM = chromium_binary()


def test_report_renders_plots_with_data_in_chromium(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    doc = {
        "seed": 3,
        "horizon": "1d",
        "tenants": [
            {"name": "research", "rate_per_hour": 4, "gpus": {"choices": [1, 8]}},
            {"name": "prod", "rate_per_hour": 2, "gpus": 4, "duration": "3h"},
        ],
    }
    jobs = generate_jobs(doc)
    result = simulate(auto_fleet(jobs, 0.9), jobs, SimConfig())
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html([("default", result, summarize(result))], "browser check"))

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(page_file.as_uri())
            plots = page.locator("svg.plot")
            assert plots.count() >= 3
            for i in range(plots.count()):
                box = plots.nth(i).bounding_box()
                assert box is not None and box["width"] > 100 and box["height"] > 50
            # Every drawn series has real points on screen, not an empty path.
            lines = page.locator("svg.plot polyline.series")
            assert lines.count() >= 2
            for i in range(lines.count()):
                points = lines.nth(i).evaluate("el => el.points.numberOfItems")
                length = lines.nth(i).evaluate("el => el.getTotalLength()")
                assert points >= 2 and length > 10
            shot = page.screenshot(full_page=True)
        finally:
            browser.close()
    blank = browser_blank_png_size(sync_api)
    # What a person sees: the page's picture carries far more than an empty page's.
    assert len(shot) > 5 * blank


def browser_blank_png_size(sync_api: object) -> int:
    """Size of a screenshot of an empty page of the same viewport, for comparison."""
    with sync_api.sync_playwright() as p:  # type: ignore[attr-defined]
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_content("<html><body></body></html>")
            return len(page.screenshot(full_page=True))
        finally:
            browser.close()
