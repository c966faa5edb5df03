"""Client commands for the fleet: ``nodes`` (register, import, cordon, drain, partition,
delete) and ``network`` (the SR-IOV objects of a NIC pool)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from gpuaas.cli.client import (
    AfterOption,
    AllOption,
    Column,
    FileArgument,
    JsonOption,
    LimitOption,
    UsageError,
    cell,
    connect,
    fetch,
    field,
    group,
    handles_errors,
    print_json,
    read_documents,
    read_text,
    show_done,
    show_object,
    show_page,
    show_table,
)

# -- nodes ------------------------------------------------------------------------------------

nodes_app = group("nodes", "The fleet's nodes (platform roles).")
NODE_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("MODEL", field("gpuModel")),
    ("GPUS", field("gpuCount")),
    ("POOL", lambda node: cell((node.get("labels") or {}).get("gpuaas.io/pool"))),
    ("ZONE", field("topology.zone")),
    ("CORDONED", field("cordoned")),
    ("DRAINING", field("draining")),
]

GPU_COLUMNS: list[Column] = [
    ("GPU", field("index")),
    ("MODEL", field("model")),
    ("MODE", field("partition.mode")),
    ("CONFIG", field("partition.config")),
    ("REPLICAS", field("partition.replicas")),
    (
        "INSTANCES",
        lambda gpu: " ".join(
            str(i.get("profile"))
            for i in ((gpu.get("partition") or {}).get("instances") or [])
            if isinstance(i, dict)
        ),
    ),
]

NIC_COLUMNS: list[Column] = [
    ("NIC", field("name")),
    ("POOL", field("pool")),
    ("LINK", field("link")),
    ("GBPS", field("speedGbps")),
    ("RDMA", field("rdma")),
    ("VFS", field("vfs")),
    ("PCIE ROOT", field("pcieRoot")),
    ("NUMA", field("numaNode")),
    ("RAIL", field("rail")),
    ("FABRIC", field("fabric")),
    ("PCIE GPUS", lambda nic: ",".join(str(g) for g in nic.get("pcieGpus") or [])),
    ("NUMA GPUS", lambda nic: ",".join(str(g) for g in nic.get("numaGpus") or [])),
]

network_app = group("network", "RDMA / SR-IOV networks of the fleet's NIC pools (platform roles).")


@network_app.command("manifest")
@handles_errors
def network_manifest(
    pool: Annotated[
        str | None,
        typer.Option("--pool", help="The NIC pool, e.g. nvidia.com/rdma_ib (default: every pool)."),
    ] = None,
    tenants: Annotated[
        list[str] | None,
        typer.Option(
            "--tenant", help="A tenant whose pods use it (repeat; default: every tenant)."
        ),
    ] = None,
    operator_namespace: Annotated[
        str | None,
        typer.Option(help="The SR-IOV network operator's namespace (sriov-network-operator)."),
    ] = None,
    ipam: Annotated[
        str | None, typer.Option(help='A CNI IPAM object as JSON, e.g. {"type": "whereabouts"}.')
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The SriovNetworkNodePolicy and SriovNetwork / SriovIBNetwork objects (a
    NetworkAttachmentDefinition for a shared RDMA pool) that make a NIC pool usable from the
    tenants' pods, as YAML to `kubectl apply -f -`."""
    with connect() as client:
        found = client.network_manifest(
            pool, tenants, operator_namespace=operator_namespace, ipam=ipam, yaml=not as_json
        )
    if as_json:
        print_json(found)
    else:
        typer.echo(str(found), nl=False)


@nodes_app.command("list")
@handles_errors
def nodes_list(
    model: Annotated[str | None, typer.Option("--model", help="GPU model.")] = None,
    cordoned: Annotated[bool | None, typer.Option("--cordoned/--schedulable")] = None,
    pool: Annotated[str | None, typer.Option("--pool")] = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Nodes, optionally by GPU model, pool or cordon state."""
    with connect() as client:
        page = fetch(
            lambda n, a: client.list_nodes(n, a, model=model, cordoned=cordoned, pool=pool),
            limit,
            after,
            follow,
        )
    show_page(page, NODE_COLUMNS, as_json)


@nodes_app.command("get")
@handles_errors
def nodes_get(name: str, as_json: JsonOption = False) -> None:
    """One node: its GPUs, its NICs (with the GPUs each is aligned with) and what is allocated."""
    with connect() as client:
        node = client.get_node(name)
    if as_json:
        print_json(node)
        return
    nics = node.pop("nics", None) if isinstance(node, dict) else None
    show_object(node)
    if nics:
        show_table(nics, NIC_COLUMNS, title="NICs")


@nodes_app.command("register")
@handles_errors
def nodes_register(file: FileArgument, as_json: JsonOption = False) -> None:
    """Register nodes from any fleet file `gpuaas fleet show` reads: an inventory, `kubectl get
    nodes -o yaml|json` output, the trace's CSV node list, or one inventory entry. The server
    reads the file (so the CLI, the SDK and `serve --fleet` accept the same), all or nothing."""
    text = read_text(file)
    with connect() as client:
        result = client.register_nodes({"content": text, "source": file.name})
    created: list[Any] = result if isinstance(result, list) else [result]
    if as_json:
        print_json(created)
    else:
        show_table(created, NODE_COLUMNS, title=f"{len(created)} nodes registered")


APPLIED_COLUMNS: list[Column] = [("NODE", field("node")), ("RESULT", field("result"))]


def kubernetes_fleet(
    file: Path | None,
    kubeconfig: str | None,
    context: str | None,
    selector: str | None,
    topology: list[str],
) -> dict[str, Any]:
    """The cluster's GPU nodes (a ``kubectl get nodes`` file, or live with the official client)
    as a gpuaas Fleet document, read by the supply plane's Kubernetes loader; problems are
    UsageErrors naming the file, node and field."""
    from gpuaas.model.errors import GpuaasError
    from gpuaas.supply.loaders._yaml import parse_json, parse_yaml
    from gpuaas.supply.loaders.entries import nodes_entries
    from gpuaas.supply.loaders.errors import FleetFileError
    from gpuaas.supply.loaders.inventory import API_VERSION, KIND
    from gpuaas.supply.loaders.kubernetes import nodes_from_document, topology_labels
    from gpuaas.supply.loaders.kubernetes_api import GPU_NODE_SELECTOR, api_client, list_gpu_nodes

    if (file is None) == (kubeconfig is None):
        raise UsageError(
            "--from kubernetes reads a FILE (kubectl get nodes -o yaml) or a "
            "cluster (--kubeconfig K [--context C]): give exactly one"
        )
    configured: dict[str, str] = {}
    for item in topology:
        level, sep, label = (part.strip() for part in item.partition("="))
        if not sep or not level or not label:
            raise UsageError(
                f"--topology-label {item!r}: expected LEVEL=LABEL (rack=example.com/rack)"
            )
        configured[level] = label
    try:
        if file is not None:
            source = str(file)
            text = read_text(file)
            document = (
                parse_json(text, source) if file.suffix == ".json" else parse_yaml(text, source)
            )
        else:
            source = f"{kubeconfig}" + (f" (context {context})" if context else "")
            client = api_client(str(kubeconfig), context)
            document = list_gpu_nodes(client, GPU_NODE_SELECTOR if selector is None else selector)
            if not document["items"]:
                raise UsageError(
                    f"{source}: no nodes match the selector {selector or GPU_NODE_SELECTOR!r}"
                )
        fleet = nodes_from_document(document, source, topology_labels(configured))
        entries = nodes_entries(fleet.nodes, source)
    except FleetFileError as exc:
        raise UsageError(str(exc)) from None
    except GpuaasError as exc:
        raise UsageError(str(exc)) from None
    return {"apiVersion": API_VERSION, "kind": KIND, "nodes": entries}


def slurm_fleet(
    slurmrestd: str | None, socket: str | None, partition: list[str] | None, gpu_model: str | None
) -> dict[str, Any]:
    """A Slurm cluster's nodes as a gpuaas Fleet document: typed GPUs mapped to the catalogue,
    CPUs, memory, partitions as labels, label gpuaas.io/backend=slurm. Asks slurmrestd
    (--socket or --slurmrestd) or, with neither, `sinfo --json` (GPUAAS_SLURM_CONF)."""
    import os

    from gpuaas.backends.base import BackendUnavailable
    from gpuaas.backends.slurm.cli import SlurmCli
    from gpuaas.backends.slurm.errors import SlurmRefused
    from gpuaas.backends.slurm.inventory import fleet_document, inventory_entries
    from gpuaas.backends.slurm.rest import SlurmRest
    from gpuaas.model.errors import GpuaasError

    try:
        if socket or slurmrestd:
            rest = SlurmRest(socket, slurmrestd, os.environ.get("GPUAAS_SLURM_USER"),
                             os.environ.get("GPUAAS_SLURM_TOKEN"))  # fmt: skip
            try:
                listing = rest.nodes()
            finally:
                rest.close()
        else:
            listing = SlurmCli(os.environ.get("GPUAAS_SLURM_CONF")).nodes()
        entries = inventory_entries(listing, partition, gpu_model)
    except (BackendUnavailable, SlurmRefused) as exc:
        raise UsageError(f"cannot read Slurm's nodes: {exc}") from None
    except GpuaasError as exc:
        raise UsageError(str(exc)) from None
    if not entries:
        raise UsageError("Slurm listed no nodes" + (" in those partitions" if partition else ""))
    return fleet_document(entries)


#: Where ``nodes import`` reads nodes from.
IMPORT_SOURCES = ("slurm", "kubernetes")


@nodes_app.command("import")
@handles_errors
def nodes_import(
    source: Annotated[
        str, typer.Option("--from", help="Where the nodes come from: slurm or kubernetes.")
    ],
    file: Annotated[
        Path | None,
        typer.Argument(help="kubernetes: kubectl get nodes -o yaml|json output ('-': stdin)."),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option("--kubeconfig", help="kubernetes: read the nodes live from this cluster."),
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubernetes: the kubeconfig context.")
    ] = None,
    selector: Annotated[
        str | None,
        typer.Option(
            "--selector",
            "-l",
            help="kubernetes: label selector of the GPU nodes (default "
            "nvidia.com/gpu.present=true; '' = all).",
        ),
    ] = None,
    topology: Annotated[
        list[str] | None,
        typer.Option(
            "--topology-label",
            help="kubernetes: LEVEL=LABEL, the cluster's own label for zone, block, rack or "
            "nvlink (repeatable; e.g. rack=example.com/rack).",
        ),
    ] = None,
    slurmrestd: Annotated[
        str | None,
        typer.Option(
            "--slurmrestd",
            help="slurm: slurmrestd's URL (JWT from GPUAAS_SLURM_USER and GPUAAS_SLURM_TOKEN).",
        ),
    ] = None,
    socket: Annotated[
        str | None, typer.Option("--socket", help="slurm: slurmrestd's unix socket.")
    ] = None,
    partition: Annotated[
        list[str] | None,
        typer.Option("--partition", help="slurm: only nodes of these partitions."),
    ] = None,
    gpu_model: Annotated[
        str | None,
        typer.Option("--gpu-model", help="slurm: the model of untyped GPUs (gres gpu:N)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the inventory; register nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Register a Slurm or Kubernetes cluster's GPU nodes, or update the ones registered
    before, in place (a repeated import changes only what changed)."""
    if source == "slurm":
        fleet = slurm_fleet(slurmrestd, socket, partition, gpu_model)
    elif source == "kubernetes":
        fleet = kubernetes_fleet(file, kubeconfig, context, selector, topology or [])
    else:
        raise UsageError(f"--from {source!r}: unknown source (known: {', '.join(IMPORT_SOURCES)})")
    if dry_run:
        print_json(fleet) if as_json else typer.echo(yaml.safe_dump(fleet, sort_keys=False))
        return
    with connect() as client:
        result = client.apply_nodes(fleet)
    if as_json:
        print_json(result)
        return
    rows = [
        {"node": name, "result": outcome}
        for outcome in ("created", "updated", "unchanged")
        for name in (result.get(outcome) or [] if isinstance(result, dict) else [])
    ]
    counts = ", ".join(
        f"{len(result.get(k) or [])} {k}" for k in ("created", "updated", "unchanged")
    )
    show_table(rows, APPLIED_COLUMNS, title=f"{source} nodes imported: {counts}")


def _node_action(action: str, past: str) -> Callable[[str, bool], None]:
    @handles_errors
    def run(name: str, as_json: JsonOption = False) -> None:
        with connect() as client:
            node = getattr(client, f"{action}_node")(name)
        show_done(node, as_json, f"node {name} {past}")

    run.__doc__ = {
        "cordon": "Stop placing new work on a node; running jobs stay.",
        "uncordon": "Let the scheduler place work on a node again.",
        "drain": "Cordon a node and requeue the jobs running there.",
    }[action]
    return run


nodes_app.command("cordon")(_node_action("cordon", "cordoned"))
nodes_app.command("uncordon")(_node_action("uncordon", "uncordoned"))
nodes_app.command("drain")(_node_action("drain", "draining"))


def _yaml_value(text: str, option: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{option} {text!r}: not valid YAML: {exc}") from None


@nodes_app.command("partition")
@handles_errors
def nodes_partition(
    name: str,
    partitioning: Annotated[
        str | None,
        typer.Option(
            "--partitioning",
            "-p",
            help="How every GPU is offered: whole, a MIG layout such as all-1g.10gb, or YAML "
            "such as '{mig: {3g.40gb: 2}}' or '{timeSlicing: {replicas: 4}}'.",
        ),
    ] = None,
    per_gpu: Annotated[
        str | None,
        typer.Option(
            "--per-gpu",
            help="YAML list of exceptions: '[{indices: 1, partitioning: {mig: {7g.80gb: 1}}}]'.",
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="YAML {partitioning, perGpu} ('-' for stdin)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Change how a node's GPUs are offered (refused while jobs hold devices on it)."""
    body: dict[str, Any] = {}
    if file is not None:
        docs = read_documents(file)
        if len(docs) != 1:
            raise UsageError(f"{file}: give one document {{partitioning, perGpu}}")
        body.update(docs[0])
    if partitioning is not None:
        body["partitioning"] = _yaml_value(partitioning, "--partitioning")
    if per_gpu is not None:
        body["perGpu"] = _yaml_value(per_gpu, "--per-gpu")
    if not body:
        raise UsageError("give --partitioning, --per-gpu or -f FILE")
    with connect() as client:
        node = client.partition_node(name, body)
    if as_json:
        print_json(node)
        return
    gpus = (node.get("gpus") or []) if isinstance(node, dict) else []
    show_table(gpus, GPU_COLUMNS, title=f"node {name} repartitioned")


@nodes_app.command("delete")
@handles_errors
def nodes_delete(name: str, as_json: JsonOption = False) -> None:
    """Remove a node (refused while jobs use it)."""
    with connect() as client:
        client.delete_node(name)
    show_done({"deleted": name}, as_json, f"node {name} deleted")
