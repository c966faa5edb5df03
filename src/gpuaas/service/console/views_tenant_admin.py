"""Tenant-admin pages under ``/t/{tenant}/``: clusters (create, scale, delete; state and
events), queues and quotas (nominal quota, borrowing and lending drawn as bars against what
the tenant's jobs hold), users and per-user limits, usage and cost against budgets with the
forecast, and alerts (the budgets' fired thresholds and holds).

Everything is read and written through the tenant's API routes, so a tenant-admin sees and
changes exactly what the API lets them; a tenant-user who types one of these URLs gets the
API's own 403 or a page without the actions.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from gpuaas.service.console.api import Answer
from gpuaas.service.console.forms import Field, Form, options
from gpuaas.service.console.frame import (
    Console,
    add_page,
    done,
    failed,
    form_page,
    page,
    tenant_admin_console,
)

router = APIRouter(include_in_schema=False)

ADMINS = {"tenant-admin"}
ROLES = ("tenant-admin", "tenant-user", "viewer")
GPU = "nvidia.com/gpu"
#: the GPU resources a quota bar draws, and how many units make a GPU
GPUS = {GPU: 1, "gpuaas.io/gpu-milli": 1000}

add_page("Clusters", "/t/{tenant}/clusters", ADMINS, order=20)
add_page("Queues and quotas", "/t/{tenant}/queues", ADMINS, order=21)
add_page("Users and limits", "/t/{tenant}/users", ADMINS, order=22)
add_page("Usage and budgets", "/t/{tenant}/usage", ADMINS, order=23)
add_page("Alerts", "/t/{tenant}/alerts", ADMINS, order=24)


def _num(value: Any) -> float:
    """A quantity as a number where it is a plain one (GPU counts are); 0 otherwise."""
    try:
        return float(Decimal(str(value)))
    except (InvalidOperation, ValueError):
        return 0.0


def _int_or_text(value: str) -> Any:
    text = value.strip()
    return int(text) if text.isdigit() else text


# --- clusters ----------------------------------------------------------------------------


def _cluster_form(c: Console, allowance: dict[str, Any]) -> Form:
    flavors = allowance.get("flavors", [])
    models = allowance.get("gpuModels", [])
    return Form(
        c.t("/clusters"),
        [
            Field("name", "Cluster name", api=("name",), required=True),
            Field("kind", "Kind", "select", ("kind",), value="kubernetes",
                  options=options(["kubernetes", "slurm", "baremetal"]), required=True),
            Field("pool", "Node pool name", api=("pools.0.name",), value="gpu", required=True),
            Field("flavor", "Flavor", "select", ("pools.0.flavor", "pools.0"),
                  options=options(flavors, blank="(by GPU model)"),
                  value=flavors[0] if flavors else ""),
            Field("gpu_model", "or GPU model", "select", ("pools.0.gpuModel",),
                  options=options(models, blank="(by flavor)")),
            Field("count", "Nodes", "number", ("pools.0.count", "pools"), value="1", min="0",
                  required=True),
            Field("max", "Most nodes the pool may scale to", "number", ("pools.0.max",),
                  min="0", help="empty: the pool stays at its size"),
        ],
        submit="Create cluster",
        id="create-cluster",
    )  # fmt: skip


async def _clusters_page(c: Console, refused: Answer | None = None) -> Response:
    listing = await c.api.get(c.v1("/clusters"))
    if not listing.ok:
        return failed(c, listing, title="Clusters")
    allowance = await c.api.get(c.v1("/cluster-allowance"))
    allow = allowance.body if allowance.ok else {}
    return form_page(
        c,
        "admin/clusters.html",
        title="Clusters",
        form=_cluster_form(c, allow),
        refused=refused,
        clusters=listing.body,
        allowance=allow,
    )


@router.get("/t/{tenant}/clusters")
async def clusters(c: Console = Depends(tenant_admin_console)) -> Response:
    return await _clusters_page(c)


@router.post("/t/{tenant}/clusters")
async def create_cluster(c: Console = Depends(tenant_admin_console)) -> Response:
    f = c.form
    pool: dict[str, Any] = {
        "name": f.get("pool", "").strip(),
        "count": _int_or_text(f.get("count", "")),
    }
    if f.get("flavor"):
        pool["flavor"] = f["flavor"]
    if f.get("gpu_model"):
        pool["gpuModel"] = f["gpu_model"]
    if f.get("max", "").strip():
        pool["max"] = _int_or_text(f["max"])
    body = {"name": f.get("name", "").strip(), "kind": f.get("kind", ""), "pools": [pool]}
    answer = await c.api.post(c.v1("/clusters"), body)
    if answer.ok:
        name = answer.body["name"]
        return done(
            c, c.t(f"/clusters/{name}"), f"Cluster {name} created ({answer.body['state']})."
        )
    return await _clusters_page(c, refused=answer)


def _scale_form(c: Console, name: str, pool: dict[str, Any]) -> Form:
    return Form(
        c.t(f"/clusters/{name}/scale"),
        [
            Field("pool", "", "hidden", value=pool["name"]),
            Field(f"count-{pool['name']}", f"Nodes in pool {pool['name']}", "number",
                  ("pools.0.count", "pools"), value=str(pool["count"]), min="0"),
        ],
        submit=f"Scale {pool['name']}",
        id=f"scale-{pool['name']}",
    )  # fmt: skip


async def _cluster_page(
    c: Console, name: str, scale: Form | None = None, status: int = 200
) -> Response:
    answer = await c.api.get(c.v1(f"/clusters/{name}"))
    if not answer.ok:
        return failed(c, answer, title=f"Cluster {name}")
    events = await c.api.get(c.v1(f"/clusters/{name}/events"))
    forms = [_scale_form(c, name, p) for p in answer.body["pools"]]
    if scale is not None:
        forms = [scale if f.id == scale.id else f for f in forms]
    return page(
        c,
        "admin/cluster.html",
        title=f"Cluster {name}",
        status=status,
        live="admin/_cluster.html",
        cluster=answer.body,
        events=list(reversed(events.body)) if events.ok and isinstance(events.body, list) else [],
        scale_forms=forms,
    )


@router.get("/t/{tenant}/clusters/{name}")
async def cluster(name: str, c: Console = Depends(tenant_admin_console)) -> Response:
    return await _cluster_page(c, name)


@router.post("/t/{tenant}/clusters/{name}/scale")
async def scale_cluster(name: str, c: Console = Depends(tenant_admin_console)) -> Response:
    pool = c.form.get("pool", "")
    count = c.form.get(f"count-{pool}", "")
    answer = await c.api.post(
        c.v1(f"/clusters/{name}/scale"), {"pools": [{"name": pool, "count": _int_or_text(count)}]}
    )
    if answer.ok:
        return done(c, c.t(f"/clusters/{name}"), f"Cluster {name}: pool {pool} scaled to {count}.")
    form = _scale_form(c, name, {"name": pool, "count": count}).show(answer)
    return await _cluster_page(c, name, form, answer.status)


@router.post("/t/{tenant}/clusters/{name}/delete")
async def delete_cluster(name: str, c: Console = Depends(tenant_admin_console)) -> Response:
    answer = await c.api.delete(c.v1(f"/clusters/{name}"))
    if not answer.ok:
        return failed(c, answer, title=f"Cluster {name} cannot be deleted")
    return done(c, c.t("/clusters"), f"Cluster {name}: deletion started.")


# --- queues and quotas -------------------------------------------------------------------


def _held(cq: dict[str, Any]) -> dict[tuple[str, str], float]:
    """What the queue's jobs hold, per (flavor, resource), from its status (the API sums it:
    ``status.flavorsUsage``, Kueue's form), in GPUs for the GPU resources."""
    held: dict[tuple[str, str], float] = {}
    for flavor in (cq.get("status") or {}).get("flavorsUsage", []):
        for r in flavor.get("resources", []):
            if r["name"] in GPUS:
                held[(flavor["name"], r["name"])] = _num(r.get("total")) / GPUS[r["name"]]
    return held


def _gpu_bar(used: float, nominal: float, borrow: float | None, lend: float | None) -> dict:
    """A quota drawn as a bar: held within the nominal quota, held beyond it (borrowed from
    the cohort), the unused quota split into what the cohort may borrow from it (the lending
    limit; all of it when there is none) and what it keeps, and the room still to borrow."""
    within = min(used, nominal)
    borrowed = max(0.0, used - nominal)
    unused = max(0.0, nominal - used)
    lendable = min(unused, lend) if lend is not None else 0.0
    room = max(0.0, (borrow or 0.0) - borrowed)
    parts = [
        ("held", round(within, 2), "used"),
        ("borrowed", round(borrowed, 2), "borrowed"),
        ("unused, may be lent", round(lendable, 2), "lent"),
        ("unused, kept", round(unused - lendable, 2), "nominal"),
        ("may still borrow", round(room, 2), "room"),
    ]
    if lend is None:  # no lending limit: all unused quota may be lent
        parts[2] = ("unused, may be lent", round(unused, 2), "lent")
        parts[3] = ("unused, kept", 0.0, "nominal")
    scale = nominal + (borrow or 0.0)
    return {"parts": parts, "scale": scale}


def _queue_rows(cqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for cq in cqs:
        held = _held(cq)
        for group in cq["spec"].get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                for r in flavor.get("resources", []):
                    if r["name"] not in GPUS:
                        continue
                    per = GPUS[r["name"]]
                    nominal = _num(r.get("nominalQuota")) / per
                    borrow = _num(r["borrowingLimit"]) / per if "borrowingLimit" in r else None
                    lend = _num(r["lendingLimit"]) / per if "lendingLimit" in r else None
                    used = held.get((flavor["name"], r["name"]), 0.0)
                    rows.append({
                        "queue": cq["name"], "flavor": flavor["name"], "nominal": nominal,
                        "borrow": borrow, "lend": lend, "used": used,
                        "bar": _gpu_bar(used, nominal, borrow, lend),
                    })  # fmt: skip
    return rows


@router.get("/t/{tenant}/queues")
async def queues(c: Console = Depends(tenant_admin_console)) -> Response:
    tenant = await c.api.get(c.v1())
    if not tenant.ok:
        return failed(c, tenant, title="Queues and quotas")
    cqs = await c.api.get(c.v1("/cluster-queues"), limit=200)
    lqs = await c.api.get(c.v1("/local-queues"), limit=200)
    rows = _queue_rows(cqs.items())
    by_flavor: dict[str, float] = {}
    for row in rows:
        by_flavor[row["flavor"]] = by_flavor.get(row["flavor"], 0.0) + row["used"]
    terms = []
    t = tenant.body
    for flavor, resources in sorted((t.get("capacity") or {}).items()):
        nominal = _num(resources.get(GPU))
        borrow = (
            _num(t["borrowing"][flavor].get(GPU)) if flavor in (t.get("borrowing") or {}) else None
        )
        lending = t.get("lending") or {}
        lend = _num(lending[flavor].get(GPU)) if flavor in lending else None
        used = by_flavor.get(flavor, 0.0)
        terms.append({"flavor": flavor, "nominal": nominal, "borrow": borrow, "lend": lend,
                      "used": used, "bar": _gpu_bar(used, nominal, borrow, lend)})  # fmt: skip
    return page(
        c,
        "admin/queues.html",
        title="Queues and quotas",
        live="admin/_queues.html",
        tenant=t,
        terms=terms,
        rows=rows,
        local_queues=lqs.items(),
    )


# --- users and per-user limits -----------------------------------------------------------


def _member_form(c: Console) -> Form:
    return Form(
        c.t("/users"),
        [
            Field("user", "User name", api=("user",), required=True,
                  help="an existing user; they become a member (or are invited) with this role"),
            Field("role", "Role", "select", ("role",), value="tenant-user",
                  options=options(ROLES), required=True),
        ],
        submit="Add or change member",
        id="member",
    )  # fmt: skip


def _limit_form(c: Console, queues: list[dict[str, Any]]) -> Form:
    return Form(
        c.t("/users/limit"),
        [
            Field("queue", "Local queue", "select", ("name",),
                  options=options(q["name"] for q in queues), required=True),
            Field("user_limit", "Jobs one user may hold at once", "number", ("userLimit",),
                  min="1", help="empty: no limit per user"),
        ],
        submit="Set the per-user limit",
        id="user-limit",
    )  # fmt: skip


async def _users_page(
    c: Console, member: Form | None = None, limit: Form | None = None, status: int = 200
) -> Response:
    members = await c.api.get(c.v1("/members"), limit=500)
    if not members.ok:
        return failed(c, members, title="Users and limits")
    lqs = await c.api.get(c.v1("/local-queues"), limit=200)
    budgets = await c.api.get(c.v1("/budgets"), limit=200)
    caps = [b for b in budgets.items() if b.get("scopeKind") == "user"]
    fresh = _limit_form(c, lqs.items())
    if limit is not None:
        limit["queue"].options = fresh["queue"].options
    return page(
        c,
        "admin/users.html",
        title="Users and limits",
        status=status,
        members=members.items(),
        local_queues=lqs.items(),
        caps=caps,
        member_form=member or _member_form(c),
        limit_form=limit or fresh,
    )


@router.get("/t/{tenant}/users")
async def users(c: Console = Depends(tenant_admin_console)) -> Response:
    return await _users_page(c)


@router.post("/t/{tenant}/users")
async def put_member(c: Console = Depends(tenant_admin_console)) -> Response:
    user = c.form.get("user", "").strip()
    form = _member_form(c).fill(c.form)
    if not user:
        form["user"].error = "Name a user."
        return await _users_page(c, member=form, status=422)
    answer = await c.api.put(c.v1(f"/members/{user}"), {"role": c.form.get("role", "")})
    if answer.ok:
        status = answer.body.get("status", "active") if isinstance(answer.body, dict) else ""
        return done(c, c.t("/users"), f"{user}: {c.form.get('role')} ({status}).")
    return await _users_page(c, member=form.show(answer), status=answer.status)


@router.post("/t/{tenant}/users/{user}/remove")
async def remove_member(user: str, c: Console = Depends(tenant_admin_console)) -> Response:
    answer = await c.api.delete(c.v1(f"/members/{user}"))
    if not answer.ok:
        return failed(c, answer, title=f"{user} cannot be removed")
    return done(c, c.t("/users"), f"{user} is no longer a member.")


@router.post("/t/{tenant}/users/limit")
async def set_user_limit(c: Console = Depends(tenant_admin_console)) -> Response:
    name = c.form.get("queue", "")
    form = _limit_form(c, []).fill(c.form)
    current = await c.api.get(c.v1(f"/local-queues/{name}"))
    if not current.ok:
        return await _users_page(c, limit=form.show(current), status=current.status)
    raw = c.form.get("user_limit", "").strip()
    body = {
        "clusterQueue": current.body["clusterQueue"],
        "userLimit": _int_or_text(raw) if raw else None,
    }
    answer = await c.api.put(c.v1(f"/local-queues/{name}"), body)
    if answer.ok:
        said = f"at most {raw} jobs per user" if raw else "no limit per user"
        return done(c, c.t("/users"), f"Local queue {name}: {said}.")
    return await _users_page(c, limit=form.show(answer), status=answer.status)


# --- usage, budgets and alerts -----------------------------------------------------------


def _budget_form(c: Console) -> Form:
    return Form(
        c.t("/usage/budgets"),
        [
            Field("name", "Budget name", api=("name",), required=True),
            Field("scope_kind", "Applies to", "select", ("scopeKind",), value="tenant",
                  options=options(["tenant", "queue", "cluster", "user"])),
            Field("scope", "Scope name", api=("scope",),
                  help="the queue, cluster or user; empty for the whole tenant"),
            Field("period", "Period", "select", ("period",), value="monthly",
                  options=options(["monthly", "weekly"])),
            Field("amount", "Amount", api=("amount",), required=True),
            Field("currency", "Currency", api=("currency",), value="USD"),
            Field("thresholds", "Alert at (% of the amount)", api=("thresholds",),
                  value="50,80,100"),
            Field("hard", "Hold new jobs once spent", "checkbox", ("hard",)),
        ],
        submit="Create budget",
        id="budget",
    )  # fmt: skip


def _budget_view(b: dict[str, Any]) -> dict[str, Any]:
    status = b.get("status") or {}
    amount = _num(b.get("amount"))
    spent = _num(status.get("spent"))
    forecast = _num(status.get("forecast"))
    parts = [
        ("spent", round(spent, 2), "spent"),
        ("forecast to the period's end", round(max(0.0, forecast - spent), 2), "forecast"),
    ]
    return {
        **b,
        "bar": {"parts": parts, "scale": max(amount, forecast, 1e-9)},
        "over": forecast > amount > 0,
    }


async def _usage_page(c: Console, refused: Answer | None = None) -> Response:
    budgets = await c.api.get(c.v1("/budgets"), limit=200)
    if not budgets.ok:
        return failed(c, budgets, title="Usage and budgets")
    summary = await c.api.get(c.v1("/usage/summary"), by="sku,currency")
    showback = await c.api.get(c.v1("/showback"))
    return form_page(
        c,
        "admin/usage.html",
        title="Usage and budgets",
        form=_budget_form(c),
        refused=refused,
        budgets=[_budget_view(b) for b in budgets.items()],
        totals=summary.body.get("totals", []) if summary.ok else [],
        showback=showback.body if showback.ok and isinstance(showback.body, list) else [],
    )


@router.get("/t/{tenant}/usage")
async def usage(c: Console = Depends(tenant_admin_console)) -> Response:
    return await _usage_page(c)


@router.post("/t/{tenant}/usage/budgets")
async def create_budget(c: Console = Depends(tenant_admin_console)) -> Response:
    f = c.form
    body: dict[str, Any] = {
        "name": f.get("name", "").strip(),
        "scopeKind": f.get("scope_kind", "tenant"),
        "period": f.get("period", "monthly"),
        "amount": f.get("amount", "").strip(),
        "currency": f.get("currency", "USD").strip(),
        "thresholds": f.get("thresholds", ""),
        "hard": f.get("hard") == "on",
    }
    if f.get("scope", "").strip():
        body["scope"] = f["scope"].strip()
    answer = await c.api.post(c.v1("/budgets"), body)
    if answer.ok:
        return done(c, c.t("/usage"), f"Budget {answer.body['name']} created.")
    return await _usage_page(c, refused=answer)


@router.get("/t/{tenant}/alerts")
async def alerts(c: Console = Depends(tenant_admin_console)) -> Response:
    budgets = await c.api.get(c.v1("/budgets"), limit=200)
    if not budgets.ok:
        return failed(c, budgets, title="Alerts")
    events = []
    for b in budgets.items():
        for e in b.get("events", []):
            events.append({**e, "budget": b["name"]})
    events.sort(key=lambda e: e["at"], reverse=True)
    holding = [b for b in budgets.items() if (b.get("status") or {}).get("holding")]
    return page(c, "admin/alerts.html", title="Alerts", live="admin/_alerts.html",
                events=events, holding=holding)  # fmt: skip
