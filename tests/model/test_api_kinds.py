"""The one resource table and everything generated from it agree: the table is well formed and
its references resolve; the OpenAPI document serves exactly its kind x scope x verb routes
(besides Kueue import/export) with the table's methods, statuses and models; the SDK has a
method and the CLI a command (with the table's options) for every kind x verb; the kind x verb
tests have a sample for every kind x scope. A kind x verb missing anywhere fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel

from gpuaas.cli.client_governance import FORMATS, KIND_GROUPS
from gpuaas.cli.main import COMMANDS
from gpuaas.client import Client
from gpuaas.client.sdk import VERB_METHODS
from gpuaas.model.api_kinds import KINDS, METHODS, VERBS, ApiKind
from gpuaas.service.app import create_app
from gpuaas.service.routers.governance import resolve
from gpuaas.service.settings import Settings
from kind_samples import KIND_SCOPES, SAMPLES

#: governance routes that are not a kind's verb
OTHER_ROUTES = {
    f"{method} /v1/{scheduler}/{verb}"
    for scheduler in ("kueue", "kai", "volcano")
    for method, verb in (("POST", "import"), ("GET", "export"))
}


def _openapi(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
        data_dir=tmp_path,
        reconcile=False,
        admin_token="gpa_table-admin-token-0123456789",
    )
    return create_app(settings).openapi()


def table_routes() -> dict[str, tuple[ApiKind, str, str]]:
    """``"METHOD /path"`` -> (kind, scope, verb), from the table alone."""
    out = {}
    for kind in KINDS:
        for scope in kind.scopes:
            for verb in kind.verbs:
                method = METHODS[verb][0]
                path = kind.route(scope, one=verb not in ("list", "create"))
                out[f"{method} {path}"] = (kind, scope, verb)
    return out


def test_the_table_is_well_formed() -> None:
    for attribute in ("kind", "path", "cli", "singular", "plural"):
        values = [getattr(k, attribute) for k in KINDS]
        assert len(set(values)) == len(values), f"two kinds share a {attribute}"
    for kind in KINDS:
        assert kind.scopes and set(kind.scopes) <= {"provider", "tenant"}, kind.kind
        assert kind.verbs == VERBS, f"{kind.kind}: every kind has every verb"
        names = [f.python for f in kind.fields]
        assert len(set(names)) == len(names), kind.kind
        assert {c.fmt for c in kind.columns} <= set(FORMATS), kind.kind
        assert kind.columns[0].header == "NAME"
        assert all(f.scope in (None, *kind.scopes) for f in kind.fields), kind.kind


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.cli)
def test_the_references_resolve_and_the_fields_are_the_models(kind: ApiKind) -> None:
    service = resolve(kind.service)
    for verb in kind.verbs:
        assert callable(getattr(service, verb, None)), f"{kind.service} has no {verb}"
    view = resolve(kind.view)
    assert issubclass(view, BaseModel)
    view_fields = {f.alias or n for n, f in view.model_fields.items()}
    for scope in kind.scopes:
        request = resolve(kind.request_for(scope))
        assert issubclass(request, BaseModel)
        request_fields = {f.alias or n for n, f in request.model_fields.items()}
        assert "name" in request_fields
        for body_field in kind.fields_for(scope):  # type: ignore[arg-type]
            assert body_field.api in request_fields, f"{kind.kind}: {body_field.api}"
            # the CLI's update reads a field back from the view to keep it
            assert body_field.api in view_fields, f"{kind.kind}: {body_field.api} not in view"


def test_the_openapi_document_serves_exactly_the_tables_routes(tmp_path: Path) -> None:
    document = _openapi(tmp_path)
    served = {
        f"{method.upper()} {path}": operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if "governance" in operation.get("tags", [])
    }
    expected = table_routes()
    assert set(served) - OTHER_ROUTES == set(expected), (
        f"missing: {sorted(set(expected) - set(served))}; "
        f"not in the table: {sorted(set(served) - OTHER_ROUTES - set(expected))}"
    )
    for route, (kind, scope, verb) in expected.items():
        operation = served[route]
        status = str(METHODS[verb][1])
        assert status in operation["responses"], f"{route}: no {status}"
        view = resolve(kind.view).__name__
        if verb != "delete":
            schema = operation["responses"][status]["content"]["application/json"]["schema"]
            assert schema["$ref"].endswith(view if verb != "list" else f"Page_{view}_"), route
        if verb in ("create", "update"):
            body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            name = body.rsplit("/", 1)[-1]  # the table's model, as create or replace says it
            assert name.startswith(resolve(kind.request_for(scope)).__name__), route
            schema = document["components"]["schemas"][name]
            if verb == "create" and schema["properties"]["name"].get("default") is None:
                assert "name" in schema.get("required", []), route
            if verb == "update":
                assert schema["properties"]["name"]["readOnly"] is True, route
        else:
            assert "requestBody" not in operation, route
        params = {p["name"] for p in operation.get("parameters", [])}
        if verb == "list":
            filters = {f.api for f in kind.filters} if scope == "provider" else set()
            assert {"limit", "after"} | filters <= params, route


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.cli)
def test_the_sdk_has_every_verb(kind: ApiKind) -> None:
    for verb in kind.verbs:
        name = VERB_METHODS[verb].format(plural=kind.plural, singular=kind.singular)
        assert callable(getattr(Client, name, None)), f"Client.{name} missing"
    assert callable(getattr(Client, f"iter_{kind.plural}", None))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.cli)
def test_the_cli_has_every_verb_with_the_tables_options(kind: ApiKind) -> None:
    # the group's module first; a kind's own commands beyond the verbs (datasets' preload)
    # come from the modules after it
    modules = COMMANDS.get(kind.cli, ())
    assert modules[:1] == ("client_governance",), f"cli/main.py COMMANDS: {kind.cli}"
    group = typer.main.get_command(KIND_GROUPS[kind.cli])
    commands = group.commands  # type: ignore[attr-defined]
    extra = set(commands) - set(kind.verbs)
    assert set(kind.verbs) <= set(commands)
    assert not extra or len(modules) > 1, f"{kind.cli}: {extra} from no listed module"
    for verb in kind.verbs:
        command = commands[verb]
        options = {opt for param in command.params for opt in param.opts}
        assert ("--tenant" in options) == ("tenant" in kind.scopes), f"{kind.cli} {verb}"
        assert "--json" in options
        if verb in ("create", "update"):
            assert "--file" in options
            for f in kind.fields:
                if f.type != "spec":
                    assert "--" + f.python.replace("_", "-") in options, f"{kind.cli} {verb}"
        if verb == "list":
            assert {"--limit", "--after", "--all"} <= options
            assert {"--" + f.python for f in kind.filters} <= options


def test_every_kind_and_scope_has_a_sample_for_the_verb_tests() -> None:
    wanted = {(kind.kind, scope) for kind, scope in KIND_SCOPES}
    assert wanted == set(SAMPLES), f"tests/kind_samples.py: {wanted ^ set(SAMPLES)}"


def test_the_sdk_and_the_kinds_cli_load_no_server() -> None:
    """The table is plain data: the SDK and the CLI import it without the server's packages."""
    code = (
        "import sys\n"
        "import gpuaas.client, gpuaas.cli.client_governance, gpuaas.cli.client_fleet\n"
        "heavy = [m for m in ('fastapi', 'sqlalchemy', 'pydantic', 'gpuaas.service', "
        "'gpuaas.engine', 'numpy') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout, out.stdout[-500:] + out.stderr[-2000:]
