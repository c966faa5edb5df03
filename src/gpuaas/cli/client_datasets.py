"""``gpuaas datasets preload`` and ``gpuaas datasets warm``: the dataset commands beyond the
five verbs the one resource table gives the group (:mod:`gpuaas.cli.client_governance`)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuaas.cli.client import (
    JsonOption,
    TenantOption,
    connect,
    field,
    handles_errors,
    print_json,
    resolve_tenant,
    show_done,
    show_table,
)
from gpuaas.cli.client_governance import KIND_GROUPS

datasets_app = KIND_GROUPS["datasets"]

CACHE_COLUMNS = [
    ("NODE", field("node")),
    ("STATE", field("state")),
    ("SOURCE", field("source")),
    ("BYTES", field("sizeBytes")),
    ("ERROR", field("error")),
]


@datasets_app.command("preload")
@handles_errors
def preload(
    name: Annotated[str, typer.Argument(help="The dataset's name.")],
    nodes: Annotated[
        list[str], typer.Option("--node", "-n", help="A node to warm it on (repeat).")
    ],
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Warm a dataset on nodes (copies or checks its files there; see `warm`)."""
    with connect() as client:
        scope = resolve_tenant(client, tenant)
        obj = client.preload_dataset(name, nodes, tenant=scope)
    show_done(obj, as_json, f"dataset {name}: preload asked on {', '.join(nodes)}")


@datasets_app.command("warm")
@handles_errors
def warm(
    name: Annotated[str, typer.Argument(help="The dataset's name.")],
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Where a dataset is cached: each node's cache, warm, loading or failed."""
    with connect() as client:
        scope = resolve_tenant(client, tenant)
        obj = client.get_dataset(name, tenant=scope)
    if as_json:
        print_json(obj.get("caches", []))
        return
    show_table(obj.get("caches", []), CACHE_COLUMNS, title=f"dataset {name} of {scope}")
