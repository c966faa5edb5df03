"""What every console page stands on: who is looking, the navigation their roles open, the
template renderer, one-shot confirmations and the live region.

A page is a route taking :func:`console` (or :func:`tenant_console` for pages under
``/t/{tenant}/``) and answering :func:`page`. The caller is read through the API on every
request (``GET /v1/whoami`` with the session token), so the navigation shows what the token
may do now, and a page never decides access itself: the API routes it calls do.

Live updates are polling with ETags: a page's ``live`` fragment sits in ``<div id="live">``,
which htmx re-requests every few seconds with ``If-None-Match``; the answer is the fragment
with the SHA-256 of its HTML as ETag, or 304 with nothing when it has not changed (htmx keeps
what is shown). Polling rather than server-sent events: it needs no long-lived connection per
open tab, works through every proxy, and the same route serves the first render and the update.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, Request, Response
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from gpuaas.service.console import session as sessions
from gpuaas.service.console.api import Answer, Api
from gpuaas.service.console.forms import Form

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
LIVE_TARGET = "live"
#: how often a live region asks again (milliseconds)
POLL_MS = 3000


# --- navigation --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NavItem:
    """A page in the menu: ``path`` is absolute (``/fleet``) or under a tenant
    (``/t/{tenant}/jobs``); ``roles`` the platform roles (a provider page) or tenant roles (a
    tenant page) it is shown to."""

    title: str
    path: str
    roles: frozenset[str]
    order: int = 100

    @property
    def per_tenant(self) -> bool:
        return "{tenant}" in self.path


NAV: list[NavItem] = []


def add_page(title: str, path: str, roles: set[str] | frozenset[str], order: int = 100) -> None:
    """Put a page in the menu (once; a module calls this when it is imported)."""
    item = NavItem(title, path, frozenset(roles), order)
    if item not in NAV:
        NAV.append(item)
        NAV.sort(key=lambda i: (i.order, i.title))


# --- who is looking ----------------------------------------------------------------------


class NotLoggedIn(Exception):
    """No session, or the API no longer accepts its token: to the login page."""


class Unavailable(Exception):
    """The API did not answer who the caller is, for a reason other than the token (a rate
    limit, a failing database): the page says so and the session stays, since logging
    someone out for a busy moment would make them paste their token again."""

    def __init__(self, status: int, detail: str, retry_after: str | None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


class Refused(Exception):
    """A write without the session's CSRF token (or from a foreign origin)."""


@dataclass
class Console:
    """One console request: the caller as the API sees them, and the API as their token."""

    request: Request
    api: Api
    session: sessions.SessionToken
    user: str
    platform_role: str | None
    tenants: dict[str, str]
    tenant: str | None = None
    form: dict[str, str] = field(default_factory=dict)

    @property
    def csrf(self) -> str:
        return self.session.csrf

    @property
    def is_provider_admin(self) -> bool:
        return self.platform_role == "provider-admin"

    def role_in(self, tenant: str | None = None) -> str | None:
        """The caller's role in ``tenant`` (the current one by default); a platform role sees
        every tenant as a viewer does (the API decides what more it may)."""
        tenant = tenant or self.tenant
        if tenant in self.tenants:
            return self.tenants[tenant]
        return "viewer" if self.platform_role else None

    def can(self, *roles: str) -> bool:
        return self.role_in() in roles

    def nav(self) -> list[tuple[str, list[tuple[str, str, bool]]]]:
        """Sections of ``(title, href, current)``: the provider's pages for platform roles,
        then each tenant the caller is a member of with the pages its role opens."""
        here = self.request.url.path
        sections: list[tuple[str, list[tuple[str, str, bool]]]] = []
        if self.platform_role:
            links = [
                (i.title, i.path, here == i.path)
                for i in NAV
                if not i.per_tenant and self.platform_role in i.roles
            ]
            if links:
                sections.append(("Provider", links))
        for tenant, role in sorted(self.tenants.items()):
            links = []
            for i in NAV:
                if i.per_tenant and role in i.roles:
                    href = i.path.replace("{tenant}", quote(tenant, safe=""))
                    links.append((i.title, href, here == href))
            if links:
                sections.append((f"{tenant} ({role})", links))
        return sections

    def home(self) -> str:
        """Where ``/`` leads: the first page of the menu."""
        for _, links in self.nav():
            if links:
                return links[0][1]
        return "/nothing"

    def t(self, rest: str = "") -> str:
        """The current tenant's console path: ``c.t("/jobs")`` -> ``/t/acme/jobs``."""
        return f"/t/{quote(self.tenant or '', safe='')}{rest}"

    def v1(self, rest: str = "") -> str:
        """The current tenant's API path: ``c.v1("/jobs")`` -> ``/v1/tenants/acme/jobs``."""
        return f"/v1/tenants/{quote(self.tenant or '', safe='')}{rest}"


async def console(request: Request) -> Console:
    """The dependency of every console page: the session's caller, or off to log in."""
    session = sessions.read_session(request)
    if session is None:
        raise NotLoggedIn
    api = Api(request, session.token)
    me = await api.get("/v1/whoami")
    if me.status == 401:
        raise NotLoggedIn
    if not me.ok:  # busy (429), or the API failing: say so, and keep the session
        raise Unavailable(me.status, me.detail, me.headers.get("retry-after"))
    body = me.body
    c = Console(
        request=request,
        api=api,
        session=session,
        user=body["user"],
        platform_role=body.get("platformRole"),
        tenants={t["tenant"]: t["role"] for t in body.get("tenants", [])},
    )
    if request.method not in ("GET", "HEAD"):
        c.form = await sessions.read_form(request)
        if not sessions.csrf_ok(request, session, c.form):
            raise Refused
    return c


async def tenant_console(tenant: str, c: Console = Depends(console)) -> Console:
    """A page under ``/t/{tenant}/``: the tenant must be one the caller may see."""
    if c.role_in(tenant) is None:
        raise TenantHidden(tenant)
    c.tenant = tenant
    return c


async def tenant_admin_console(c: Console = Depends(tenant_console)) -> Console:
    """A tenant-admin page: for the tenant's admins and the provider admin (the API still
    decides every read and write; this keeps its forms from people who could only be refused)."""
    if not (c.can("tenant-admin") or c.is_provider_admin):
        raise NotAllowed("this page is for the tenant's admins")
    return c


class NotAllowed(Exception):
    """A page the caller's role does not open (403)."""


class TenantHidden(Exception):
    """A tenant the caller is not a member of: as the API does, it does not exist."""


# --- rendering ---------------------------------------------------------------------------


def _flash(request: Request) -> str | None:
    return request.cookies.get(sessions.FLASH)


def render_string(c: Console | None, name: str, **context: Any) -> str:
    return templates.get_template(name).render(c=c, **context)


def etag_of(html: str) -> str:
    return '"' + hashlib.sha256(html.encode()).hexdigest()[:24] + '"'


def is_live_poll(request: Request) -> bool:
    return request.headers.get("hx-request") == "true" and (
        request.headers.get("hx-target") == LIVE_TARGET
    )


def page(
    c: Console,
    name: str,
    *,
    title: str,
    live: str | None = None,
    status: int = 200,
    **context: Any,
) -> Response:
    """A full page from template ``name`` (which extends ``base.html``); with ``live`` (a
    fragment template), the fragment alone when htmx polls for it (304 when unchanged)."""
    request = c.request
    if live is not None:
        html = render_string(c, live, **context)
        etag = etag_of(html)
        if is_live_poll(request):
            headers = {"ETag": etag, "Cache-Control": "no-store"}
            if request.headers.get("if-none-match") == etag:
                return Response(status_code=304, headers=headers)
            return HTMLResponse(html, headers=headers)
        context["live_html"] = Markup(html)  # our own template, autoescaped
        context["live_etag"] = etag
        context["live_url"] = str(request.url.path) + (
            f"?{request.url.query}" if request.url.query else ""
        )
    flash = _flash(request)
    response = templates.TemplateResponse(
        request,
        name,
        {"c": c, "title": title, "flash": flash, "poll_ms": POLL_MS, **context},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )
    if flash:
        response.delete_cookie(sessions.FLASH, path="/")
    return response


def form_page(
    c: Console,
    name: str,
    *,
    title: str,
    form: Form,
    refused: Answer | None = None,
    **context: Any,
) -> Response:
    """A page holding a write form (template ``name``, its live region the fragment
    ``_<name>`` beside it): the form fresh, or, after the API ``refused`` the write, as the
    person typed it with the API's message next to each field it names, under the API's
    status (nothing was written: the API checks before it stores)."""
    status = 200
    if refused is not None:
        form = form.fill(c.form).show(refused)
        status = refused.status
    folder, _, base = name.rpartition("/")
    live = f"{folder}/_{base}" if folder else f"_{base}"
    return page(c, name, title=title, status=status, live=live, form=form, **context)


def done(c: Console, where: str, message: str) -> Response:
    """After a write that succeeded: back to a page (POST-redirect-GET), saying what was done."""
    response = Response(status_code=303, headers={"Location": where})
    sessions.set_flash(response, c.request, message)
    return response


def failed(c: Console, answer: Answer, *, title: str = "Not possible") -> Response:
    """A read (or a write without a form) the API refused: its status and sentence."""
    return page(c, "error.html", title=title, status=answer.status, detail=answer.detail)


# --- formatting (Jinja filters) ----------------------------------------------------------


def when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


def ago(ts: float | None) -> str:
    if ts is None:
        return "—"
    s = max(0, int(time.time() - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return f"{s}s ago"


def money(value: Any, currency: str = "") -> str:
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return "—"
    return f"{amount:,.2f}" + (f" {currency}" if currency else "")


templates.env.filters["when"] = when
templates.env.filters["ago"] = ago
templates.env.filters["money"] = money
