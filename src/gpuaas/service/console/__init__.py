"""The web console: one site for the provider admin, the tenant admin and the tenant user,
served by ``gpuaas serve`` at ``/`` (``/docs`` too), with nothing else to start.

It lives in the service layer (``gpuaas.service.console``) because it is a client of the
service: every page reads and writes through the API routes, in-process (:mod:`.api`), with
the session's token, so roles, tenant isolation, validation and audit are the API's own. It
imports ``gpuaas.service`` (and ``gpuaas.engine.reasons`` for the reason table's words) and
nothing imports it but :mod:`gpuaas.service.app`.

Stack: server-rendered Jinja2 templates (``templates/``), htmx for the live regions and small
in-page requests, uPlot for charts, all vendored under ``static/vendor/`` (no CDN; see
:mod:`.vendor` and ``make console-assets``).

How to add a page
-----------------
1. A module ``views_<area>.py`` here with ``router = APIRouter(include_in_schema=False)`` and
   routes taking ``c: Console = Depends(console)`` (a provider page) or
   ``Depends(tenant_console)`` (a page under ``/t/{tenant}/...``; ``c.tenant`` is set,
   ``tenant_admin_console`` for the tenant's admins only;
   ``c.v1("/jobs")`` is its API path). Read with ``await c.api.get(path, **query)`` (an
   :class:`~.api.Answer`); show a list with :func:`.tables.api_table`.
2. Answer ``page(c, "<area>/<name>.html", title=..., **context)``; the template
   ``{% extends "base.html" %}`` and fills ``{% block content %}`` (macros in
   ``_macros.html``: ``table``, ``form``, ``reason``, ``bar``). For live updates pass
   ``live="<area>/_fragment.html"``: the fragment is rendered into ``live_html`` and polled
   with ETags (``{{ live_region() }}`` in the template).
3. A write: ``@router.post`` with the same dependency (it has checked the CSRF token and
   parsed the form into ``c.form``), call the API, then ``done(c, where, "what was done")``
   or, on a 4xx, the page again with ``form.show(answer)`` and the API's status.
4. ``add_page("Title", "/path" or "/t/{tenant}/path", roles, order)`` puts it in the menu
   for those roles; add the module to :data:`VIEWS` below.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from gpuaas.service.console import entry, views_provider, views_tenant_admin, views_user
from gpuaas.service.console import session as sessions
from gpuaas.service.console.frame import (
    HERE,
    NotAllowed,
    NotLoggedIn,
    Refused,
    TenantHidden,
    Unavailable,
    templates,
)

#: the modules whose ``router`` the console serves
VIEWS = [entry, views_provider, views_user, views_tenant_admin]


def install(app: FastAPI) -> None:
    """Serve the console (and ``/docs``) from ``app``."""
    app.mount(entry.STATIC, StaticFiles(directory=HERE / "static"), name="console-static")
    for module in VIEWS:
        app.include_router(module.router)
    app.add_exception_handler(NotLoggedIn, _to_login)  # type: ignore[arg-type]
    app.add_exception_handler(Refused, _refused)  # type: ignore[arg-type]
    app.add_exception_handler(TenantHidden, _hidden)  # type: ignore[arg-type]
    app.add_exception_handler(NotAllowed, _not_allowed)  # type: ignore[arg-type]
    app.add_exception_handler(Unavailable, _unavailable)  # type: ignore[arg-type]


async def _to_login(request: Request, exc: NotLoggedIn) -> Response:
    where = request.url.path if request.method == "GET" else "/"
    if request.headers.get("hx-request") == "true":
        response: Response = Response(status_code=200, headers={"HX-Redirect": "/login"})
    else:
        response = RedirectResponse(f"/login?next={where}", status_code=303)
    if sessions.read_session(request) is not None:
        sessions.clear_session(response, request)
    return response


def _plain(request: Request, status: int, title: str, detail: str) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "error.html",
        {"c": None, "title": title, "detail": detail, "flash": None},
        status_code=status,
    )


async def _refused(request: Request, exc: Refused) -> Response:
    return _plain(
        request, 403, "Refused", "This request did not carry the session's CSRF token; reload."
    )


async def _hidden(request: Request, exc: TenantHidden) -> Response:
    return _plain(request, 404, "Not found", f"tenant {exc.args[0]!r} not found")


async def _not_allowed(request: Request, exc: NotAllowed) -> Response:
    return _plain(request, 403, "Not for your role", str(exc))


async def _unavailable(request: Request, exc: Unavailable) -> Response:
    status = 429 if exc.status == 429 else 503
    response = _plain(request, status, "Try again shortly", f"The API answered: {exc.detail}")
    response.headers["Retry-After"] = exc.retry_after or "1"
    return response
