"""A self-contained HTML report of one or more simulation runs.

One file, no scripts and no external resources (it must open offline, e.g. attached to a
ticket): plots are inline SVG drawn here, so there is no plotting dependency. Three plots (GPU
utilisation over time, queueing-delay CDF, per-tenant share against fair share) and a summary
table. Every plotted series carries ``data-points`` (its number of points) so a test or a
headless browser can check that the plots are not empty.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuaas.sim.metrics import queueing_delays
from gpuaas.sim.simulate import SimResult

W, H = 720, 300
ML, MR, MT, MB = 60, 20, 20, 45
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MAX_POINTS = 800


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _axes(
    x_label: str, y_label: str, x_ticks: list[tuple[float, str]], y_ticks: list[tuple[float, str]]
) -> str:
    """Axes in plot coordinates: ticks are (fraction 0..1 of the axis, label)."""
    pw, ph = W - ML - MR, H - MT - MB
    out = [f'<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>']
    for frac, label in x_ticks:
        x = ML + frac * pw
        out.append(
            f'<line x1="{x:.1f}" y1="{MT + ph}" x2="{x:.1f}" y2="{MT + ph + 4}" stroke="#999"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{MT + ph + 16}" font-size="11" text-anchor="middle">'
            f"{_esc(label)}</text>"
        )
    for frac, label in y_ticks:
        y = MT + ph - frac * ph
        out.append(f'<line x1="{ML}" y1="{y:.1f}" x2="{ML + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(
            f'<text x="{ML - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{_esc(label)}</text>"
        )
    out.append(
        f'<text x="{ML + pw / 2}" y="{H - 8}" font-size="12" text-anchor="middle">'
        f"{_esc(x_label)}</text>"
    )
    out.append(
        f'<text x="14" y="{MT + ph / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {MT + ph / 2})">{_esc(y_label)}</text>'
    )
    return "".join(out)


def _polyline(xs: np.ndarray, ys: np.ndarray, color: str, label: str) -> str:
    """``xs``/``ys`` as fractions 0..1 of the plot area."""
    pw, ph = W - ML - MR, H - MT - MB
    pts = " ".join(f"{ML + x * pw:.1f},{MT + ph - y * ph:.1f}" for x, y in zip(xs, ys, strict=True))
    return (
        f'<polyline class="series" data-label="{_esc(label)}" data-points="{len(xs)}" '
        f'fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>'
    )


def _legend(labels: Sequence[str]) -> str:
    out = []
    for k, label in enumerate(labels):
        y = MT + 14 + 16 * k
        color = COLORS[k % len(COLORS)]
        out.append(f'<rect x="{W - MR - 190}" y="{y - 9}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{W - MR - 175}" y="{y}" font-size="11">{_esc(label)}</text>')
    return "".join(out)


def _svg(title: str, body: str) -> str:
    return (
        f'<figure><svg class="plot" role="img" aria-label="{_esc(title)}" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}">{body}</svg><figcaption>{_esc(title)}</figcaption></figure>'
    )


def _utilization_series(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted utilisation in up to MAX_POINTS equal time bins."""
    t = np.asarray(result.series_t, dtype=float)
    if len(t) == 0:
        return np.zeros(0), np.zeros(0)
    alloc = np.asarray(result.series_alloc, dtype=float)
    cap = np.asarray(result.series_cap, dtype=float)
    end = max(result.end_time, t[-1] + 1.0)
    edges = np.linspace(t[0], end, min(MAX_POINTS, max(len(t), 2)) + 1)
    stops = np.append(t[1:], end)

    # integrate the step functions at the bin edges
    def integral(values: np.ndarray) -> np.ndarray:
        cum = np.concatenate(([0.0], np.cumsum(values * (stops - t))))
        k = np.clip(np.searchsorted(t, edges, side="right") - 1, 0, len(t) - 1)
        return cum[k] + values[k] * (edges - t[k])

    a, c = np.diff(integral(alloc)), np.diff(integral(cap))
    util = np.divide(a, c, out=np.zeros_like(a), where=c > 0)
    mids = (edges[:-1] + edges[1:]) / 2
    return mids, util


def utilization_plot(runs: Sequence[tuple[str, SimResult]]) -> str:
    series = [(label, *_utilization_series(r)) for label, r in runs]
    t0 = min((float(x[0]) for _, x, _ in series if len(x)), default=0.0)
    t1 = max((float(x[-1]) for _, x, _ in series if len(x)), default=1.0)
    span = max(t1 - t0, 1.0)
    unit, name = (86400.0, "days") if span > 3 * 86400 else (3600.0, "hours")
    x_ticks = [(k / 5, f"{span * k / 5 / unit:.1f}") for k in range(6)]
    y_ticks = [(k / 4, f"{k * 25}%") for k in range(5)]
    body = [
        _axes(f"time since the first arrival ({name})", "GPUs allocated / up", x_ticks, y_ticks)
    ]
    for k, (label, x, y) in enumerate(series):
        if len(x):
            body.append(
                _polyline((x - t0) / span, np.clip(y, 0, 1), COLORS[k % len(COLORS)], label)
            )
    body.append(_legend([label for label, _, _ in series]))
    return _svg("GPU utilisation over time", "".join(body))


def delay_cdf_plot(runs: Sequence[tuple[str, SimResult]]) -> str:
    """CDF of queueing delay on a log time axis (1 s .. the largest delay)."""
    delays = [(label, np.sort(np.asarray(queueing_delays(r), dtype=float))) for label, r in runs]
    top = max((float(d[-1]) for _, d in delays if len(d)), default=1.0)
    hi = math.log10(max(top, 10.0) + 1.0)
    marks = [
        (1, "1s"),
        (60, "1m"),
        (3600, "1h"),
        (86400, "1d"),
        (7 * 86400, "1w"),
        (30 * 86400, "30d"),
    ]
    x_ticks = [(0.0, "0")] + [
        (math.log10(v + 1) / hi, s) for v, s in marks if math.log10(v + 1) <= hi
    ]
    y_ticks = [(k / 4, f"{k * 25}%") for k in range(5)]
    body = [_axes("queueing delay (log scale)", "jobs started within", x_ticks, y_ticks)]
    for k, (label, d) in enumerate(delays):
        if not len(d):
            continue
        idx = np.unique(np.linspace(0, len(d) - 1, min(len(d), MAX_POINTS)).astype(int))
        x = np.log10(d[idx] + 1.0) / hi
        y = (idx + 1) / len(d)
        body.append(_polyline(x, y, COLORS[k % len(COLORS)], label))
    body.append(_legend([label for label, _ in delays]))
    return _svg("Queueing delay, cumulative distribution", "".join(body))


def tenant_plot(label: str, summary: dict[str, Any]) -> str:
    """Bars: each tenant's share of allocated GPU-hours against its fair share."""
    tenants = summary.get("tenants", {})
    names = sorted(tenants)
    pw, ph = W - ML - MR, H - MT - MB
    y_ticks = [(k / 4, f"{k * 25}%") for k in range(5)]
    body = [_axes("tenant", "share of GPU-hours", [], y_ticks)]
    slot = pw / max(len(names), 1)
    bars = 0
    for k, name in enumerate(names):
        entry = tenants[name]
        x0 = ML + k * slot + slot * 0.15
        bw = slot * 0.35
        for j, (key, color) in enumerate((("share", COLORS[0]), ("fair_share", "#bbb"))):
            value = max(0.0, min(1.0, float(entry[key])))
            h = value * ph
            body.append(
                f'<rect class="bar" data-tenant="{_esc(name)}" data-value="{value:.4f}" '
                f'x="{x0 + j * bw:.1f}" y="{MT + ph - h:.1f}" width="{bw:.1f}" height="{h:.1f}" '
                f'fill="{color}"/>'
            )
            bars += 1
        body.append(
            f'<text x="{x0 + bw:.1f}" y="{MT + ph + 16}" font-size="11" text-anchor="middle">'
            f"{_esc(name)}</text>"
        )
    body.append(_legend(["share used", "fair share"]))
    return _svg(f"Per-tenant share of GPU-hours: {label}", "".join(body)).replace(
        'class="plot"', f'class="plot" data-points="{bars}"', 1
    )


def _fmt_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def summary_table(rows: Sequence[tuple[str, dict[str, Any]]]) -> str:
    head = (
        "<tr><th>run</th><th>jobs finished / total</th><th>pending</th><th>GPU utilisation</th>"
        "<th>mean delay</th><th>p50</th><th>p95</th><th>p99</th><th>mean slowdown</th>"
        "<th>preemptions</th><th>lost GPU-h</th><th>makespan</th><th>wall s</th></tr>"
    )
    body = []
    for label, s in rows:
        q = s["queueing_delay_s"]
        body.append(
            "<tr>"
            f"<td>{_esc(label)}</td><td>{s['jobs']['finished']} / {s['jobs']['total']}</td>"
            f"<td>{s['jobs']['pending']}</td><td>{s['gpu_utilization']:.1%}</td>"
            f"<td>{_fmt_s(q['mean'])}</td><td>{_fmt_s(q['p50'])}</td><td>{_fmt_s(q['p95'])}</td>"
            f"<td>{_fmt_s(q['p99'])}</td><td>{s['slowdown']['mean']:.2f}</td>"
            f"<td>{s['preemptions']}</td><td>{s['gpu_hours']['lost_to_restarts']:.1f}</td>"
            f"<td>{_fmt_s(s['makespan_s'])}</td><td>{s['wall_seconds']:.2f}</td>"
            "</tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
    "text-align:right}td:first-child,th:first-child{text-align:left}figure{margin:1em 0}"
    "figcaption{font-weight:600;margin-top:4px}.note{color:#555}"
)


def render_html(
    runs: Sequence[tuple[str, SimResult, dict[str, Any]]], title: str = "gpuaas simulation"
) -> str:
    """The report page for ``(label, result, summary)`` runs (one or several to compare)."""
    pairs = [(label, result) for label, result, _ in runs]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        summary_table([(label, s) for label, _, s in runs]),
        utilization_plot(pairs),
        delay_cdf_plot(pairs),
    ]
    for label, _, summary in runs:
        parts.append(tenant_plot(label, summary))
    parts.append(
        '<p class="note">Utilisation: GPUs allocated to jobs over GPUs up (failed or scaled-away '
        "nodes excluded). Queueing delay: first start minus arrival. Made by gpuaas simulate; "
        "this page has no scripts and loads nothing from the network.</p>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)
