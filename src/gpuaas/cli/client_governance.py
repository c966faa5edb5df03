"""Client commands for governance: flavors, cohorts, cluster queues, local queues, priority
classes, hardware profiles, and Kueue YAML in and out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
import yaml

from gpuaas.cli.client import (
    AfterOption,
    AllOption,
    Column,
    FileArgument,
    JsonOption,
    LimitOption,
    TenantOption,
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

# -- governance -------------------------------------------------------------------------------

FLAVOR_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("NODE LABELS", field("spec.nodeLabels", fmt=labels_text)),
    ("TAINTS", field("spec.nodeTaints")),
    ("TOLERATIONS", field("spec.tolerations")),
]
SPEC_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("TENANT", field("tenant")),
    ("SPEC", field("spec")),
]

flavors_app = group("flavors", "ResourceFlavors: kinds of capacity, mapped to node labels.")
cohorts_app = group("cohorts", "Cohorts: trees of cluster queues that lend and borrow.")


@flavors_app.command("list")
@handles_errors
def flavors_list(
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Every resource flavor."""
    with connect() as client:
        page = fetch(lambda n, a: client.list_flavors(n, a), limit, after, follow)
    show_page(page, FLAVOR_COLUMNS, as_json)


@flavors_app.command("create")
@handles_errors
def flavors_create(file: FileArgument, as_json: JsonOption = False) -> None:
    """Create flavors from a file ({name, spec} or Kueue ResourceFlavor documents)."""
    with connect() as client:
        made = [client.create_flavor(*named_spec(doc, file)[:2]) for doc in read_documents(file)]
    show_created(made, as_json, "flavor")


@cohorts_app.command("list")
@handles_errors
def cohorts_list(
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Every cohort."""
    with connect() as client:
        page = fetch(lambda n, a: client.list_cohorts(n, a), limit, after, follow)
    show_page(page, SPEC_COLUMNS, as_json)


cq_app = group("cluster-queues", "ClusterQueues: quota per flavor and resource.")
CQ_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("TENANT", field("tenant")),
    ("COHORT", field("spec.cohortName", "spec.cohort")),
    ("QUOTA (+BORROWING LIMIT)", field("spec.resourceGroups", fmt=quotas_text)),
]
CqTenantOption = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        "-t",
        help="Use the tenant's own cluster queues (tenant admin) instead of the provider's view.",
    ),
]


@cq_app.command("list")
@handles_errors
def cq_list(
    tenant: CqTenantOption = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Every cluster queue (platform) or a tenant's own."""
    with connect() as client:
        page = fetch(
            lambda n, a: client.list_cluster_queues(n, a, tenant=tenant), limit, after, follow
        )
    show_page(page, CQ_COLUMNS, as_json)


@cq_app.command("get")
@handles_errors
def cq_get(name: str, tenant: CqTenantOption = None, as_json: JsonOption = False) -> None:
    """One cluster queue."""
    with connect() as client:
        cq = client.get_cluster_queue(name, tenant=tenant)
    print_json(cq) if as_json else show_object(cq)


@cq_app.command("create")
@handles_errors
def cq_create(
    file: FileArgument,
    tenant: CqTenantOption = None,
    owner: Annotated[
        str | None, typer.Option("--owner", help="Provider: the tenant that owns the queue.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create cluster queues from a file ({name, spec} or Kueue ClusterQueue documents)."""
    made = []
    with connect() as client:
        for doc in read_documents(file):
            name, spec, extra = named_spec(doc, file)
            made.append(
                client.create_cluster_queue(
                    name, spec, tenant=tenant, owner=owner or extra.get("tenant")
                )
            )
    show_created(made, as_json, "cluster queue")


@cq_app.command("delete")
@handles_errors
def cq_delete(name: str, tenant: CqTenantOption = None, as_json: JsonOption = False) -> None:
    """Delete a cluster queue."""
    with connect() as client:
        client.delete_cluster_queue(name, tenant=tenant)
    show_done({"deleted": name}, as_json, f"cluster queue {name} deleted")


queues_app = group("queues", "A tenant's LocalQueues: where its users submit jobs.")
QUEUE_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("CLUSTER QUEUE", field("clusterQueue")),
    ("USER LIMIT", field("userLimit")),
]


@queues_app.command("list")
@handles_errors
def queues_list(
    tenant: TenantOption = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """The tenant's local queues."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        page = fetch(lambda n, a: client.list_local_queues(name, n, a), limit, after, follow)
    show_page(page, QUEUE_COLUMNS, as_json, title=f"queues of {name}")


@queues_app.command("get")
@handles_errors
def queues_get(queue: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """One local queue with the counts of its pending, admitted and running jobs."""
    with connect() as client:
        lq = client.get_local_queue(resolve_tenant(client, tenant), queue)
    print_json(lq) if as_json else show_object(lq)


@queues_app.command("create")
@handles_errors
def queues_create(
    queue: str,
    cluster_queue: Annotated[str, typer.Option("--cluster-queue", "-c", help="Where it feeds.")],
    user_limit: Annotated[
        int | None, typer.Option("--user-limit", min=1, help="Max admitted jobs per user.")
    ] = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a local queue in the tenant (tenant admin)."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        lq = client.create_local_queue(name, queue, cluster_queue, user_limit=user_limit)
    show_done(lq, as_json, f"queue {queue} created in {name} -> {cluster_queue}")


@queues_app.command("delete")
@handles_errors
def queues_delete(queue: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Delete a local queue."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        client.delete_local_queue(name, queue)
    show_done({"tenant": name, "deleted": queue}, as_json, f"queue {queue} deleted from {name}")


pc_app = group("priority-classes", "WorkloadPriorityClasses: global and per tenant.")
PC_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("VALUE", field("value", "spec.value")),
    ("TENANT", field("tenant")),
    ("DESCRIPTION", field("description", "spec.description")),
]


@pc_app.command("list")
@handles_errors
def pc_list(
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="The tenant's own and the global ones.")
    ] = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Priority classes."""
    with connect() as client:
        page = fetch(
            lambda n, a: client.list_priority_classes(n, a, tenant=tenant), limit, after, follow
        )
    show_page(page, PC_COLUMNS, as_json)


@pc_app.command("create")
@handles_errors
def pc_create(
    name: str,
    value: Annotated[int, typer.Option("--value", help="Higher is admitted (and kept) first.")],
    description: Annotated[str, typer.Option("--description")] = "",
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="A class of the tenant's own.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a priority class: global (provider) or the tenant's own (tenant admin)."""
    with connect() as client:
        made = client.create_priority_class(name, value, description=description, tenant=tenant)
    show_done(made, as_json, f"priority class {name} = {value} created")


profiles_app = group("profiles", "Hardware profiles: the catalogue users pick from.")
PROFILE_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("DISPLAY NAME", field("spec.displayName")),
    ("LOCAL QUEUE", field("spec.localQueue")),
    ("RESOURCES: DEFAULT [MIN-MAX]", field("spec.resources", fmt=ranges_text)),
    ("OWNER", field("tenant")),
]


@profiles_app.command("list")
@handles_errors
def profiles_list(
    tenant: TenantOption = None,
    every: Annotated[
        bool, typer.Option("--every", help="Every profile of the platform (provider).")
    ] = False,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """The hardware profiles a tenant may use."""
    with connect() as client:
        name = None if every else resolve_tenant(client, tenant)
        page = fetch(
            lambda n, a: client.list_hardware_profiles(n, a, tenant=name), limit, after, follow
        )
    show_page(page, PROFILE_COLUMNS, as_json)


@profiles_app.command("get")
@handles_errors
def profiles_get(profile: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """One hardware profile, as the tenant sees it."""
    with connect() as client:
        hp = client.get_hardware_profile(profile, tenant=resolve_tenant(client, tenant))
    print_json(hp) if as_json else show_object(hp)


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
    if as_json:
        print_json(result)
    elif isinstance(result, Mapping):
        show_object(result, title="dry run: nothing stored" if dry_run else "imported")
    else:
        typer.echo(cell(result))


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
    if as_json:
        print_json([d for d in yaml.safe_load_all(text) if d is not None])
    elif output is not None:
        output.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output}", err=True)
    else:
        typer.echo(text, nl=not text.endswith("\n"))
