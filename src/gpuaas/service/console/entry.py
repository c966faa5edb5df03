"""The console's doors: ``/`` (to the caller's first page), log in, log out, and ``/docs``
(Swagger UI from the vendored assets, so the API reference works offline)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse

from gpuaas.service.console import session as sessions
from gpuaas.service.console.api import Api
from gpuaas.service.console.forms import Field, Form
from gpuaas.service.console.frame import Console, console, page, templates

router = APIRouter(include_in_schema=False)

STATIC = "/console/static"


def _login_form(next_url: str = "/") -> Form:
    return Form(
        "/login",
        [
            Field(
                "token",
                "API token",
                kind="password",
                api=("token",),
                required=True,
                help="A token of yours (gpa_…): `gpuaas login` wrote one, or an admin minted it.",
            ),
            Field("next", "", kind="hidden", value=next_url),
        ],
        submit="Log in",
        id="login",
    )


def _safe_next(value: str) -> str:
    """Only a path of this site (no ``//host`` or scheme): no open redirect."""
    if value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def _login_page(request: Request, form: Form, status: int = 200) -> Response:
    flash = request.cookies.get(sessions.FLASH)
    response = templates.TemplateResponse(
        request,
        "login.html",
        {"c": None, "title": "Log in", "form": form, "flash": flash},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )
    if flash:
        response.delete_cookie(sessions.FLASH, path="/")
    return response


@router.get("/login")
async def login_page(request: Request, next: str = "/") -> Response:
    return _login_page(request, _login_form(_safe_next(next)))


@router.post("/login")
async def login(request: Request) -> Response:
    """Trade the pasted token for a session token of the same roles (see ``session``)."""
    values = await sessions.read_form(request)
    form = _login_form(_safe_next(values.get("next", "/")))
    if not sessions.origin_ok(request):
        form.errors.append("This form was sent from another site.")
        return _login_page(request, form, 403)
    token = values.get("token", "").strip()
    if not token:
        form["token"].error = "Paste an API token."
        return _login_page(request, form, 422)
    api = Api(request, token)
    body = {"name": "console session", "expiresIn": sessions.LIFETIME}
    minted = await api.post("/v1/tokens", body)
    if minted.status == 422 and any(f == "expiresIn" for f, _ in minted.field_errors):
        minted = await api.post("/v1/tokens", {"name": "console session"})  # expires sooner
    if minted.status == 401:
        form["token"].error = "The API does not accept this token (unknown, expired or revoked)."
        return _login_page(request, form, 401)
    if not minted.ok:
        form.show(minted)
        return _login_page(request, form, minted.status)
    session = sessions.SessionToken(int(minted.body["id"]), minted.body["token"])
    response = RedirectResponse(form["next"].value, status_code=303)
    sessions.set_session(response, request, session)
    return response


@router.post("/logout")
async def logout(c: Console = Depends(console)) -> Response:
    """Revoke the session token, forget the cookie."""
    await c.api.delete(f"/v1/tokens/{c.session.token_id}")
    response = RedirectResponse("/login", status_code=303)
    sessions.clear_session(response, c.request)
    sessions.set_flash(response, c.request, "Logged out.")
    return response


@router.get("/")
async def home(c: Console = Depends(console)) -> Response:
    return RedirectResponse(c.home(), status_code=303)


@router.get("/nothing")
async def nothing(c: Console = Depends(console)) -> Response:
    return page(c, "nothing.html", title="Nothing to show")


@router.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    """Swagger UI from the vendored swagger-ui-dist: no CDN, so it works offline. The OpenAPI
    document declares the bearer scheme, which gives the Authorize button."""
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} — API reference",
        swagger_js_url=f"{STATIC}/vendor/swagger-ui-bundle.js",
        swagger_css_url=f"{STATIC}/vendor/swagger-ui.css",
        swagger_favicon_url=f"{STATIC}/vendor/swagger-favicon-32x32.png",
        # ~100 routes: the tags first, each opened on demand, draws in a fraction of the time
        swagger_ui_parameters={"docExpansion": "none"},
    )
