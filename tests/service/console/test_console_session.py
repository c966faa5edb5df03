"""The console's frame without a browser: login into a session cookie (its flags), the CSRF
check on writes, logout revoking the session, the same tenant isolation as the API, ETag
polling, and /docs served from the vendored assets."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_world import csrf_of, demo_world, log_in
from fastapi.testclient import TestClient

from gpuaas.service.console import vendor
from gpuaas.service.console.session import COOKIE


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with demo_world(tmp_path_factory.mktemp("console")) as world:
        yield world


def test_pages_need_a_session(world: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = world
    client.cookies.clear()
    r = client.get("/t/acme-ai/jobs", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/t/acme-ai/jobs"
    polled = client.get("/t/acme-ai/jobs", headers={"HX-Request": "true"})
    assert polled.headers.get("hx-redirect") == "/login"


def test_a_bad_token_is_shown_next_to_the_field_and_sets_no_cookie(
    world: tuple[TestClient, dict[str, str]],
) -> None:
    client, _ = world
    client.cookies.clear()
    r = client.post("/login", data={"token": "gpa_nope", "next": "/"})
    assert r.status_code == 401
    assert COOKIE not in r.cookies
    assert re.search(r'id="f-token-error">The API does not accept this token', r.text)
    assert 'aria-invalid="true"' in r.text


def test_login_sets_an_httponly_strict_cookie_holding_a_session_token(
    world: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = world
    client.cookies.clear()
    r = client.post("/login", data={"token": tokens["arjun"], "next": "/t/acme-ai/jobs"},
                    follow_redirects=False)  # fmt: skip
    assert r.status_code == 303 and r.headers["location"] == "/t/acme-ai/jobs"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain http here; over https it is (below)
    value = client.cookies[COOKIE]
    assert tokens["arjun"] not in value  # a session token minted from it, not the token
    session_token = value.partition(".")[2]
    me = client.get("/v1/whoami", headers={"Authorization": f"Bearer {session_token}"})
    assert me.json()["user"] == "arjun"
    assert me.json()["tenants"] == [{"tenant": "acme-ai", "role": "tenant-user"}]


def test_the_cookie_is_secure_over_https(world: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = world
    secure = TestClient(client.app, base_url="https://testserver")
    r = secure.post("/login", data={"token": tokens["arjun"]}, follow_redirects=False)
    assert r.status_code == 303
    assert "Secure" in r.headers["set-cookie"]


def test_an_open_redirect_after_login_goes_home(world: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = world
    client.cookies.clear()
    for target in ("//evil.example/x", "https://evil.example/", "\\\\evil"):
        r = client.post("/login", data={"token": tokens["arjun"], "next": target},
                        follow_redirects=False)  # fmt: skip
        assert r.headers["location"] == "/"


def test_writes_without_the_csrf_token_or_from_another_origin_are_refused(
    world: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = world
    csrf = log_in(client, tokens["arjun"])
    logout_without = client.post("/logout", data={}, follow_redirects=False)
    assert logout_without.status_code == 403
    wrong = client.post("/logout", data={"csrf": "0" * 40}, follow_redirects=False)
    assert wrong.status_code == 403
    foreign = client.post("/logout", data={"csrf": csrf}, follow_redirects=False,
                          headers={"Origin": "https://evil.example"})  # fmt: skip
    assert foreign.status_code == 403
    assert client.get("/t/acme-ai/jobs").status_code == 200  # still logged in
    by_header = client.post("/logout", headers={"X-CSRF-Token": csrf}, follow_redirects=False)
    assert by_header.status_code == 303


def test_logout_revokes_the_session_token(world: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = world
    csrf = log_in(client, tokens["arjun"])
    cookie = client.cookies[COOKIE]
    r = client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    client.cookies.set(COOKIE, cookie)  # a copy of the cookie kept by a thief
    after = client.get("/t/acme-ai/jobs", follow_redirects=False)
    assert after.status_code == 303 and after.headers["location"].startswith("/login")
    session_token = cookie.partition(".")[2]
    assert (
        client.get("/v1/whoami", headers={"Authorization": f"Bearer {session_token}"}).status_code
        == 401
    )
    # the pasted token itself lives on
    assert (
        client.get("/v1/whoami", headers={"Authorization": f"Bearer {tokens['arjun']}"}).status_code
        == 200
    )


def test_a_foreign_tenant_does_not_exist_and_the_menu_shows_only_ones_own(
    world: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = world
    log_in(client, tokens["arjun"])
    mine = client.get("/t/acme-ai/jobs")
    assert mine.status_code == 200
    assert "globex-research" not in mine.text and "initech-apps" not in mine.text
    for path in ("/t/globex-research/jobs", "/t/no-such-tenant/jobs"):
        r = client.get(path)
        assert r.status_code == 404
    home = client.get("/", follow_redirects=False)
    assert home.headers["location"] == "/t/acme-ai/jobs"


def test_a_live_region_answers_304_while_nothing_changed(
    world: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = world
    log_in(client, tokens["alice"])
    full = client.get("/t/acme-ai/jobs")
    etag = re.search(r'data-etag="([^"]+)"', full.text).group(1).replace("&#34;", '"')
    poll = {"HX-Request": "true", "HX-Target": "live"}
    fragment = client.get("/t/acme-ai/jobs", headers=poll)
    assert fragment.status_code == 200 and fragment.headers["etag"] == etag
    assert "<html" not in fragment.text and "<table" in fragment.text
    same = client.get("/t/acme-ai/jobs", headers={**poll, "If-None-Match": etag})
    assert same.status_code == 304 and same.content == b""


def test_docs_work_offline_from_vendored_assets(world: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = world
    page = client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(a.startswith("/console/static/vendor/") for a in assets), assets
    for asset in assets:
        assert client.get(asset).status_code == 200
    assert "cdn" not in page.text.lower()
    spec = client.get("/openapi.json").json()
    assert "bearer" in spec["components"]["securitySchemes"]  # the Authorize button


def test_vendored_files_match_their_versions_file() -> None:
    listed = vendor.read_versions()
    shipped = {p.name for p in vendor.VENDOR.iterdir() if p.name != "VERSIONS"}
    assert shipped == set(listed)
    for name, (_, _, _, digest) in listed.items():
        assert vendor.sha256(vendor.VENDOR / name) == digest, name
    wanted = {name for pkg in vendor.PACKAGES for name in pkg.files.values()}
    assert wanted == set(listed)


def test_every_console_page_is_left_out_of_the_openapi(
    world: tuple[TestClient, dict[str, str]],
) -> None:
    client, _ = world
    paths = client.get("/openapi.json").json()["paths"]
    assert all(p.startswith(("/v1/", "/healthz", "/metrics")) for p in paths), sorted(paths)


def test_the_csrf_token_differs_per_session(world: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = world
    first = log_in(client, tokens["arjun"])
    second = log_in(client, tokens["arjun"])
    assert first != second
    assert csrf_of(client.get("/t/acme-ai/jobs").text) == second


def test_every_console_asset_is_in_the_wheels_package_data() -> None:
    """pyproject's package-data globs cover every template and static file (else the installed
    console would miss them while a source checkout works)."""
    import tomllib

    root = Path(__file__).parents[3]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["gpuaas"]
    package = root / "src" / "gpuaas"
    covered = {p for g in globs for p in package.glob(g)}
    console = package / "service" / "console"
    shipped = {
        p
        for sub in ("templates", "static")
        for p in (console / sub).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped and not shipped - covered, sorted(str(p) for p in shipped - covered)


def test_a_busy_api_keeps_the_session(
    world: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a 401 logs out: a rate limit or a failing database on ``whoami`` shows the API's
    answer and keeps the cookie (a loaded browser test lost its session to this once)."""
    import httpx

    from gpuaas.service.console import api as console_api

    client, tokens = world
    client.cookies.clear()
    log_in(client, tokens["arjun"])
    cookie = client.cookies[COOKIE]
    real_get = console_api.Api.get

    async def busy(self: console_api.Api, path: str, **params: object) -> console_api.Answer:
        if path == "/v1/whoami":
            body = {"status": 429, "detail": "too many requests for this token"}
            return console_api.Answer(429, body, httpx.Headers({"retry-after": "7"}))
        return await real_get(self, path, **params)

    monkeypatch.setattr(console_api.Api, "get", busy)
    r = client.get("/t/acme-ai/jobs", follow_redirects=False)
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert "too many requests for this token" in r.text
    assert COOKIE not in r.headers.get("set-cookie", "")
    monkeypatch.setattr(console_api.Api, "get", real_get)
    assert client.cookies[COOKIE] == cookie
    assert client.get("/t/acme-ai/jobs", follow_redirects=False).status_code == 200
