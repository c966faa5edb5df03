"""Client commands for governance: flavors, cohorts, cluster queues, local queues, priority
classes and hardware profiles (one group per kind of the one resource table,
:mod:`gpuaas.model.api_kinds`), and Kueue YAML in and out."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from gpuaas.cli.client import (
    AfterOption,
    AllOption,
    Column,
    JsonOption,
    LimitOption,
    TenantOption,
    UsageError,
    cell,
    connect,
    fetch,
    field,
    group,
    handles_errors,
    labels_text,
    named_spec,
    print_json,
    quotas_text,
    ranges_text,
    read_documents,
    read_text,
    resolve_tenant,
    show_created,
    show_done,
    show_object,
    show_page,
)
from gpuaas.client.sdk import VERB_METHODS, Client
from gpuaas.model.api_kinds import KINDS, ApiKind

# -- the kinds of the one resource table ------------------------------------------------------
#
# Each kind of gpuaas.model.api_kinds gets a group (`gpuaas <cli> list|get|create|update|delete`)
# generated from its entry: its columns, its body fields as options, `--tenant` when it has
# tenant routes. Without `--tenant`, a kind with both scopes uses the provider's routes for a
# caller with a platform role and the caller's only tenant otherwise; a tenant-only kind (queues)
# uses the caller's only tenant. `update` changes what is given and keeps the rest: it reads the
# object, overlays the file (`-f`) and the options, and replaces it.

FORMATS: dict[str, Callable[[Any], str]] = {
    "cell": cell,
    "labels": labels_text,
    "quotas": quotas_text,
    "ranges": ranges_text,
}


def columns_of(kind: ApiKind) -> list[Column]:
    return [(c.header, field(*c.paths, fmt=FORMATS[c.fmt])) for c in kind.columns]


def what(kind: ApiKind) -> str:
    """How messages name the kind: ``cluster queue``."""
    return kind.singular.replace("_", " ")


def scope_tenant(client: Client, kind: ApiKind, tenant: str | None) -> str | None:
    """The tenant whose routes to use (None: the provider's), as the group's help says."""
    if "tenant" not in kind.scopes:
        return None
    if tenant or "provider" not in kind.scopes:
        return resolve_tenant(client, tenant)
    if client.whoami().get("platformRole"):
        return None
    return resolve_tenant(client, None)


def _doc_fields(kind: ApiKind, scope: str, doc: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """A document's name and fields, as SDK keywords: ``{name, spec}``, a Kueue object
    (``metadata.name``; a LocalQueue's ``spec.clusterQueue``), or the API's body."""
    name, spec, extra = named_spec(doc, path)
    fields = {f.api: f for f in kind.fields_for(scope)}
    if "spec" not in fields:
        extra = {**spec, **extra}
    elif spec or "spec" in doc:
        extra["spec"] = spec
    unknown = sorted(set(extra) - set(fields))
    if unknown:
        raise UsageError(
            f"{path}: {', '.join(unknown)}: not a field of a {what(kind)} here "
            f"(fields: name, {', '.join(fields) or 'none'})"
        )
    return {"name": name, **{fields[k].python: v for k, v in extra.items()}}


def _options(kind: ApiKind, values: Mapping[str, Any], scope: str) -> dict[str, Any]:
    """The field options given on the command line (spec comes from -f only)."""
    out: dict[str, Any] = {}
    for f in kind.fields:
        value = values.get(f.python)
        if value is None:
            continue
        if f.scope not in (None, scope):
            raise UsageError(f"--{f.python.replace('_', '-')} is for the {f.scope}'s routes only")
        out[f.python] = value
    return out


def _from_view(kind: ApiKind, scope: str, view: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of an object as read, to replace it with what changed."""
    return {
        f.python: view.get(f.api) for f in kind.fields_for(scope) if view.get(f.api) is not None
    }


def _sdk(client: Client, verb: str, kind: ApiKind) -> Callable[..., Any]:
    name = VERB_METHODS[verb].format(plural=kind.plural, singular=kind.singular)
    return getattr(client, name)


def _param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation, default=default
    )


def _field_params(kind: ApiKind) -> list[inspect.Parameter]:
    params = []
    for f in kind.fields:
        if f.type == "spec":
            continue
        flag = "--" + f.python.replace("_", "-")
        flags = [f.short] if f.short else []
        hint = f.help + ("" if f.scope is None else f" ({f.scope} routes)")
        kind_type = int if f.type == "int" else str
        params.append(
            _param(
                f.python,
                Annotated[kind_type | None, typer.Option(flag, *flags, help=hint)],
                None,
            )
        )
    return params


def _command(
    app: typer.Typer, verb: str, doc: str, params: list[inspect.Parameter], run: Any
) -> None:
    run.__signature__ = inspect.Signature(params)
    run.__annotations__ = {p.name: p.annotation for p in params}
    run.__name__ = verb
    run.__doc__ = doc
    app.command(verb)(handles_errors(run))


def add_kind_group(kind: ApiKind) -> typer.Typer:
    """The group of ``kind``: its five commands, from its table entry."""
    sub = group(kind.cli, kind.help)
    columns = columns_of(kind)
    name_arg = _param("name", Annotated[str, typer.Argument(help=f"The {what(kind)}'s name.")])
    tenant = [_param("tenant", TenantOption, None)] if "tenant" in kind.scopes else []
    as_json = [_param("as_json", JsonOption, False)]
    has_spec = any(f.type == "spec" for f in kind.fields)
    file_help = "YAML file ('-' for stdin): {name, spec} or Kueue objects" + (
        "" if has_spec else ", or the API's body"
    )
    file_opt = _param(
        "file", Annotated[Path | None, typer.Option("--file", "-f", help=file_help)], None
    )
    filters = [
        _param(
            f.python,
            Annotated[str | None, typer.Option("--" + f.python.replace("_", "-"), help=f.help)],
            None,
        )
        for f in kind.filters
    ]

    def list_(**a: Any) -> None:
        with connect() as client:
            scope = scope_tenant(client, kind, a.get("tenant"))
            keys = {f.python: a[f.python] for f in kind.filters if a[f.python] is not None}
            if scope is not None and keys:
                raise UsageError(f"--{', --'.join(keys)}: for the provider's list only")
            method = _sdk(client, "list", kind)
            page = fetch(
                lambda n, after: method(n, after, tenant=scope, **keys),
                a["limit"],
                a["after"],
                a["follow"],
            )
        show_page(
            page, columns, a["as_json"], title=None if scope is None else f"{kind.cli} of {scope}"
        )

    def get(**a: Any) -> None:
        with connect() as client:
            scope = scope_tenant(client, kind, a.get("tenant"))
            obj = _sdk(client, "get", kind)(a["name"], tenant=scope)
        print_json(obj) if a["as_json"] else show_object(obj)

    def create(**a: Any) -> None:
        made = []
        with connect() as client:
            scope = scope_tenant(client, kind, a.get("tenant"))
            where = "tenant" if scope else "provider"
            given = _options(kind, a, where)
            docs = [{"name": a["name"]}]
            if a["file"] is not None:
                raw = read_documents(a["file"])
                if a["name"] is not None:
                    if len(raw) != 1:
                        raise UsageError(f"{a['file']}: with NAME, give one document")
                    raw = [{"name": a["name"], **raw[0]}]
                docs = [_doc_fields(kind, where, d, a["file"]) for d in raw]
                if a["name"] is not None and docs[0]["name"] != a["name"]:
                    raise UsageError(f"{a['name']}: the file names {docs[0]['name']}")
            elif a["name"] is None:
                raise UsageError(f"give the {what(kind)}'s NAME or -f FILE")
            for doc in docs:
                made.append(_sdk(client, "create", kind)(**{**doc, **given}, tenant=scope))
        show_created(made, a["as_json"], what(kind))

    def update(**a: Any) -> None:
        with connect() as client:
            scope = scope_tenant(client, kind, a.get("tenant"))
            where = "tenant" if scope else "provider"
            name = a["name"]
            fields = _from_view(kind, where, _sdk(client, "get", kind)(name, tenant=scope))
            if a["file"] is not None:
                docs = read_documents(a["file"])
                if len(docs) != 1:
                    raise UsageError(f"{a['file']}: give one document to update {name}")
                fields.update(_doc_fields(kind, where, {"name": name, **docs[0]}, a["file"]))
                fields.pop("name")
            fields.update(_options(kind, a, where))
            obj = _sdk(client, "update", kind)(name, **fields, tenant=scope)
        show_done(obj, a["as_json"], f"{what(kind)} {name} updated")

    def delete(**a: Any) -> None:
        with connect() as client:
            scope = scope_tenant(client, kind, a.get("tenant"))
            _sdk(client, "delete", kind)(a["name"], tenant=scope)
        done = {"deleted": a["name"]} if scope is None else {"tenant": scope, "deleted": a["name"]}
        show_done(done, a["as_json"], f"{what(kind)} {a['name']} deleted")

    paging = [
        _param("limit", LimitOption, 100),
        _param("after", AfterOption, None),
        _param("follow", AllOption, False),
    ]
    optional_name = _param(
        "name",
        Annotated[str | None, typer.Argument(help=f"The {what(kind)}'s name (or from -f).")],
        None,
    )
    fields = _field_params(kind)
    plural = kind.cli.replace("-", " ")
    _command(sub, "list", f"List {plural}.", [*tenant, *filters, *paging, *as_json], list_)
    _command(sub, "get", f"Show one {what(kind)}.", [name_arg, *tenant, *as_json], get)
    _command(
        sub,
        "create",
        f"Create a {what(kind)} (or every one in -f FILE).",
        [optional_name, file_opt, *fields, *tenant, *as_json],
        create,
    )
    _command(
        sub,
        "update",
        f"Change a {what(kind)}: what -f FILE and the options give; the rest stays.",
        [name_arg, file_opt, *fields, *tenant, *as_json],
        update,
    )
    _command(sub, "delete", f"Delete a {what(kind)}.", [name_arg, *tenant, *as_json], delete)
    return sub


KIND_GROUPS: dict[str, typer.Typer] = {kind.cli: add_kind_group(kind) for kind in KINDS}


kueue_app = group("kueue", "Kueue YAML in (v1beta2, v1beta1, v1alpha1) and out (v1beta2).")


def _namespace_map(entries: list[str]) -> dict[str, str]:
    """``--namespace-map default=acme-ai`` (repeatable, or comma-separated) as a mapping."""
    out: dict[str, str] = {}
    for entry in entries:
        for item in filter(None, (part.strip() for part in entry.split(","))):
            namespace, sep, tenant = item.partition("=")
            if not sep or not namespace.strip() or not tenant.strip():
                raise typer.BadParameter(
                    f"{item!r} is not NAMESPACE=TENANT (e.g. default=acme-ai)",
                    param_hint="--namespace-map",
                )
            out[namespace.strip()] = tenant.strip()
    return out


@kueue_app.command("import")
@handles_errors
def kueue_import(
    file: Annotated[Path, typer.Argument(help="Kueue YAML (multi-document); '-' for stdin.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate only.")] = False,
    namespace_map: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace-map",
            help="NAMESPACE=TENANT: the tenant a LocalQueue namespace belongs to (repeatable). "
            "By default a namespace is the tenant of the same name.",
        ),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant", help="Tenant of every LocalQueue namespace --namespace-map does not name."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Import ResourceFlavors, Topologies, Cohorts, ClusterQueues, LocalQueues and priority
    classes; objects that mean what is stored already are reported unchanged."""
    mapping = _namespace_map(namespace_map or [])
    with connect() as client:
        result = client.import_kueue(
            read_text(file), dry_run=dry_run, namespace_map=mapping, tenant=tenant
        )
    _show_import(result, dry_run, as_json)


@kueue_app.command("export")
@handles_errors
def kueue_export(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Every governance object as Kueue YAML."""
    with connect() as client:
        text = client.export_kueue()
    _write_export(text, output, as_json)


def _write_export(text: str, output: Path | None, as_json: bool) -> None:
    if as_json:
        print_json([d for d in yaml.safe_load_all(text) if d is not None])
    elif output is not None:
        output.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output}", err=True)
    else:
        typer.echo(text, nl=not text.endswith("\n"))


def _show_import(result: Any, dry_run: bool, as_json: bool) -> None:
    if as_json:
        print_json(result)
    elif isinstance(result, Mapping):
        show_object(result, title="dry run: nothing stored" if dry_run else "imported")
    else:
        typer.echo(cell(result))


#: scheduler -> (its queue kind, as --help names it)
SCHEDULERS = {
    "kai": "KAI scheduler (Run:ai) scheduling.run.ai/v2 Queues",
    "volcano": "Volcano scheduling.volcano.sh/v1beta1 Queues",
}


COHORT_HELP = "Cohort of the top-level leaf queues (the scheduler lets them share the cluster)."


def add_scheduler_group(scheduler: str, what: str) -> typer.Typer:
    """``gpuaas <scheduler> export|import``, as ``gpuaas kueue`` but for another scheduler."""
    sub = group(scheduler, f"The governance as {what}, and back where it maps.")

    @sub.command("export")
    @handles_errors
    def export(
        tenant: Annotated[
            str | None,
            typer.Option("--tenant", help="Only this tenant's queues and the cohorts above them."),
        ] = None,
        output: Annotated[
            Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
        ] = None,
        as_json: JsonOption = False,
    ) -> None:
        with connect() as client:
            text = client.export_scheduler_queues(scheduler, tenant=tenant)
        _write_export(text, output, as_json)

    export.__doc__ = f"Every Cohort and ClusterQueue as {what}."

    @sub.command("import")
    @handles_errors
    def import_(
        file: Annotated[Path, typer.Argument(help="Queues (multi-document YAML); '-' for stdin.")],
        flavor: Annotated[
            str | None,
            typer.Option("--flavor", help="The ResourceFlavor the queues' quota is on."),
        ] = None,
        cohort: Annotated[str | None, typer.Option("--cohort", help=COHORT_HELP)] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate only.")] = False,
        namespace_map: Annotated[
            list[str] | None,
            typer.Option("--namespace-map", help="NAMESPACE=TENANT for exported LocalQueues."),
        ] = None,
        tenant: Annotated[
            str | None,
            typer.Option("--tenant", help="Tenant of every LocalQueue namespace not mapped."),
        ] = None,
        as_json: JsonOption = False,
    ) -> None:
        with connect() as client:
            result = client.import_scheduler_queues(
                scheduler,
                read_text(file),
                flavor=flavor,
                cohort=cohort,
                dry_run=dry_run,
                namespace_map=_namespace_map(namespace_map or []),
                tenant=tenant,
            )
        _show_import(result, dry_run, as_json)

    import_.__doc__ = (
        f"Import {what} as Cohorts and ClusterQueues; a field with no Kueue equivalent is "
        "refused, naming it (docs/kubernetes.md)."
    )
    return sub


SCHEDULER_GROUPS = {name: add_scheduler_group(name, what) for name, what in SCHEDULERS.items()}
