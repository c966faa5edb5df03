"""Tenant-user pages: the jobs (state, why each pending job waits, events, live logs, cost so
far, cancel) and submitting one from a hardware profile or as YAML."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from gpuaas.service.console.frame import Console, add_page, page, tenant_console
from gpuaas.service.console.tables import Cell, Filter, api_table

router = APIRouter(include_in_schema=False)

MEMBERS = {"tenant-admin", "tenant-user", "viewer"}
SUBMITTERS = {"tenant-admin", "tenant-user"}
STATES = ("Pending", "Admitted", "Running", "Succeeded", "Failed", "Cancelled", "Preempted")

add_page("Jobs", "/t/{tenant}/jobs", MEMBERS, order=10)


def _job_row(c: Console, job: dict[str, Any]) -> list[Cell]:
    return [
        Cell(str(job["id"]), href=c.t(f"/jobs/{job['id']}")),
        Cell(job["name"], href=c.t(f"/jobs/{job['id']}")),
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
        ["ID", "Name", "User", "Queue", "State", "Why", "GPUs"],
        lambda j: _job_row(c, j),
        filters=[
            Filter("state", "State", STATES),
            Filter("queue", "Queue"),
            Filter("user", "User"),
        ],
        empty="No jobs match.",
    )
    return page(c, "user/jobs.html", title="Jobs", live="user/_jobs.html", table=table)
