"""Tenant-user pages (a tenant-admin sees them too): the jobs, each with its state, why it waits
(the structured reason's sentence, :mod:`gpuaas.engine.reasons` rendered by the API), its
events, live logs, cost so far and a cancel button; and submitting a job from a hardware
profile (the form shows the profile's min/default/max) or as pasted YAML."""

from __future__ import annotations

import shlex
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml
from fastapi import APIRouter, Depends
from fastapi.responses import Response

from gpuaas.service.console.api import Answer
from gpuaas.service.console.forms import Field, Form
from gpuaas.service.console.frame import Console, add_page, done, failed, page, tenant_console
from gpuaas.service.console.tables import Cell, Filter, api_table

router = APIRouter(include_in_schema=False)

MEMBERS = {"tenant-admin", "tenant-user", "viewer"}
SUBMITTERS = {"tenant-admin", "tenant-user"}
STATES = ("Pending", "Admitted", "Running", "Succeeded", "Failed", "Cancelled", "Preempted")
UNFINISHED = {"Pending", "Admitted", "Running", "Preempted"}
#: the lines of output a job's page shows (the last of each pod's files)
LOG_TAIL = 200
#: usage records read for a job's cost (pages of 1,000)
COST_PAGES = 20

add_page("Jobs", "/t/{tenant}/jobs", MEMBERS, order=10)
add_page("Submit a job", "/t/{tenant}/submit", SUBMITTERS, order=11)


# --- the jobs ----------------------------------------------------------------------------


def _job_row(c: Console, job: dict[str, Any]) -> list[Cell]:
    href = c.t(f"/jobs/{job['id']}")
    return [
        Cell(str(job["id"]), href=href),
        Cell(job["name"], href=href),
        Cell(job["user"]),
        Cell(job["queue"]),
        Cell(job["state"], cls=f"state-{job['state']}"),
        Cell(job["reason"]["message"], cls="reason", title=job["reason"]["code"]),
        Cell(f"{job['gpus']:g}"),
    ]


@router.get("/t/{tenant}/jobs")
async def jobs(c: Console = Depends(tenant_console)) -> Response:
    table = await api_table(
        c,
        c.v1("/jobs"),
        ["ID", "Name", "User", "Queue", "State", "Why (now)", "GPUs"],
        lambda j: _job_row(c, j),
        filters=[
            Filter("state", "State", STATES),
            Filter("queue", "Queue"),
            Filter("user", "User"),
        ],
        empty="No jobs match.",
    )
    return page(c, "user/jobs.html", title="Jobs", live="user/_jobs.html", table=table)


async def _cost(c: Console, job_id: int) -> dict[str, Any]:
    """What the job's usage records say so far: unit-hours per SKU (a GPU's, and the CPU and
    memory's where the provider meters them) and the cost per currency."""
    seconds: dict[str, Decimal] = {}
    costs: dict[str, Decimal] = {}
    after = None
    records = 0
    for _ in range(COST_PAGES):
        answer = await c.api.get(c.v1("/usage"), job=job_id, limit=1000, after=after)
        if not answer.ok:
            return {"error": answer.detail}
        for r in answer.items():
            records += 1
            try:
                sku = str(r.get("sku") or "")
                seconds[sku] = seconds.get(sku, Decimal(0)) + Decimal(str(r["quantity"]))
                cur = r.get("currency") or ""
                costs[cur] = costs.get(cur, Decimal(0)) + Decimal(str(r["effectiveCost"]))
            except (InvalidOperation, KeyError):
                continue
        after = answer.next
        if after is None:
            break
    return {
        "records": records,
        "hours": [(sku, f"{v / 3600:.4f}") for sku, v in sorted(seconds.items())],
        "costs": [(cur or "(no price)", f"{v:,.2f}") for cur, v in sorted(costs.items())],
        "partial": after is not None,
    }


@router.get("/t/{tenant}/jobs/{job_id}")
async def job(job_id: int, c: Console = Depends(tenant_console)) -> Response:
    answer = await c.api.get(c.v1(f"/jobs/{job_id}"))
    if not answer.ok:
        return failed(c, answer, title=f"Job {job_id}")
    events = await c.api.get(c.v1(f"/jobs/{job_id}/events"), limit=200)
    logs = await c.api.call("GET", c.v1(f"/jobs/{job_id}/logs"), params={"tail": LOG_TAIL})
    return page(
        c,
        "user/job.html",
        title=f"Job {job_id}: {answer.body['name']}",
        live="user/_job.html",
        job=answer.body,
        events=events.items(),
        logs=logs.body if logs.ok else "",
        log_state=logs.headers.get("x-gpuaas-log-state", "") if logs.ok else logs.detail,
        cost=await _cost(c, job_id),
        can_cancel=c.can(*SUBMITTERS) and answer.body["state"] in UNFINISHED,
    )


@router.post("/t/{tenant}/jobs/{job_id}/cancel")
async def cancel(job_id: int, c: Console = Depends(tenant_console)) -> Response:
    answer = await c.api.post(c.v1(f"/jobs/{job_id}/cancel"))
    if not answer.ok:
        return failed(c, answer, title=f"Job {job_id} cannot be cancelled")
    return done(c, c.t(f"/jobs/{job_id}"), f"Job {job_id}: cancellation requested.")


# --- submitting --------------------------------------------------------------------------


def _profile_form(c: Console, profiles: list[dict[str, Any]]) -> Form:
    names = [(p["name"], f"{p['name']} — {p['spec'].get('displayName', '')}") for p in profiles]
    return Form(
        c.t("/submit"),
        [
            Field("profile", "Hardware profile", "select", ("podSets.0.hardwareProfile",),
                  value=names[0][0] if names else "", options=tuple(names), required=True),
            Field("name", "Job name", api=("name",), required=True,
                  help="lower-case letters, digits and '-' (a DNS label)"),
            Field("count", "Pods", "number", ("podSets.0.count",), value="1", min="1"),
            Field("gpus", "GPUs per pod", "number", ("podSets.0.resources",),
                  help="empty: the profile's default"),
            Field("command", "Command", api=("command",), required=True,
                  help="split as a shell would, e.g. python train.py --epochs 3"),
            Field("duration", "Simulated run time (s)", "number", ("duration",),
                  help="simulated fleets only; empty for a real backend"),
            Field("priority", "Priority class", api=("priorityClass",)),
        ],
        submit="Submit job",
        id="submit-profile",
    )  # fmt: skip


def _yaml_form(c: Console, profile: str = "") -> Form:
    pod_set = f"hardwareProfile: {profile}" if profile else "resources: {nvidia.com/gpu: 1}"
    return Form(
        c.t("/submit/yaml"),
        [
            Field("yaml", "Job spec (YAML; several documents are submitted all or none)",
                  "textarea", ("body", "jobs"), required=True, rows=14,
                  value="name: my-job\ncommand: [python, train.py]\n"
                  f"podSets:\n  - count: 1\n    {pod_set}\n"),
        ],
        submit="Submit YAML",
        id="submit-yaml",
    )  # fmt: skip


def _gpu_range(profile: dict[str, Any]) -> dict[str, str] | None:
    """The profile's GPUs per pod as the form shows them (None: it gives no GPUs)."""
    for r in profile["spec"].get("resources", []):
        if r["name"] == "nvidia.com/gpu":
            lo, default, hi = r.get("min"), r.get("default"), r.get("max")
            help_text = f"{profile['name']}: min {lo}, default {default}, max {hi}"
            return {"min": str(lo), "max": str(hi), "help": help_text}
    return None


def _number(value: str) -> Any:
    """An integer where the text is one; otherwise the text, for the API to judge."""
    text = value.strip()
    return int(text) if text.isdigit() else text


def _profile_spec(values: dict[str, str]) -> dict[str, Any]:
    pod_set: dict[str, Any] = {"name": "main", "count": _number(values.get("count") or "1")}
    if values.get("profile"):
        pod_set["hardwareProfile"] = values["profile"]
    if values.get("gpus", "").strip():
        pod_set["resources"] = {"nvidia.com/gpu": _number(values["gpus"])}
    spec: dict[str, Any] = {"name": values.get("name", "").strip(), "podSets": [pod_set]}
    command = values.get("command", "").strip()
    if command:
        try:
            spec["command"] = shlex.split(command)
        except ValueError:
            spec["command"] = [command]
    if values.get("duration", "").strip():
        duration = values["duration"].strip()
        try:
            spec["duration"] = float(duration)
        except ValueError:
            spec["duration"] = duration
    if values.get("priority", "").strip():
        spec["priorityClass"] = values["priority"].strip()
    return spec


async def _submit_page(
    c: Console, profile_form: Form | None = None, yaml_form: Form | None = None, status: int = 200
) -> Response:
    answer = await c.api.get(c.v1("/hardware-profiles"), limit=200)
    profiles = answer.items()
    if profile_form is None:
        profile_form = _profile_form(c, profiles)
    else:  # keep what was typed; the options come from the API again
        profile_form["profile"].options = _profile_form(c, profiles)["profile"].options
    chosen = next((p for p in profiles if p["name"] == profile_form["profile"].value), None)
    gpu = _gpu_range(chosen) if chosen is not None else None
    if gpu is not None:
        f = profile_form["gpus"]
        f.min, f.max, f.help = gpu["min"], gpu["max"], gpu["help"]
    return page(
        c,
        "user/submit.html",
        title="Submit a job",
        status=status,
        profiles=profiles,
        chosen=chosen,
        profile_form=profile_form,
        yaml_form=yaml_form or _yaml_form(c, profiles[0]["name"] if profiles else ""),
        ranges={p["name"]: _gpu_range(p) for p in profiles},
    )


@router.get("/t/{tenant}/submit")
async def submit_page(c: Console = Depends(tenant_console)) -> Response:
    profile = c.request.query_params.get("profile")
    if profile:
        answer = await c.api.get(c.v1("/hardware-profiles"), limit=200)
        form = _profile_form(c, answer.items())
        form["profile"].value = profile
        return await _submit_page(c, form)
    return await _submit_page(c)


@router.post("/t/{tenant}/submit")
async def submit(c: Console = Depends(tenant_console)) -> Response:
    spec = _profile_spec(c.form)
    answer = await c.api.post(c.v1("/jobs"), spec)
    if answer.ok:
        return _submitted(c, [answer.body])
    form = _profile_form(c, []).fill(c.form).show(answer)
    return await _submit_page(c, profile_form=form, status=answer.status)


@router.post("/t/{tenant}/submit/yaml")
async def submit_yaml(c: Console = Depends(tenant_console)) -> Response:
    form = _yaml_form(c).fill(c.form)
    try:
        docs = [d for d in yaml.safe_load_all(c.form.get("yaml", "")) if d is not None]
    except yaml.YAMLError as exc:
        form["yaml"].error = f"not YAML: {exc}"
        return await _submit_page(c, yaml_form=form, status=422)
    if not docs:
        form["yaml"].error = "no document: paste a job spec"
        return await _submit_page(c, yaml_form=form, status=422)
    if len(docs) == 1:
        answer = await c.api.post(c.v1("/jobs"), docs[0])
        made = [answer.body] if answer.ok else []
    else:
        answer = await c.api.post(c.v1("/jobs/batch"), {"jobs": docs})
        made = [i["job"] for i in answer.body.get("items", []) if i.get("job")] if answer.ok else []
    if answer.ok:
        return _submitted(c, made)
    _every_error_on(form["yaml"], answer)
    return await _submit_page(c, yaml_form=form, status=answer.status)


def _every_error_on(f: Field, answer: Answer) -> None:
    """A pasted document has one field: every error the API names is about a line of it."""
    messages = [f"{path}: {msg}" if path else msg for path, msg in answer.field_errors]
    f.error = "; ".join(messages) or answer.detail


def _submitted(c: Console, made: list[dict[str, Any]]) -> Response:
    if len(made) == 1:
        j = made[0]
        return done(c, c.t(f"/jobs/{j['id']}"), f"Job {j['id']} ({j['name']}) submitted.")
    ids = ", ".join(str(j["id"]) for j in made)
    return done(c, c.t("/jobs"), f"{len(made)} jobs submitted: {ids}.")
