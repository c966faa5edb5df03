"""Jobs of a tenant: submit, list, inspect, follow events and logs, cancel; and the platform's
list.

A tenant-user sees and cancels only its own jobs (another user's job is "not found"); the
tenant's admins and viewers, and platform roles, see them all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from sqlalchemy import Select, false, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from gpuaas.backends.kubernetes.targets import Target
from gpuaas.backends.logs import LogLayout
from gpuaas.model.job_state import FINAL, UNFINISHED, JobState
from gpuaas.service import logs
from gpuaas.service.audit import WRITTEN, create_draft
from gpuaas.service.auth import (
    Need,
    Principal,
    Role,
    TenantCache,
    TenantRef,
    hash_token,
    require_platform,
    tenant_for,
)
from gpuaas.service.deps import (
    PrincipalDep,
    SessionDep,
    authenticate_request,
    bearer_token_on_loop,
    cached_principal,
)
from gpuaas.service.errors import ApiError, invalid, missing, not_found, problem
from gpuaas.service.group_commit import SubmissionWriter
from gpuaas.service.job_manifest import job_manifests
from gpuaas.service.jobs import (
    BatchInvalid,
    cancel_job,
    event_view,
    job_view,
    prepare_job,
    serialized_writes,
    submit_job,
    submit_jobs,
    workload_view,
)
from gpuaas.service.logs import MAX_LINES, LogFollow, LogQuery, LogRead, LogStream, pod_count
from gpuaas.service.models.common import ID_CURSOR_PATTERN, PAGE_BOUNDS, Page, paginate
from gpuaas.service.models.jobs import (
    MAX_PODS,
    JobBatch,
    JobBatchItem,
    JobBatchView,
    JobEventView,
    JobKind,
    JobSpec,
    JobView,
    WorkloadView,
)
from gpuaas.service.replica_sets import replica_views
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, JobEvent, Tenant, User

router = APIRouter(tags=["jobs"])
log = logging.getLogger("gpuaas.service")

Limit = Annotated[
    int,
    Query(description="Page size (1..1000).", json_schema_extra=PAGE_BOUNDS),
]
After = Annotated[
    str | None,
    Query(
        description="Cursor: the `next` of the previous page (an id).",
        json_schema_extra={"pattern": ID_CURSOR_PATTERN},
    ),
]
#: The bearer token, taken as a dependency: FastAPI resolves dependencies before it validates
#: the body, so a request without a token is a 401 whatever its body (authentication itself
#: stays in the submission's own session).
Token = Annotated[str, Depends(bearer_token_on_loop)]
#: ``?state=``: one of the states (the schema lists them; ``_filtered`` checks)
KindQ = Annotated[str | None, Query(json_schema_extra={"enum": [k.value for k in JobKind]})]
StateQ = Annotated[str | None, Query(json_schema_extra={"enum": [s.value for s in JobState]})]
MAX_ID = 2**63 - 1  # ids are BIGINT


def _own_only(p: Principal, tenant: Tenant) -> bool:
    """Whether ``p`` may see only its own jobs in ``tenant`` (a tenant-user)."""
    return not p.sees_everything and p.role_in(tenant.id) is Role.TENANT_USER


def _job(session: Session, p: Principal, tenant: Tenant, job_id: int) -> Job:
    if not 0 < job_id <= MAX_ID:  # beyond the column's range: no such job, not an overflow
        raise not_found(f"job {job_id}")
    job = session.scalar(select(Job).where(Job.id == job_id, Job.tenant_id == tenant.id))
    if job is None or (_own_only(p, tenant) and job.user_id != p.user_id):
        raise not_found(f"job {job_id}")
    return job


def _user_names(session: Session, jobs: list[Job]) -> dict[int, str]:
    ids = {job.user_id for job in jobs}
    if not ids:
        return {}
    return dict(session.execute(select(User.id, User.name).where(User.id.in_(ids))).all())


def _cursor(after: str | None) -> str | None:
    """An id cursor beyond the id column's range is not one this API handed out."""
    if after is not None and after.strip().lstrip("+-").isdigit() and abs(int(after)) > MAX_ID:
        raise invalid("after", f"not a cursor this list returned: {after!r}")
    return after


def _matches_nothing(*values: str | None) -> bool:
    """A filter with a NUL character matches no stored name (and PostgreSQL refuses it)."""
    return any(v is not None and "\x00" in v for v in values)


def _state(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return JobState(value).value
    except ValueError:
        known = ", ".join(s.value for s in JobState)
        raise invalid("state", f"unknown state {value!r} (known: {known})") from None


def _filtered(
    stmt: Select[tuple[Job]],
    session: Session,
    state: str | None,
    queue: str | None,
    kind: str | None,
    user: str | None,
) -> Select[tuple[Job]]:
    if (state := _state(state)) is not None:
        stmt = stmt.where(Job.state == state)
    if queue is not None:
        stmt = stmt.where(Job.local_queue == queue)
    if kind is not None:
        if kind not in {k.value for k in JobKind}:
            raise invalid("kind", f"unknown kind {kind!r}")
        stmt = stmt.where(Job.kind == kind)
    if _matches_nothing(queue, user):
        return stmt.where(false())
    if user is not None:
        user_id = session.scalar(select(User.id).where(User.name == user))
        stmt = stmt.where(Job.user_id == (user_id if user_id is not None else -1))
    return stmt


@router.post(
    "/v1/tenants/{tenant}/jobs",
    status_code=201,
    response_model=JobView,
    responses={200: {"model": JobView, "description": "the job this idempotencyKey made"}},
)
async def submit(tenant: str, spec: JobSpec, request: Request, token: Token) -> Response:
    """Queue a job; the same idempotencyKey again returns the first job (200).

    The API's hot path: authentication answers from the principal cache (one query when the
    token is not cached), the checks read cached governance, and the job is stored by the
    group-commit writer (:mod:`gpuaas.service.group_commit`) in one transaction with the other
    submissions of the moment; the answer is sent once that transaction is committed. On
    SQLite the reading runs right on the event loop (sub-millisecond, no thread hand-off); on
    PostgreSQL too when the caller is cached, else (round trips) in the thread pool. The view
    is serialized once, here (a returned model would be validated again).
    """
    answer, created, _ = await submission(request, tenant, spec, token)
    return Response(answer, status_code=201 if created else 200, media_type="application/json")


async def submission(
    request: Request, tenant: str, spec: JobSpec, token: str
) -> tuple[bytes, bool, int]:
    """The submission itself, for the route above and for the submission lane
    (:mod:`gpuaas.service.submission_lane`), which answers the same path without FastAPI's
    request handling: (the job's view serialized, whether it was created, its id).

    With the group-commit writer, a created job's audit entry is stored in the job's own
    transaction (:func:`gpuaas.service.audit.create_draft`; the scope is marked so that the
    audit middleware or the lane records nothing more); the writer serializes the view, whose
    digest the entry holds, before that commit."""
    db: Database = request.app.state.db
    tenants: TenantCache = request.app.state.tenant_ids
    writer: SubmissionWriter | None = getattr(request.app.state, "submissions", None)
    if writer is None or not writer.running:  # an app without its lifespan (some tests)
        if db.is_sqlite:
            view, created = _submit(request, db, tenants, token, tenant, spec)
        else:
            view, created = await run_in_threadpool(
                _submit, request, db, tenants, token, tenant, spec
            )
        return view.model_dump_json().encode(), created, view.id
    if db.is_sqlite or _known_caller(request, token):
        p, row, values = _prepare(request, db, tenants, token, tenant, spec)
    else:
        p, row, values = await run_in_threadpool(
            _prepare, request, db, tenants, token, tenant, spec
        )
    render = partial(_answer_of, tenant=row.name, user=p.user)
    draft = create_draft(request.scope)
    stored = await writer.submit(values, row.name, render, draft)
    if stored.audited:
        request.scope[WRITTEN] = True
    return stored.answer or render(stored.job), stored.created, stored.job.id


def _answer_of(job: Any, tenant: str, user: str) -> bytes:
    """A submitted job's answer: its view, serialized."""
    return job_view(job, tenant, user).model_dump_json().encode()


def _known_caller(request: Request, token: str) -> bool:
    """Whether the caller's principal is cached (:mod:`gpuaas.service.principal_cache`): then
    preparing the job reads nothing from the database but the governance version (at most once
    a second), so on PostgreSQL too it runs on the event loop, without the thread hand-off."""
    return cached_principal(request, hash_token(token), time.time()) is not None


def _prepare(
    request: Request, db: Database, tenants: TenantCache, token: str, tenant: str, spec: JobSpec
) -> tuple[Principal, TenantRef, dict[str, Any]]:
    """Who submits, to which tenant, and the checked row, read in one session (no writes)."""
    with db.sessions() as session:
        p = authenticate_request(request, session, token)
        row = tenants.ref_for(session, p, tenant, Need.SUBMIT)
        return p, row, prepare_job(session, row, p.user_id, spec, time.time())


def _submit(
    request: Request, db: Database, tenants: TenantCache, token: str, tenant: str, spec: JobSpec
) -> tuple[JobView, bool]:
    with db.sessions() as session:  # not db.session(): it would commit a second, empty time
        p = authenticate_request(request, session, token)
        row = tenants.ref_for(session, p, tenant, Need.SUBMIT)
        tenant_name = row.name
        with serialized_writes(session):
            job, created = submit_job(session, row, p.user_id, spec, time.time())
            session.commit()  # acknowledged means stored: commit before answering
    return job_view(job, tenant_name, p.user), created


@router.post(
    "/v1/tenants/{tenant}/jobs/batch",
    response_model=JobBatchView,
    responses={422: {"description": "some document is invalid: every error, nothing created"}},
)
def submit_batch(
    tenant: str,
    batch: JobBatch,
    request: Request,
    token: Token,
    dry_run: bool = Query(False, alias="dryRun", description="check only, create nothing"),
) -> Response:
    """Several jobs, all or none: every document is checked (as ``POST .../jobs`` checks one)
    before any is created. With an error anywhere nothing is created and the 422 lists every
    error with its ``document`` (from 0) and ``name``; ``dryRun`` checks without creating.
    A document whose idempotencyKey already made a job returns that job (``created: false``).
    """
    db: Database = request.app.state.db
    tenants: TenantCache = request.app.state.tenant_ids
    with db.sessions() as session:
        p = authenticate_request(request, session, token)
        row = tenants.ref_for(session, p, tenant, Need.SUBMIT)
        try:
            with serialized_writes(session):
                results = submit_jobs(
                    session, row, p.user_id, batch.jobs, time.time(), dry_run=dry_run
                )
                if not dry_run:
                    session.commit()
        except BatchInvalid as exc:
            session.rollback()
            return problem(422, str(exc), exc.errors)
        items = [
            JobBatchItem(
                document=i,
                name=str(batch.jobs[i].get("name")),
                created=created and not dry_run,
                job=job_view(job, row.name, p.user) if job is not None else None,
            )
            for i, (job, created) in enumerate(results)
        ]
    view = JobBatchView(dryRun=dry_run, items=items)
    status = 201 if any(item.created for item in items) else 200
    return Response(view.model_dump_json(), status_code=status, media_type="application/json")


@router.get("/v1/tenants/{tenant}/jobs", response_model=Page[JobView])
def list_jobs(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    state: StateQ = None,
    queue: str | None = None,
    kind: KindQ = None,
    user: str | None = None,
    limit: Limit = 100,
    after: After = None,
) -> Page[JobView]:
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = _filtered(select(Job).where(Job.tenant_id == row.id), session, state, queue, kind, user)
    if _own_only(p, row):
        stmt = stmt.where(Job.user_id == p.user_id)
    jobs, nxt = paginate(session, stmt, Job.id, limit, _cursor(after))
    users = _user_names(session, jobs)
    replicas = replica_views(session, jobs)
    return Page(
        items=[job_view(j, row.name, users.get(j.user_id, ""), replicas.get(j.id)) for j in jobs],
        next=nxt,
    )


# ``{job_id:int}``: ``GET .../jobs/batch`` is then no job's id but a path that takes POST only (405)
@router.get("/v1/tenants/{tenant}/jobs/{job_id:int}", response_model=JobView)
def get_job(tenant: str, job_id: int, session: SessionDep, p: PrincipalDep) -> JobView:
    row = tenant_for(session, p, tenant, Need.READ)
    job = _job(session, p, row, job_id)
    user = _user_names(session, [job]).get(job.user_id, "")
    return job_view(job, row.name, user, replica_views(session, [job]).get(job.id))


@router.get("/v1/tenants/{tenant}/jobs/{job_id}/events", response_model=Page[JobEventView])
def job_events(
    tenant: str,
    job_id: int,
    session: SessionDep,
    p: PrincipalDep,
    limit: Limit = 100,
    after: After = None,
) -> Page[JobEventView]:
    row = tenant_for(session, p, tenant, Need.READ)
    job = _job(session, p, row, job_id)
    events, nxt = paginate(
        session,
        select(JobEvent).where(JobEvent.job_id == job.id),
        JobEvent.id,
        limit,
        _cursor(after),
    )
    return Page(items=[event_view(e, row.name) for e in events], next=nxt)


TEXT = "text/plain; charset=utf-8"
LOG_HEADERS = {
    "X-Gpuaas-Log-State": "`output`; `none-yet` (no file yet, the job is not finished); `none` "
    "(the job finished without output)",
    "X-Gpuaas-Log-Attempt": "the attempt shown (absent while there is none)",
    "X-Gpuaas-Log-Truncated": "`true` when a cap (not `tail`) cut lines",
}


@router.get(
    "/v1/tenants/{tenant}/jobs/{job_id}/logs",
    response_class=PlainTextResponse,
    responses={
        200: {
            "content": {"text/plain": {}},
            "description": "the lines; with follow=true a stream that ends with the job",
            "headers": {k: {"description": v, "schema": {"type": "string"}}
                        for k, v in LOG_HEADERS.items()},
        }
    },
)  # fmt: skip
def job_logs(
    tenant: str,
    job_id: int,
    request: Request,
    session: SessionDep,
    p: PrincipalDep,
    pod: Annotated[
        int | None,
        Query(ge=0, le=MAX_PODS - 1, description="One pod's rank (default: every pod)."),
    ] = None,
    stream: Annotated[LogStream, Query(description="stdout, stderr or all.")] = LogStream.ALL,
    tail: Annotated[
        int | None, Query(ge=0, le=MAX_LINES, description="The last N lines of each file.")
    ] = None,
    attempt: Annotated[
        int | None, Query(ge=0, description="Which run of a requeued job (default: the latest).")
    ] = None,
    follow: Annotated[
        bool, Query(description="Stream new lines until the job is finished.")
    ] = False,
) -> Response:
    """A job's output: its pods' stdout and stderr, as text, one file after another (they
    carry no timestamps to interleave them by). Readable by whoever may read the job. Order,
    labels, caps and follow: docs/api.md, "Logs" (and :mod:`gpuaas.service.logs`)."""
    row = tenant_for(session, p, tenant, Need.READ)
    job = _job(session, p, row, job_id)
    pods = pod_count(job.spec)
    if pod is not None and pod >= pods:  # a rank the document admits, of no pod of this job
        raise missing("pod", f"job {job.id} has no pod {pod} (its {pods}: ranks 0 to {pods - 1})")
    ranks = (pod,) if pod is not None else tuple(range(pods))
    query = LogQuery(job.id, ranks, stream, tail, attempt)
    layout = LogLayout(request.app.state.settings.logs_dir)
    try:
        first = logs.read_logs(layout, query, following=follow)
    except OSError as exc:  # a file the server may not read: the operator's to fix, not a bug
        log.error("job %s: cannot read its output: %s", job.id, exc)
        raise ApiError(503, f"the job's output cannot be read now ({exc.strerror})") from None
    headers = _log_headers(first, job.state in FINAL)
    if not follow:
        return PlainTextResponse(first.text, headers=headers, media_type=TEXT)
    db: Database = request.app.state.db
    lines = _follow(request, db, LogFollow(layout, query, first), first.text)
    return StreamingResponse(lines, headers=headers, media_type=TEXT)


def _log_headers(read: LogRead, finished: bool) -> dict[str, str]:
    state = "output" if read.found else "none" if finished else "none-yet"
    headers = {"X-Gpuaas-Log-State": state, "X-Gpuaas-Log-Truncated": str(read.truncated).lower()}
    if read.attempt is not None:
        headers["X-Gpuaas-Log-Attempt"] = str(read.attempt)
    return headers


def _job_over(db: Database, job_id: int) -> bool:
    """Whether the job is finished (or gone); one short query on a pooled connection, so a
    follow holds no connection between its polls."""
    with db.engine.connect() as conn:
        state = conn.scalar(select(Job.state).where(Job.id == job_id))
    return state is None or state in FINAL


async def _follow(
    request: Request, db: Database, follow: LogFollow, first: str
) -> AsyncIterator[str]:
    """The first read, then every poll's new lines until the job is finished or the client
    has gone. The state is read *before* the files: what was written before the job finished
    is read after it, so a finished job's last lines are always sent."""
    if first:
        yield first
    while True:
        over = await run_in_threadpool(_job_over, db, follow.query.job_id)
        more = True
        while more:
            try:
                text, more = await run_in_threadpool(follow.step)
            except OSError as exc:
                log.error("job %s: following its output stopped: %s", follow.query.job_id, exc)
                return
            if text:
                yield text
        if over:
            rest = follow.flush()
            if rest:
                yield rest
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(logs.FOLLOW_POLL)


@router.get(
    "/v1/tenants/{tenant}/jobs/{job_id}/manifest",
    response_model=list[dict[str, Any]],
    responses={200: {"content": {"application/yaml": {}}}},
)
def job_manifest(
    tenant: str,
    job_id: int,
    request: Request,
    session: SessionDep,
    p: PrincipalDep,
    target: Annotated[Target | None, Query(description="kueue, volcano or kai")] = None,
    format: Annotated[str, Query(pattern="^(json|yaml)$")] = "json",
) -> Any:
    """The Kubernetes objects that run the job (see gpuaas.service.job_manifest), as a JSON
    list or, with ``format=yaml``, a YAML stream; read access as for the job itself."""
    row = tenant_for(session, p, tenant, Need.READ)
    job = _job(session, p, row, job_id)
    settings = request.app.state.settings
    objects = job_manifests(session, job, row.name, settings, target and target.value)
    if format == "yaml":
        text = yaml.safe_dump_all(objects, sort_keys=False)
        return Response(text, media_type="application/yaml")
    return objects


@router.post("/v1/tenants/{tenant}/jobs/{job_id}/cancel", response_model=JobView)
def cancel(tenant: str, job_id: int, session: SessionDep, p: PrincipalDep) -> JobView:
    """Cancel a job: a pending one at once, a running one as soon as its backend stops it."""
    row = tenant_for(session, p, tenant, Need.SUBMIT)
    job = _job(session, p, row, job_id)
    with serialized_writes(session):
        job = cancel_job(session, job, time.time())
        session.commit()
    return job_view(job, row.name, _user_names(session, [job]).get(job.user_id, ""))


@router.get("/v1/tenants/{tenant}/workloads", response_model=Page[WorkloadView])
def workloads(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    queue: str | None = None,
    state: StateQ = None,  # the enum the server checks (_state), as the jobs list says it
    limit: Limit = 100,
    after: After = None,
) -> Page[WorkloadView]:
    """Unfinished jobs as admission sees them: queue, ClusterQueue, flavors, why they wait."""
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = select(Job).where(Job.tenant_id == row.id, Job.state.in_(UNFINISHED))
    stmt = _filtered(stmt, session, state, queue, None, None)
    if _own_only(p, row):
        stmt = stmt.where(Job.user_id == p.user_id)
    jobs, nxt = paginate(session, stmt, Job.id, limit, _cursor(after))
    users = _user_names(session, jobs)
    return Page(
        items=[workload_view(j, users.get(j.user_id, ""), row.name) for j in jobs], next=nxt
    )


@router.get("/v1/jobs", response_model=Page[JobView])
def all_jobs(
    session: SessionDep,
    p: PrincipalDep,
    tenant: str | None = None,
    state: StateQ = None,
    limit: Limit = 100,
    after: After = None,
) -> Page[JobView]:
    """Every tenant's jobs (platform roles)."""
    require_platform(p, write=False)
    stmt = _filtered(select(Job), session, state, None, None, None)
    if _matches_nothing(tenant):
        stmt = stmt.where(false())
    elif tenant is not None:
        tenant_id = session.scalar(select(Tenant.id).where(Tenant.name == tenant))
        stmt = stmt.where(Job.tenant_id == (tenant_id if tenant_id is not None else -1))
    jobs, nxt = paginate(session, stmt, Job.id, limit, _cursor(after))
    users = _user_names(session, jobs)
    tenant_ids = {j.tenant_id for j in jobs}
    names: dict[int, str] = {}
    if tenant_ids:
        rows = session.execute(select(Tenant.id, Tenant.name).where(Tenant.id.in_(tenant_ids)))
        names = dict(rows.all())
    return Page(
        items=[
            job_view(j, names.get(j.tenant_id, ""), users.get(j.user_id, ""), stored_names=True)
            for j in jobs
        ],
        next=nxt,
    )
