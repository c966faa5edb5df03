"""The FastAPI application: routers, error handling, and the server's start-up.

Start-up applies the migrations, gives the provider admin a token until a first start has succeeded
(handed to ``on_admin_token`` once that start has succeeded, never logged), registers the fleet
file's nodes when the database has none, and starts the reconciler when this process is the leader.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gpuaas import __version__
from gpuaas.service import collector, console, errors, openapi
from gpuaas.service.audit import AuditLog, AuditMiddleware
from gpuaas.service.auth import TenantCache, bootstrap_admin, mark_bootstrapped
from gpuaas.service.group_commit import SubmissionWriter
from gpuaas.service.limits import BodyLimit
from gpuaas.service.principal_cache import PrincipalCache
from gpuaas.service.rate_limits import RateLimits, RateLimitSettings
from gpuaas.service.routers import ROUTERS
from gpuaas.service.settings import Settings
from gpuaas.service.submission_lane import SubmissionLane
from gpuaas.service.telemetry import Telemetry
from gpuaas.service.utilisation import Utilisation
from gpuaas.store.checkpointer import Checkpoints
from gpuaas.store.db import Database

log = logging.getLogger("gpuaas.service")


def create_app(
    settings: Settings | None = None,
    on_admin_token: Callable[[str], None] | None = None,
    announce_later: bool = False,
) -> FastAPI:
    """The app; ``announce_later``: the caller shows the first start's admin token itself
    (``announce_admin_token``), once it knows the start succeeded."""
    settings = settings or Settings()
    if settings.catalogue is not None:  # before any node is read: its models must be known
        from gpuaas.supply.catalogue_file import use_catalogue

        use_catalogue(settings.catalogue)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start(app, settings, on_admin_token, announce_later)
        collector.tune()
        try:
            yield
        finally:
            stop(app)

    app = FastAPI(
        title="gpuaas",
        version=__version__,
        description="GPU-as-a-Service control plane: tenants, quotas, queues and jobs.",
        lifespan=lifespan,
        docs_url=None,  # the console serves /docs from vendored assets (works offline)
        redoc_url=None,
        telemetry={
            "tracing": settings.opentelemetry,
            "metrics": settings.opentelemetry,
            "logs": settings.opentelemetry,
        },
    )
    app.state.settings = settings
    app.state.tenant_ids = TenantCache()
    app.state.reconciler = None
    app.state.demo = None
    app.state.telemetry = Telemetry()
    app.state.rate_limits = RateLimits(
        RateLimitSettings(
            per_token=settings.rate_per_token,
            per_tenant=settings.rate_per_tenant,
            free_failures=settings.auth_free_failures,
        )
    )
    #: GPU utilisation windows (UtilisationReader, docs/telemetry.md): the reconciler feeds it,
    #: the API, /metrics and the autoscaling loops read it
    app.state.utilisation = Utilisation.for_api(settings)
    errors.install(app)
    openapi.install(app)
    for router in ROUTERS:
        app.include_router(router)
    console.install(app)  # the web console at / and /docs (gpuaas.service.console)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.state.audit = AuditLog(http_sink=settings.audit_http, syslog_sink=settings.audit_syslog)
    app.add_middleware(AuditMiddleware, audit=app.state.audit)  # sees every other answer
    # outermost: POST /v1/tenants/{t}/jobs as plain ASGI, with its own body limit and audit entry
    app.add_middleware(SubmissionLane, audit=app.state.audit, max_bytes=settings.max_body_bytes)
    return app


def start(
    app: FastAPI,
    settings: Settings,
    on_admin_token: Callable[[str], None] | None,
    announce_later: bool = False,
) -> None:
    # the WAL checkpointed by a thread, not in the commits requests wait for (store/checkpointer)
    db = Database(settings.url, Checkpoints.THREAD)
    db.upgrade()
    app.state.db = db
    #: authenticated principals for at most a second, invalidated by this process's identity
    #: writes at once (service/principal_cache.py)
    app.state.principals = PrincipalCache()
    app.state.principals.watch(db.sessions)
    app.state.audit.start(db)
    # group commit (service/group_commit.py), a created job's audit entry in its transaction
    app.state.submissions = SubmissionWriter(db, audit=app.state.audit)
    app.state.submissions.start()
    from gpuaas.service import usage

    usage.configure(db.url, enabled=settings.metering, reader=app.state.utilisation)
    now = time.time()
    with db.session() as session:
        app.state.admin_token = bootstrap_admin(session, settings.admin_token, now)
    from gpuaas.service.fleet import register_initial_fleet

    register_initial_fleet(db, settings)
    if settings.demo:
        from gpuaas.service.demo import JobStream, seed_demo

        seed_demo(db, settings)
        app.state.demo = JobStream(db, settings)
        app.state.demo.start()
    if settings.reconcile and settings.reconciler_process:
        from gpuaas.service.leader import ReconcilerProcess

        app.state.reconciler = ReconcilerProcess(settings)
        app.state.reconciler.start()
    elif settings.reconcile:
        from gpuaas.service.reconciler import Reconciler

        reconciler = Reconciler(db, settings, app.state.telemetry,
                                utilisation=app.state.utilisation)  # fmt: skip
        app.state.reconciler = reconciler
        reconciler.start()
    if not announce_later:
        announce_admin_token(app, on_admin_token)


def announce_admin_token(app: FastAPI, on_admin_token: Callable[[str], None] | None) -> None:
    """Once the first start has succeeded: record it, then show the admin token (once).

    Until then a failed start shows nothing and the next start issues a fresh token (see
    ``bootstrap_admin``). ``gpuaas serve`` calls this itself once the port is bound.
    """
    token = getattr(app.state, "admin_token", None)
    if token is None:
        return
    with app.state.db.session() as session:
        mark_bootstrapped(session, time.time())
    app.state.admin_token = None
    if on_admin_token is not None:
        on_admin_token(token)


def stop(app: FastAPI) -> None:
    demo = getattr(app.state, "demo", None)
    if demo is not None:
        demo.stop()
    reconciler = getattr(app.state, "reconciler", None)
    if reconciler is not None:
        reconciler.stop()
    submissions = getattr(app.state, "submissions", None)
    if submissions is not None:
        submissions.stop()
    audit = getattr(app.state, "audit", None)
    if audit is not None:
        audit.stop()
    db = getattr(app.state, "db", None)
    if db is not None:
        db.dispose()
