"""RDMA / SR-IOV networks on Kubernetes: what a pod asks for, and what the provider installs.

Pods. A pod set with ``network`` (job spec ``podSets[].network``) gets, per pod, ``count`` VFs
(or one per GPU with ``perGpu``) of its pool as an extended resource, requests and limits alike
(``nvidia.com/rdma_ib: 8``), and the Multus annotation ``k8s.v1.cni.cncf.io/networks`` naming
the NetworkAttachmentDefinition once per VF (each attachment is one interface, ``net1`` ..
``netN``, on one VF). The attachment is the pod set's ``attachment`` (``name`` or
``namespace/name``), else the default :func:`attachment_name`: ``<namespace>-<pool name>``
(``gpuaas-acme-rdma-ib`` for ``nvidia.com/rdma_ib`` in ``gpuaas-acme``), which is what the
SR-IOV objects below create in the tenant's namespace. A pod set that names no pool takes the
one NIC pool of its resolved requests, else the pool of the NICs gpuaas placed it on (which
needs the fleet's ``nodes``); failing both it cannot be rendered.

Provider objects (:func:`network_objects`, ``gpuaas network manifest --pool P``): for the nodes
offering pool ``P``,

* a ``SriovNetworkNodePolicy`` ``gpuaas-<pool name>`` in the operator's namespace: the PFs by
  PCI address (``nicSelector.rootDevices``, from the NICs' ``pciAddress``), ``numVfs`` (the
  most VFs a NIC of the pool has), ``isRdma``, ``linkType`` ``ib`` or ``eth``, the resource
  name without its prefix (the operator's ``resourcePrefix`` adds it), and a ``nodeSelector``:
  the labels every node of the pool shares that no other node of the fleet has all of (else
  the pool is refused: label its nodes, e.g. ``gpuaas.io/pool``);
* per tenant namespace, a ``SriovIBNetwork`` (InfiniBand) or ``SriovNetwork`` (RoCE, Ethernet)
  named :func:`attachment_name` in the operator's namespace, whose ``networkNamespace`` is the
  tenant's: the operator renders the NetworkAttachmentDefinition there, under that name;
* for a shared RDMA device pool (``rdma/<pool>``, which no SR-IOV policy makes), the
  NetworkAttachmentDefinition itself per tenant namespace, a ``macvlan`` (RoCE, Ethernet) or
  ``ipoib`` (InfiniBand) interface on the NIC, carrying the pool as its
  ``k8s.v1.cni.cncf.io/resourceName``.

IPAM is the cluster's business: ``ipam`` (a CNI IPAM JSON object, e.g. whereabouts with a
range) is passed through when given, left out otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpuaas.model.errors import InvalidValue
from gpuaas.model.network import LinkType, Nic
from gpuaas.model.node import Node
from gpuaas.model.placement import PodPlacement
from gpuaas.supply.loaders.kubernetes_nics import is_nic_pool
from gpuaas.supply.nics import pool_problem, pools_of

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RESOURCE_NAME_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
SRIOV_API = "sriovnetwork.openshift.io/v1"
NAD_API = "k8s.cni.cncf.io/v1"
#: The upstream operator's namespace (OpenShift's is ``openshift-sriov-network-operator``).
OPERATOR_NAMESPACE = "sriov-network-operator"
MANAGED_BY = "app.kubernetes.io/managed-by"
#: Labels that never tell a pool's nodes apart (they are per node or everywhere).
_NOT_SELECTORS = ("kubernetes.io/hostname", "gpuaas.io/source-gpu-model")
#: NFD labels that speak of the NICs: an InfiniBand or Mellanox PCI device, SR-IOV, RDMA.
_NIC_FEATURE = re.compile(r"pci-0207|15b3|sriov|rdma")


def _dns(value: str) -> str:
    from gpuaas.backends.kubernetes.manifests import dns_label

    return dns_label(value)


def pool_short_name(pool: str) -> str:
    """``nvidia.com/rdma_ib`` -> ``rdma_ib``: the device plugin's resource name, unprefixed."""
    return pool.partition("/")[2]


def attachment_name(pool: str, namespace: str) -> str:
    """The default NetworkAttachmentDefinition of ``pool`` in ``namespace`` (module docstring)."""
    return _dns(f"{namespace}-{pool_short_name(pool)}")


# --- pods ---------------------------------------------------------------------------------


def pod_set_network(spec: Mapping[str, Any], pod_set: str) -> tuple[str, Mapping[str, Any]]:
    """The ``network`` of pod set ``pod_set`` in the job spec as submitted, with its field
    path, or ``("", {})``."""
    for number, ps in enumerate(spec.get("podSets") or []):
        if isinstance(ps, Mapping) and ps.get("name") == pod_set and ps.get("network"):
            return f"podSets[{number}].network", ps["network"]
    return "", {}


def _placed_pool(
    where: str,
    pods: Sequence[PodPlacement],
    nodes: Mapping[str, Node] | None,
    requests: Mapping[str, int],
) -> str:
    """The pool of a pod set that named none: the one NIC pool among its resolved requests
    (if the resolution put it there), else that of the NICs it was placed on."""
    asked = [r for r in requests if is_nic_pool(r)]
    if len(asked) == 1:
        return asked[0]
    pools: set[str] = set()
    for pod in pods:
        node = (nodes or {}).get(pod.node)
        for ref in pod.nics:
            nic = next(
                (n for n in (node.nics if node else []) if ref.name.split("-vf-")[0] == n.name),
                None,
            )
            if nic is not None:
                pools.add(nic.pool)
    if len(pools) == 1:
        return pools.pop()
    raise InvalidValue(
        f"{where}.pool",
        "no pool named and none known from the placement: a Kubernetes pod asks for its VFs "
        "by the pool's resource name"
        + (f" (placed on several: {', '.join(sorted(pools))})" if pools else ""),
    )


def pod_network(
    network: Mapping[str, Any],
    where: str,
    gpus_per_pod: int,
    namespace: str,
    pods: Sequence[PodPlacement] = (),
    nodes: Mapping[str, Node] | None = None,
    requests: Mapping[str, int] | None = None,
) -> tuple[dict[str, int], dict[str, str]]:
    """(extended resources, pod annotations) of one pod of a pod set with ``network``;
    ``requests``: the pod's resolved requests."""
    pool = str(network.get("pool") or "") or _placed_pool(where, pods, nodes, requests or {})
    problem = pool_problem(pool)
    if problem:
        raise InvalidValue(f"{where}.pool", problem)
    count = gpus_per_pod if network.get("perGpu") else int(network.get("count") or 0)
    if count <= 0:
        raise InvalidValue(
            f"{where}.perGpu", "one VF per GPU, but the pod set asks for no whole GPU"
        )
    attachment = str(network.get("attachment") or "") or attachment_name(pool, namespace)
    return {pool: count}, {NETWORKS_ANNOTATION: ",".join([attachment] * count)}


# --- provider objects ---------------------------------------------------------------------


def _node_selector(pool: str, offering: list[Node], fleet: Sequence[Node]) -> dict[str, str]:
    """The fewest labels, shared by every node offering ``pool``, that no other node of the
    fleet has all of: greedily the label that leaves out the most remaining other nodes,
    ``gpuaas.io/`` labels first on a tie; where all nodes offer the pool, one label they share
    (``gpuaas.io/pool``, NFD's SR-IOV label, else the first)."""
    shared = dict(offering[0].labels)
    for node in offering[1:]:
        shared = {k: v for k, v in shared.items() if node.labels.get(k) == v}
    for key in _NOT_SELECTORS:
        shared.pop(key, None)
    names = {node.name for node in offering}
    strays = [node for node in fleet if node.name not in names]
    chosen: dict[str, str] = {}
    ranked = sorted(shared, key=lambda k: (_selector_rank(k), k))
    while strays or not chosen:
        best = max(
            ranked,
            key=lambda k: sum(1 for n in strays if n.labels.get(k) != shared[k]),
            default=None,
        )
        left_out = [n for n in strays if best is not None and n.labels.get(best) != shared[best]]
        if best is None or (strays and not left_out):
            others = ", ".join(n.name for n in strays[:3])
            raise InvalidValue(
                "pool",
                f"the {len(offering)} node(s) offering {pool} share no labels that set them "
                f"apart" + (f" from {others}" if others else "") + "; label them (e.g. "
                "gpuaas.io/pool) so a SriovNetworkNodePolicy can select them",
            )
        chosen[best] = shared[best]
        ranked.remove(best)
        strays = [n for n in strays if n not in left_out]
    return dict(sorted(chosen.items()))


def _selector_rank(key: str) -> int:
    """Which labels a policy had better select on: gpuaas's pool, NFD's NIC labels, gpuaas's,
    topology, anything else."""
    if key == "gpuaas.io/pool":
        return 0
    if key.startswith("feature.node.kubernetes.io/") and _NIC_FEATURE.search(key):
        return 1
    if key.startswith("gpuaas.io/"):
        return 2
    return 3 if key.startswith("topology.") else 4


def _labels() -> dict[str, str]:
    return {MANAGED_BY: "gpuaas"}


def _policy(pool: str, nics: list[tuple[Node, Nic]], selector: dict[str, str], operator: str):
    missing = [(node.name, nic.name) for node, nic in nics if not nic.pci_address]
    if missing:
        node, nic = missing[0]
        raise InvalidValue(
            "nics.pciAddress",
            f"NIC {nic} of node {node} (pool {pool}) has no pciAddress: the "
            "SriovNetworkNodePolicy selects its PFs by PCI address",
        )
    first = nics[0][1]
    return {
        "apiVersion": SRIOV_API,
        "kind": "SriovNetworkNodePolicy",
        "metadata": {
            "name": _dns(f"gpuaas-{pool_short_name(pool)}"),
            "namespace": operator,
            "labels": _labels(),
        },
        "spec": {
            "resourceName": pool_short_name(pool),
            "nodeSelector": selector,
            "numVfs": max(nic.vfs for _, nic in nics),
            "nicSelector": {"rootDevices": sorted({nic.pci_address for _, nic in nics})},
            "deviceType": "netdevice",
            "isRdma": any(nic.rdma for _, nic in nics),
            "linkType": "ib" if first.link is LinkType.INFINIBAND else "eth",
        },
    }


def _network(pool: str, link: LinkType, namespace: str, operator: str, ipam: str | None):
    spec: dict[str, Any] = {"resourceName": pool_short_name(pool), "networkNamespace": namespace}
    if ipam:
        spec["ipam"] = ipam
    if link is not LinkType.INFINIBAND:
        spec["linkState"] = "auto"
    return {
        "apiVersion": SRIOV_API,
        "kind": "SriovIBNetwork" if link is LinkType.INFINIBAND else "SriovNetwork",
        "metadata": {
            "name": attachment_name(pool, namespace),
            "namespace": operator,
            "labels": _labels(),
        },
        "spec": spec,
    }


def _shared_attachment(pool: str, nic: Nic, namespace: str, ipam: str | None):
    """A NetworkAttachmentDefinition for a shared RDMA device (``rdma/<pool>``)."""
    config: dict[str, Any] = {"cniVersion": "0.3.1", "name": attachment_name(pool, namespace)}
    if nic.link is LinkType.INFINIBAND:
        config.update(type="ipoib", master=nic.name)
    else:
        config.update(type="macvlan", master=nic.name, mode="bridge")
    if ipam:
        config["ipam"] = json.loads(ipam)
    return {
        "apiVersion": NAD_API,
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": attachment_name(pool, namespace),
            "namespace": namespace,
            "labels": _labels(),
            "annotations": {RESOURCE_NAME_ANNOTATION: pool},
        },
        "spec": {"config": json.dumps(config, separators=(",", ":"), sort_keys=True)},
    }


def network_objects(
    pool: str,
    fleet: Sequence[Node],
    namespaces: Sequence[str],
    *,
    operator_namespace: str = OPERATOR_NAMESPACE,
    ipam: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The objects that make ``pool`` usable from pods of ``namespaces`` (module docstring);
    InvalidValue names what is missing (an unknown pool, a PF without PCI address, nodes no
    label sets apart)."""
    problem = pool_problem(pool)
    if problem:
        raise InvalidValue("pool", problem)
    offering = pools_of(list(fleet)).get(pool)
    if not offering:
        known = ", ".join(sorted(pools_of(list(fleet)))) or "none"
        raise InvalidValue("pool", f"no node offers NIC pool {pool} (pools: {known})")
    if not namespaces:
        raise InvalidValue("namespace", "name at least one tenant namespace the pool serves")
    nics = [(node, nic) for node in offering for nic in node.nics if nic.pool == pool]
    ipam_text = json.dumps(dict(ipam), separators=(",", ":"), sort_keys=True) if ipam else None
    namespaces = list(dict.fromkeys(namespaces))
    first = nics[0][1]
    if pool.startswith("rdma/"):
        return [_shared_attachment(pool, first, ns, ipam_text) for ns in namespaces]
    selector = _node_selector(pool, offering, fleet)
    out = [_policy(pool, nics, selector, operator_namespace)]
    out.extend(_network(pool, first.link, ns, operator_namespace, ipam_text) for ns in namespaces)
    return out
