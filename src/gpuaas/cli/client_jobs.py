"""Client commands for work: ``jobs`` (submit, list, get, events, logs, cancel) and
``workloads``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from gpuaas.cli.client import (
    AfterOption,
    AllOption,
    Column,
    FileArgument,
    JsonOption,
    LimitOption,
    TenantOption,
    UsageError,
    connect,
    fetch,
    field,
    group,
    handles_errors,
    print_json,
    read_documents,
    resolve_tenant,
    short_when,
    show_done,
    show_object,
    show_page,
    show_table,
)
from gpuaas.model.job_state import JobState


def gpus_text(value: Any) -> str:
    """GPUs held, as a count: ``2``, ``0.5`` (a share), never ``2.0``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:g}"
    return str(value)


# -- jobs and workloads -----------------------------------------------------------------------

jobs_app = group("jobs", "Submit and follow jobs.")
JOB_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("KIND", field("kind")),
    ("QUEUE", field("queue")),
    ("STATE", field("state")),
    ("USER", field("user")),
    ("GPUS", field("gpus", fmt=gpus_text)),
    ("SUBMITTED", field("createdAt", fmt=short_when)),
]


def document_key(document: Mapping[str, Any], index: int) -> str:
    """The idempotency key a document of ``jobs submit -f`` gets unless it sets one: a digest
    of the document's content and its index in the file, so a rerun of the same file (after
    fixing another document, even) returns the jobs already made instead of making them again.
    """
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(f"{index}\n{text}".encode()).hexdigest()
    return f"file-{digest[:40]}"


@jobs_app.command("submit")
@handles_errors
def jobs_submit(
    file: FileArgument,
    tenant: TenantOption = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="Resubmitting the same key never makes two jobs."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check every document; create nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Submit the job spec(s) of a YAML file (several documents: several jobs).

    The server checks every document before it creates any: with an error anywhere nothing is
    created, and each error names its document. Each document carries an idempotency key (its
    own ``idempotencyKey``, else one derived from its content and position), so running the
    same file again never makes a job twice: it creates only what is missing.
    """
    docs = read_documents(file)
    if idempotency_key is not None:
        if len(docs) != 1:
            raise UsageError("--idempotency-key needs a file with exactly one job")
        docs[0]["idempotencyKey"] = idempotency_key
    for index, doc in enumerate(docs):
        doc.setdefault("idempotencyKey", document_key(doc, index))
    with connect() as client:
        name = resolve_tenant(client, tenant)
        result = client.submit_jobs(name, docs, dry_run=dry_run)
    items = result.get("items", []) if isinstance(result, Mapping) else []
    if dry_run:
        show_done(result, as_json, f"{len(docs)} job(s) checked: all valid, none created")
        return
    jobs = [item["job"] for item in items]
    if as_json:
        print_json(jobs[0] if len(jobs) == 1 else jobs)
        return
    show_table(jobs, JOB_COLUMNS, title=f"submitted to {name}")
    existing = [item for item in items if not item.get("created")]
    if existing:
        names = ", ".join(f"{item['document'] + 1} ({item['name']})" for item in existing)
        typer.echo(f"already submitted (same idempotency key), not created again: {names}")


@jobs_app.command("list")
@handles_errors
def jobs_list(
    tenant: TenantOption = None,
    state: Annotated[str | None, typer.Option("--state")] = None,
    queue: Annotated[str | None, typer.Option("--queue")] = None,
    kind: Annotated[str | None, typer.Option("--kind")] = None,
    user: Annotated[str | None, typer.Option("--user")] = None,
    all_tenants: Annotated[
        bool, typer.Option("--all-tenants", help="Jobs of every tenant (platform roles).")
    ] = False,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """The tenant's jobs (a tenant user sees only its own)."""
    with connect() as client:
        if all_tenants:
            page = fetch(
                lambda n, a: client.list_all_jobs(n, a, tenant=tenant, state=state),
                limit,
                after,
                follow,
            )
            columns = [("TENANT", field("tenant")), *JOB_COLUMNS]
        else:
            name = resolve_tenant(client, tenant)
            page = fetch(
                lambda n, a: client.list_jobs(
                    name, n, a, state=state, queue=queue, kind=kind, user=user
                ),
                limit,
                after,
                follow,
            )
            columns = JOB_COLUMNS
    show_page(page, columns, as_json)


@jobs_app.command("get")
@handles_errors
def jobs_get(job_id: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """One job: its spec, state, and where it runs."""
    with connect() as client:
        job = client.get_job(resolve_tenant(client, tenant), job_id)
    print_json(job) if as_json else show_object(job)


@jobs_app.command("cancel")
@handles_errors
def jobs_cancel(job_id: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Cancel a job (pending or running)."""
    with connect() as client:
        job = client.cancel_job(resolve_tenant(client, tenant), job_id)
    state = job.get("state") if isinstance(job, Mapping) else None
    message = (
        f"job {job_id} cancelled"
        if state == JobState.CANCELLED
        else f"job {job_id}: cancel requested (state now {state}; the reconciler stops it)"
    )
    show_done(job, as_json, message)


@jobs_app.command("manifest")
@handles_errors
def jobs_manifest(
    job_id: str,
    target: Annotated[
        str | None,
        typer.Option(help="kueue, volcano or kai (default: the server's GPUAAS_KUBE_TARGET)"),
    ] = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """The Kubernetes objects that run a job (YAML; pinned to its nodes once admitted)."""
    with connect() as client:
        found = client.job_manifest(
            resolve_tenant(client, tenant), job_id, target=target, yaml=not as_json
        )
    if as_json:
        print_json(found)
    else:
        typer.echo(str(found), nl=False)


EVENT_COLUMNS: list[Column] = [
    ("TIME", field("at", "time", fmt=short_when)),
    ("FROM", field("fromState")),
    ("TO", field("toState", "state")),
    ("REASON", field("reason", "message")),
]


@jobs_app.command("events")
@handles_errors
def jobs_events(job_id: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """What happened to a job, oldest first."""
    with connect() as client:
        events = client.job_events(resolve_tenant(client, tenant), job_id)
    if as_json:
        print_json(events)
    else:
        show_table(events, EVENT_COLUMNS, title=f"events of job {job_id}")


@jobs_app.command("logs")
@handles_errors
def jobs_logs(
    job_id: str,
    tenant: TenantOption = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")
    ] = False,
    pod: Annotated[
        int | None, typer.Option("--pod", min=0, help="One pod's rank (default: every pod).")
    ] = None,
    tail: Annotated[
        int | None, typer.Option("--tail", min=0, help="The last N lines of each file.")
    ] = None,
    stdout_only: Annotated[bool, typer.Option("--stdout", help="Standard output only.")] = False,
    stderr_only: Annotated[bool, typer.Option("--stderr", help="Standard error only.")] = False,
    attempt: Annotated[
        int | None,
        typer.Option("--attempt", min=0, help="A run of a requeued job (default: the latest)."),
    ] = None,
) -> None:
    """A job's output: its pods' stdout and stderr (lines marked [pod-N] when several).

    Files are shown one after another (pod 0's stdout, then its stderr, then pod 1's ...):
    they carry no timestamps to interleave them by. With --follow the command waits for new
    lines and ends when the job is finished (Ctrl-C stops it earlier).
    """
    if stdout_only and stderr_only:
        raise UsageError("--stdout and --stderr exclude each other (neither: both streams)")
    stream = "stdout" if stdout_only else "stderr" if stderr_only else "all"
    options: dict[str, Any] = {"pod": pod, "tail": tail, "stream": stream, "attempt": attempt}
    with connect() as client:
        name = resolve_tenant(client, tenant)
        if follow:
            try:
                for line in client.follow_job_logs(name, job_id, **options):
                    typer.echo(line)
            except KeyboardInterrupt:
                raise typer.Exit(130) from None
            return
        logs = client.job_logs(name, job_id, **options)
    typer.echo(logs, nl=False)
    if logs.state != "output":
        when = "yet" if logs.state == "none-yet" else "(the job is finished)"
        typer.echo(f"job {job_id} has no output {when}", err=True)
    if logs.truncated:
        typer.echo("(older lines cut by the server's limit; ask for fewer with --tail)", err=True)


workloads_app = group("workloads", "The admission view of a tenant's jobs.")
WORKLOAD_COLUMNS: list[Column] = [
    ("JOB", field("id")),
    ("NAME", field("name")),
    ("QUEUE", field("queue")),
    ("CLUSTER QUEUE", field("clusterQueue")),
    ("STATE", field("state")),
    ("FLAVORS", field("flavors")),
    ("REASON", field("reason.message", "reason")),
]


@workloads_app.command("list")
@handles_errors
def workloads_list(
    tenant: TenantOption = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Workloads: queue, cluster queue, state, why pending, flavors assigned."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        page = fetch(lambda n, a: client.list_workloads(name, n, a), limit, after, follow)
    show_page(page, WORKLOAD_COLUMNS, as_json, title=f"workloads of {name}")
