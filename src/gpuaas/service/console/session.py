"""Sessions: an API token traded for a cookie, and the CSRF check on every write.

Login takes an API token once and mints from it (``POST /v1/tokens``) a session token that
carries the same roles and expires in :data:`LIFETIME` (or with the pasted token, if sooner);
the cookie holds that session token, never the pasted one, and logout revokes it
(``DELETE /v1/tokens/{id}``), so a stolen cookie dies with the session. Every request
re-reads the principal through the API (a revoked token or a removed member is out on the next
click, in every replica), and there is no server-side session store to share between replicas.

The cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it)
and Secure when the console is served over https. Writes carry a CSRF token besides: a form
field or an ``X-CSRF-Token`` header (htmx adds it), equal to an HMAC of the session token, so
a page that cannot read the cookie cannot forge it; a write with a foreign ``Origin`` is
refused too.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from fastapi import Request, Response

COOKIE = "gpuaas_session"
FLASH = "gpuaas_flash"
#: how long a console session lasts (seconds)
LIFETIME = 12 * 3600
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True, slots=True)
class SessionToken:
    token_id: int
    token: str

    @property
    def cookie(self) -> str:
        return f"{self.token_id}.{self.token}"

    @property
    def csrf(self) -> str:
        return csrf_for(self.token)


def csrf_for(token: str) -> str:
    return hmac.new(b"gpuaas-console-csrf", token.encode(), hashlib.sha256).hexdigest()[:40]


def read_session(request: Request) -> SessionToken | None:
    raw = request.cookies.get(COOKIE)
    if not raw or "." not in raw:
        return None
    token_id, _, token = raw.partition(".")
    if not token_id.isdigit() or not token:
        return None
    return SessionToken(int(token_id), token)


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def set_session(response: Response, request: Request, session: SessionToken) -> None:
    response.set_cookie(
        COOKIE,
        session.cookie,
        max_age=LIFETIME,
        path="/",
        httponly=True,
        samesite="strict",
        secure=is_https(request),
    )


def clear_session(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE, path="/", httponly=True, samesite="strict", secure=is_https(request)
    )


def set_flash(response: Response, request: Request, message: str) -> None:
    """A one-shot confirmation the next page shows ("job 12 cancelled")."""
    response.set_cookie(
        FLASH,
        message[:300],
        max_age=60,
        path="/",
        httponly=True,
        samesite="strict",
        secure=is_https(request),
    )


async def read_form(request: Request) -> dict[str, str]:
    """A urlencoded form body as ``{name: last value}`` (the console's forms upload no files)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


def origin_ok(request: Request) -> bool:
    """A browser's write names its page's origin; it must be this server's."""
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def csrf_ok(request: Request, session: SessionToken, form: dict[str, str]) -> bool:
    sent = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD) or ""
    return origin_ok(request) and hmac.compare_digest(sent.encode(), session.csrf.encode())
