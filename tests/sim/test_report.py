"""The HTML report: self-contained (no scripts, nothing fetched) and its plots carry data.

There is no browser test: the page is checked structurally with the standard HTML parser.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from gpuaas.sim.fleet_auto import auto_fleet
from gpuaas.sim.metrics import summarize
from gpuaas.sim.report import render_html
from gpuaas.sim.simulate import QueuePolicy, SimConfig, simulate
from gpuaas.sim.traces import generate_jobs

DOC = {
    "seed": 2,
    "horizon": "1d",
    "tenants": [
        {"name": "research", "rate_per_hour": 4, "gpus": {"choices": [1, 8, 16]}, "weight": 2},
        {"name": "prod", "rate_per_hour": 2, "gpus": 4, "duration": "3h"},
    ],
}


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def runs() -> list:
    jobs = generate_jobs(DOC)
    nodes = auto_fleet(jobs, 0.9)
    out = []
    for qp in (QueuePolicy.DEFAULT, QueuePolicy.FIFO):
        cfg = SimConfig(queue_policy=qp, tenant_weights={"research": 2.0})
        r = simulate(nodes, jobs, cfg)
        out.append((f"gen {qp}", r, summarize(r)))
    return out


def test_report_is_self_contained_and_plots_have_points() -> None:
    page = render_html(runs(), "test <report>")
    assert page.startswith("<!DOCTYPE html>")
    assert "test &lt;report&gt;" in page
    lower = page.lower()
    for forbidden in ("<script", "http://", "https://", "<link", "@import", "url(", "<img"):
        assert forbidden not in lower, forbidden
    parser = Collect()
    parser.feed(page)
    svgs = [a for t, a in parser.tags if t == "svg"]
    assert len(svgs) == 2 + 2  # utilisation, delay CDF, one tenant plot per run
    series = [a for t, a in parser.tags if t == "polyline"]
    labels = {a["data-label"] for a in series}
    assert labels == {"gen default", "gen fifo"}
    assert len(series) == 4
    for a in series:
        n = int(a["data-points"] or 0)
        assert n > 10
        assert len((a["points"] or "").split()) == n
    bars = [a for t, a in parser.tags if t == "rect" and a.get("class") == "bar"]
    assert {a["data-tenant"] for a in bars} == {"research", "prod"}
    fair = [float(a["data-value"] or 0) for a in bars if a["fill"] == "#bbb"]
    assert sorted(set(fair)) == [pytest.approx(1 / 3, abs=1e-3), pytest.approx(2 / 3, abs=1e-3)]
    assert sum(float(a["data-value"] or 0) for a in bars if a["fill"] != "#bbb") > 0.99
