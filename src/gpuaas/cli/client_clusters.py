"""Client commands for tenant clusters: ``clusters create|get|list|scale|delete|manifest|
events|allowance|allow`` (docs/clusters.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
import yaml

from gpuaas.cli.client import (
    Column,
    FileArgument,
    JsonOption,
    TenantOption,
    UsageError,
    connect,
    field,
    group,
    handles_errors,
    print_json,
    read_documents,
    resolve_tenant,
    short_when,
    show_done,
    show_object,
    show_table,
)

clusters_app = group("clusters", "Tenant clusters carved from the fleet (tenant-admins).")


def _kind(item: Any) -> str:
    """``kubernetes/rancher``, ``slurm``, ``baremetal``."""
    return str(item.get("kind")) + (f"/{item['distribution']}" if item.get("distribution") else "")


def _nodes(item: Any) -> str:
    """Nodes held, and leaving (``3 -1``: three, one of them being drained)."""
    held, leaving = len(item.get("nodes") or []), len(item.get("releasing") or [])
    return f"{held + leaving}" + (f" -{leaving}" if leaving else "")


CLUSTER_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("KIND", _kind),
    ("STATE", field("state")),
    ("NODES", _nodes),
    ("GPUS", field("gpus")),
    ("ALLOCATED", field("allocatedGpus")),
    ("RUNNING", field("jobs.running")),
    ("PENDING", field("jobs.pending")),
]


@clusters_app.command("create")
@handles_errors
def clusters_create(
    file: FileArgument, tenant: TenantOption = None, as_json: JsonOption = False
) -> None:
    """Create the cluster a YAML file describes (``name``, ``kind``: kubernetes | slurm |
    baremetal, ``distribution``, ``pools``, ``controlPlane``, ``sshKeys``)."""
    docs = read_documents(file)
    if len(docs) != 1:
        raise UsageError(f"{file}: expected one cluster, found {len(docs)} documents")
    with connect() as client:
        cluster = client.create_cluster(resolve_tenant(client, tenant), docs[0])
    show_done(
        cluster, as_json, f"cluster {cluster['name']} {cluster['state']}: {cluster['reason']}"
    )


@clusters_app.command("list")
@handles_errors
def clusters_list(tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """The tenant's clusters: pools, GPUs, what its jobs hold, state."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        found = client.list_clusters(name)
    print_json(found) if as_json else show_table(
        found, CLUSTER_COLUMNS, title=f"clusters of {name}"
    )


@clusters_app.command("get")
@handles_errors
def clusters_get(name: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """One cluster: its pools and nodes, GPUs and allocation, jobs, state and reason."""
    with connect() as client:
        cluster = client.get_cluster(resolve_tenant(client, tenant), name)
    print_json(cluster) if as_json else show_object(cluster)


@clusters_app.command("scale")
@handles_errors
def clusters_scale(
    name: str,
    counts: Annotated[
        list[str], typer.Argument(help="POOL=COUNT for each pool to change (e.g. gpu=3)")
    ],
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """New node counts; leaving nodes are drained (their jobs requeued) before they go."""
    pools: dict[str, int] = {}
    for item in counts:
        pool, _, count = item.partition("=")
        if not pool or not count.isdigit():
            raise UsageError(f"{item!r}: expected POOL=COUNT")
        pools[pool] = int(count)
    with connect() as client:
        cluster = client.scale_cluster(resolve_tenant(client, tenant), name, pools)
    show_done(cluster, as_json, f"cluster {name} {cluster['state']}: {cluster['reason']}")


@clusters_app.command("delete")
@handles_errors
def clusters_delete(
    name: str,
    force: Annotated[
        bool, typer.Option("--force", help="Cancel the cluster's running jobs.")
    ] = False,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Give the cluster's nodes back and remove it (refused while its jobs run, unless
    --force)."""
    with connect() as client:
        cluster = client.delete_cluster(resolve_tenant(client, tenant), name, force=force)
    show_done(
        cluster, as_json, f"cluster {name} {cluster['state']}: its nodes go back once drained"
    )


@clusters_app.command("manifest")
@handles_errors
def clusters_manifest(name: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """What the provisioner realises (Cluster API objects, the Slurm partition, the
    bare-metal allocation), as YAML documents."""
    with connect() as client:
        docs = client.cluster_manifest(resolve_tenant(client, tenant), name)
    if as_json:
        print_json(docs)
    else:
        typer.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


@clusters_app.command("events")
@handles_errors
def clusters_events(name: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """The cluster's changes, each with its reason."""
    with connect() as client:
        events = client.cluster_events(resolve_tenant(client, tenant), name)
    columns: list[Column] = [
        ("AT", field("at", fmt=short_when)),
        ("FROM", field("fromState")),
        ("TO", field("toState")),
        ("CODE", field("code")),
        ("REASON", field("reason")),
    ]
    print_json(events) if as_json else show_table(events, columns)


@clusters_app.command("allowance")
@handles_errors
def clusters_allowance(tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """The pools the tenant may carve clusters from, its node limit and what it holds."""
    with connect() as client:
        found = client.get_cluster_allowance(resolve_tenant(client, tenant))
    print_json(found) if as_json else show_object(found)


@clusters_app.command("allow")
@handles_errors
def clusters_allow(
    tenant: Annotated[str, typer.Argument(help="The tenant")],
    node_limit: Annotated[int, typer.Option("--node-limit", help="Most nodes in all")],
    flavor: Annotated[
        list[str] | None, typer.Option("--flavor", help="A flavor it may draw from (repeat)")
    ] = None,
    gpu_model: Annotated[
        list[str] | None, typer.Option("--gpu-model", help="A GPU model it may draw (repeat)")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Set the provider's terms for a tenant's clusters (provider-admin)."""
    with connect() as client:
        found = client.set_cluster_allowance(
            tenant, node_limit=node_limit, flavors=flavor or [], gpu_models=gpu_model or []
        )
    show_done(found, as_json, f"tenant {tenant} may carve {node_limit} node(s) from "
              f"{', '.join([*(flavor or []), *(gpu_model or [])]) or 'no pool'}")  # fmt: skip
