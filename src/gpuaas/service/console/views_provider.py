"""Provider-admin pages: the fleet as a picture (nodes x GPUs, parts coloured by owner),
allocation and utilisation over time, the idle pool with its idle GPUs and revenue, tenants
and their grants, and the nodes with cordon / drain / partition.

Every read and write is an API call with the session's token (``/v1/fleet/...``,
``/v1/nodes``, ``/v1/idle-pools``), so a platform viewer sees the pages and gets the API's
403 on a write, and a tenant role gets the API's 403 on everything here. The heatmap's data
is rendered into the page as JSON and drawn by ``static/fleet.js`` as one SVG; the page
polls ``/fleet/picture.json`` with the API's ETag and redraws only when it changed.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from markupsafe import Markup

from gpuaas.service.console.forms import Field, Form
from gpuaas.service.console.frame import Console, add_page, console, done, failed, page
from gpuaas.service.console.tables import Cell, Filter, api_table

router = APIRouter(include_in_schema=False)

PLATFORM = {"provider-admin", "viewer"}

add_page("Fleet", "/fleet", PLATFORM, order=1)
add_page("Nodes", "/fleet/nodes", PLATFORM, order=2)
add_page("Tenants & grants", "/fleet/tenants", PLATFORM, order=3)
add_page("Idle pool", "/fleet/idle", PLATFORM, order=4)
add_page("Utilisation", "/fleet/utilisation", PLATFORM, order=5)

#: Series colours of the charts (each at least 3:1 on white).
ALLOCATED = "#1f5fa8"
UTILISED = "#a6540f"


def _script_json(text: str) -> Markup:
    """JSON text safe inside ``<script type="application/json">``: no ``</`` can close it
    (``<\\/`` reads as ``</`` in JSON)."""
    return Markup(text.replace("</", "<\\/"))


def _chart(series: dict[str, Any], title: str) -> str:
    start, step = series["start"], series["step"]
    x = [start + i * step for i in range(len(series["allocated"]))]
    pct = [
        {
            "label": "allocated %",
            "color": ALLOCATED,
            "values": [round(v * 100, 2) for v in series["allocated"]],
        },
        {
            "label": "utilised %",
            "color": UTILISED,
            "values": [round(v * 100, 2) for v in series["utilised"]],
        },
    ]
    return json.dumps({"title": title, "x": x, "series": pct, "y": "% of GPUs"})


def _summary(series: dict[str, Any]) -> str:
    """The chart in words (for screen readers and the test): the last metered hour."""
    if not series["allocated"]:
        return "No hours."
    i = len(series["allocated"]) - 1
    return (
        f"Last hour: {series['allocated'][i] * 100:.1f}% of {series['gpus']} GPUs allocated, "
        f"{series['utilised'][i] * 100:.1f}% utilised."
    )


# --- the fleet -----------------------------------------------------------------------------


@router.get("/fleet")
async def fleet(c: Console = Depends(console)) -> Response:
    picture = await c.api.get("/v1/fleet/picture")
    if not picture.ok:
        return failed(c, picture)
    history = await c.api.get("/v1/fleet/history", hours=24)
    series = history.body if history.ok else None
    body = picture.body
    return page(
        c,
        "provider/fleet.html",
        title="Fleet",
        picture=body,
        picture_json=_script_json(picture.content.decode()),
        legend=body["legend"],
        chart=_chart(series, "Last 24 hours") if series else None,
        chart_words=_summary(series) if series else "",
    )


@router.get("/fleet/picture.json")
async def picture_json(c: Console = Depends(console)) -> Response:
    """The heatmap's data for the page's poll, with the API's ETag: 304 when the page has
    it already (the API keeps the picture per its ETag, so asking costs a lookup)."""
    answer = await c.api.get("/v1/fleet/picture")
    etag = answer.headers.get("etag", "")
    headers = {"Cache-Control": "no-cache", **({"ETag": etag} if etag else {})}
    if answer.ok and etag and c.request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(
        answer.content,
        status_code=answer.status,
        media_type="application/json",
        headers=headers,
    )


# --- utilisation ---------------------------------------------------------------------------


@router.get("/fleet/utilisation")
async def utilisation(c: Console = Depends(console), hours: str = "168") -> Response:
    form = Form(
        "/fleet/utilisation",
        [
            Field(
                "hours",
                "Hours back",
                kind="number",
                api=("hours",),
                value=hours,
                min="1",
                max=str(24 * 31),
                help="UTC hours, the current one last (1 to 744)",
            )
        ],
        submit="Show",
        id="hours",
    )
    answer = await c.api.get("/v1/fleet/history", hours=hours)
    if not answer.ok:
        form.show(_query_errors(answer, "hours"))
        return page(
            c,
            "provider/utilisation.html",
            title="Utilisation",
            form=form,
            chart=None,
            chart_words="",
            status=answer.status,
        )
    series = answer.body
    return page(
        c,
        "provider/utilisation.html",
        title="Utilisation",
        form=form,
        chart=_chart(series, f"Last {hours} hours"),
        chart_words=_summary(series),
        series=series,
    )


def _query_errors(answer: Any, name: str) -> Any:
    """A 422 on a query parameter names it ``query.<name>`` or ``<name>``: either is the
    field ``name``'s (the form's ``api`` path)."""
    from gpuaas.service.console.api import Answer

    body = answer.body if isinstance(answer.body, dict) else {}
    errors = [
        {**e, "field": name if str(e.get("field", "")).endswith(name) else e.get("field")}
        for e in body.get("errors") or []
        if isinstance(e, dict)
    ]
    return Answer(answer.status, {**body, "errors": errors}, answer.headers)


# --- nodes ---------------------------------------------------------------------------------


def _state(node: dict[str, Any]) -> str:
    return "draining" if node["draining"] else "cordoned" if node["cordoned"] else "ok"


def _node_row(node: dict[str, Any]) -> list[Cell]:
    href = f"/fleet/nodes/{quote(node['name'], safe='')}"
    topology = node.get("topology") or {}
    return [
        Cell(node["name"], href=href),
        Cell(node.get("gpuModel") or "—"),
        Cell(str(node.get("gpuCount", 0))),
        Cell(topology.get("rack") or "—"),
        Cell(topology.get("nvlinkDomain") or topology.get("nvlink_domain") or "—"),
        Cell(_state(node), cls=f"state-{_state(node)}"),
        Cell((node.get("labels") or {}).get("gpuaas.io/cluster") or "—"),
    ]


@router.get("/fleet/nodes")
async def nodes(c: Console = Depends(console)) -> Response:
    table = await api_table(
        c,
        "/v1/nodes",
        ["Name", "GPU model", "GPUs", "Rack", "NVLink domain", "State", "Cluster"],
        _node_row,
        filters=[
            Filter("model", "GPU model"),
            Filter("cordoned", "Cordoned", ("true", "false")),
            Filter("pool", "Pool label"),
        ],
        empty="No nodes match.",
    )
    return page(c, "provider/nodes.html", title="Nodes", table=table)


def _partition_form(name: str, values: dict[str, str] | None = None) -> Form:
    form = Form(
        f"/fleet/nodes/{quote(name, safe='')}/partition",
        [
            Field(
                "partitioning",
                "Partitioning",
                api=("partitioning",),
                value="whole",
                required=True,
                help="whole, a MIG layout such as all-1g.10gb, or JSON such as "
                '{"timeSlicing": {"replicas": 4}}',
            ),
        ],
        submit="Repartition",
        id="partition",
    )
    return form.fill(values or {})


async def _node_page(
    c: Console, name: str, form: Form | None = None, status: int = 200
) -> Response:
    answer = await c.api.get(f"/v1/nodes/{quote(name, safe='')}")
    if not answer.ok:
        return failed(c, answer)
    node = answer.body
    return page(
        c,
        "provider/node.html",
        title=f"Node {name}",
        node=node,
        state=_state(node),
        form=form or _partition_form(name),
        status=status,
    )


@router.get("/fleet/nodes/{name}")
async def node(name: str, c: Console = Depends(console)) -> Response:
    return await _node_page(c, name)


_ACTIONS = {
    "cordon": "cordoned: no new pods go there",
    "uncordon": "uncordoned: it takes pods again",
    "drain": "draining: cordoned, its jobs are requeued",
}


@router.post("/fleet/nodes/{name}/{action}")
async def node_action(name: str, action: str, c: Console = Depends(console)) -> Response:
    if action == "partition":
        return await _repartition(c, name)
    if action not in _ACTIONS:
        return await _node_page(c, name)
    answer = await c.api.post(f"/v1/nodes/{quote(name, safe='')}/{action}")
    if not answer.ok:
        form = _partition_form(name)
        form.errors.append(f"{action}: {answer.detail}")
        return await _node_page(c, name, form, status=answer.status)
    return done(c, f"/fleet/nodes/{quote(name, safe='')}", f"Node {name} {_ACTIONS[action]}.")


async def _repartition(c: Console, name: str) -> Response:
    form = _partition_form(name, c.form)
    raw = c.form.get("partitioning", "").strip()
    value: Any = raw
    if raw.startswith(("{", "[")):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            form["partitioning"].error = f"not valid JSON: {exc.msg} at character {exc.pos}"
            return await _node_page(c, name, form, status=422)
    answer = await c.api.put(f"/v1/nodes/{quote(name, safe='')}/partition", {"partitioning": value})
    if not answer.ok:
        form.show(answer)
        return await _node_page(c, name, form, status=answer.status)
    return done(c, f"/fleet/nodes/{quote(name, safe='')}", f"Node {name} repartitioned: {raw}.")


# --- tenants -------------------------------------------------------------------------------


def _tenant_row(t: dict[str, Any]) -> list[Cell]:
    borrowing = sum(
        int(str(v.get("nvidia.com/gpu", 0)) or 0)
        for v in (t.get("borrowing") or {}).values()
        if isinstance(v, dict) and str(v.get("nvidia.com/gpu", "0")).isdigit()
    )
    flavors = (
        ", ".join(
            f"{flavor}: {res.get('nvidia.com/gpu', 0)} GPU"
            for flavor, res in sorted(t["grants"].items())
            if isinstance(res, dict)
        )
        or "—"
    )
    return [
        Cell(t["name"], title=t.get("displayName") or None),
        Cell(flavors or "—"),
        Cell(f"{t['grantedGpus']}"),
        Cell(
            f"{t['heldGpus']:g}", cls="beyond-grant" if t["heldGpus"] > t["grantedGpus"] else None
        ),
        Cell(str(borrowing) if borrowing else "—"),
        Cell(str(t["running"])),
        Cell(str(t["pending"])),
        Cell(f"{t['clusters']} ({t['clusterNodes']} nodes)" if t["clusters"] else "—"),
    ]


@router.get("/fleet/tenants")
async def tenants(c: Console = Depends(console)) -> Response:
    table = await api_table(
        c,
        "/v1/fleet/tenants",
        [
            "Tenant",
            "Grants",
            "Granted GPUs",
            "Held GPUs",
            "May borrow",
            "Running",
            "Pending",
            "Clusters",
        ],
        _tenant_row,
        empty="No tenants.",
        caption="GPUs held now against each tenant's grant (held beyond the grant: borrowed "
        "or in its own clusters)",
    )
    bars = [(t["name"], t["grantedGpus"], t["heldGpus"]) for t in table.items]
    scale = max([max(g, h) for _, g, h in bars] or [1])
    return page(
        c, "provider/tenants.html", title="Tenants & grants", table=table, bars=bars, scale=scale
    )


# --- the idle pool -------------------------------------------------------------------------


@router.get("/fleet/idle")
async def idle(c: Console = Depends(console)) -> Response:
    answer = await c.api.get("/v1/fleet/idle")
    if not answer.ok:
        return failed(c, answer)
    body = answer.body
    free = body["idleGpus"]
    return page(
        c,
        "provider/idle.html",
        title="Idle pool",
        pool=body["pool"],
        revenue=body["revenue"],
        free=free,
        free_total=round(sum(free.values()), 2),
    )
