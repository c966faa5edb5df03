"""The ``kubernetes`` provisioner: a tenant cluster as Cluster API objects on a management
cluster (what the objects are: ``capi_manifests.py``; for the provider: docs/cluster-api.md).

Without a kubeconfig the provisioner only builds the documents (``manifest()``, what
``gpuaas clusters manifest NAME`` prints, for the provider to apply) and ``apply()`` /
``delete()`` do nothing beyond checking the spec. With one, it drives the management cluster
through the official ``kubernetes`` client:

- **apply** (create and scale alike, always the whole desired state): check that the add-on
  ConfigMaps the ClusterResourceSet names exist; label the BareMetalHosts of the allocated
  nodes with the tenant, cluster and pool (the Metal3 host selectors match those labels;
  a host still labelled for another cluster is refused, never taken over); for a
  host the cluster no longer holds, mark the Machine on it with
  ``cluster.x-k8s.io/delete-machine`` (so the MachineSet removes *that* machine when its
  replicas go down, not one at random) and take the labels off the host; then server-side
  apply every document (``fieldManager=gpuaas``, ``force``: gpuaas owns the fields it writes;
  status and the fields controllers default stay theirs, so re-applying never fights Cluster
  API), and delete the MachineDeployment and templates of a pool the cluster no longer has.
  Server-side apply, not get+replace: one request per object whether or not it exists, no
  resourceVersion races with the controllers that update these objects all the time.
- **delete**: as the Cluster API book says, delete the ``Cluster`` (foreground) and let its
  controllers tear down machines, control plane and infrastructure in their order (deleting
  the objects one by one, infrastructure first, strands hosts); once the Cluster is gone,
  delete what it does not own (the ClusterResourceSet, templates left over) and take the
  labels off the hosts. While Cluster API still deprovisions the machines (minutes on bare
  metal), ``delete`` waits up to ``delete_wait`` seconds, then raises
  :class:`BackendUnavailable` so the service calls again later (every step is idempotent).

Failures: no answer, a timeout, 429 or 5xx -> BackendUnavailable (retry); any other refusal
(4xx: an invalid object, RBAC) -> :class:`ProvisionError` carrying the API server's message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.kubernetes.backend import api_message, connect
from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.backends.provisioners.capi_manifests import (
    ADDONS,
    BOOTSTRAP,
    CLUSTER_API,
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE,
    INFRASTRUCTURE,
    NODE_LABEL,
    POOL_LABEL,
    PROVIDERS,
    TENANT_LABEL,
    CapiOptions,
    addon_configmap,
    base_name,
    check,
    documents,
)
from gpuaas.model.cluster import ClusterKind, ClusterNodes, ClusterSpec
from gpuaas.model.node import Node

FIELD_MANAGER = "gpuaas"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
#: Put by CAPM3 on a Metal3Machine: the BareMetalHost (``namespace/name``) it consumes.
HOST_ANNOTATION = "metal3.io/BareMetalHost"
#: kind -> (group, version, plural) of every kind this provisioner writes or reads.
RESOURCES: dict[str, tuple[str, str, str]] = {
    "Cluster": (CLUSTER_API, "v1beta2", "clusters"),
    "MachineDeployment": (CLUSTER_API, "v1beta2", "machinedeployments"),
    "Machine": (CLUSTER_API, "v1beta2", "machines"),
    "Metal3Cluster": (INFRASTRUCTURE, "v1beta2", "metal3clusters"),
    "Metal3MachineTemplate": (INFRASTRUCTURE, "v1beta2", "metal3machinetemplates"),
    "Metal3Machine": (INFRASTRUCTURE, "v1beta2", "metal3machines"),
    "ClusterResourceSet": (ADDONS, "v1beta2", "clusterresourcesets"),
    "BareMetalHost": ("metal3.io", "v1alpha1", "baremetalhosts"),
    **{
        p.control_plane: (CONTROL_PLANE, p.control_plane_version, p.control_plane.lower() + "s")
        for p in PROVIDERS.values()
    },
    **{
        p.bootstrap_template: (BOOTSTRAP, p.bootstrap_version, p.bootstrap_template.lower() + "s")
        for p in PROVIDERS.values()
    },
}


class ClusterApiProvisioner:
    """Tenant Kubernetes clusters (``ClusterKind.KUBERNETES``) as Cluster API objects.

    ``kubeconfig``: the management cluster (None: documents only, see the module docstring);
    ``namespace``: where every cluster's objects, the add-on ConfigMaps and the
    BareMetalHosts live (CAPM3 takes hosts from its own namespace); the versions: what a
    cluster runs when its spec names none; ``scheduler``: ``kueue``, ``kai``, ``volcano``
    or empty, installed with the GPU operator; ``endpoint_domain``: API endpoints are
    ``<tenant>-<cluster>.<endpoint_domain>:6443`` (and the OpenShift base domain);
    ``delete_wait``: seconds ``delete`` waits for Cluster API to finish before asking to be
    called again. ``api_client`` (a ``kubernetes.client.ApiClient``) replaces the kubeconfig
    (tests).
    """

    kind = ClusterKind.KUBERNETES

    def __init__(
        self,
        kubeconfig: str | None = None,
        namespace: str = "gpuaas-clusters",
        *,
        context: str | None = None,
        kubernetes_version: str = "v1.34.2",
        rke2_version: str = "v1.34.2+rke2r1",
        openshift_version: str = "4.20.0",
        scheduler: str = "kueue",
        endpoint_domain: str = "clusters.gpuaas.internal",
        delete_wait: float = 30.0,
        poll_interval: float = 2.0,
        api_client: Any = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.options = CapiOptions(
            namespace=namespace,
            kubernetes_version=kubernetes_version,
            rke2_version=rke2_version,
            openshift_version=openshift_version,
            scheduler=scheduler,
            endpoint_domain=endpoint_domain,
        )
        self.kubeconfig, self.context = kubeconfig, context
        self.delete_wait, self.poll_interval = delete_wait, poll_interval
        self._api = api_client
        self._clock, self._sleep = clock, sleep

    @property
    def live(self) -> bool:
        """Whether apply/delete reach a management cluster (a kubeconfig or client is set)."""
        return self._api is not None or self.kubeconfig is not None

    # --- the protocol -----------------------------------------------------------------------
    def manifest(
        self, spec: ClusterSpec, nodes: ClusterNodes, hosts: Mapping[str, Node]
    ) -> Sequence[dict[str, Any]]:
        return documents(spec, nodes, self.options)

    def apply(self, spec: ClusterSpec, nodes: ClusterNodes, hosts: Mapping[str, Node]) -> None:
        docs = documents(spec, nodes, self.options)
        if not self.live:
            return
        ns = self.options.namespace
        for addon in self.options.addons:
            name = addon_configmap(addon)
            if self._get_configmap(name) is None:
                raise ProvisionError(
                    f"the add-on ConfigMap {ns}/{name} is missing: the provider keeps one per "
                    "add-on in the management namespace (docs/cluster-api.md)"
                )
        self._label_hosts(spec, nodes)
        for doc in docs:
            self._apply(doc)
        wanted = {d["metadata"]["name"] for d in docs if d["kind"] == "MachineDeployment"}
        bootstrap = PROVIDERS[spec.distribution].bootstrap_template  # type: ignore[index]
        for md in self._list("MachineDeployment", _owned(spec)):
            name = md["metadata"]["name"]
            if name not in wanted:  # a pool the cluster no longer has
                for kind in ("MachineDeployment", bootstrap, "Metal3MachineTemplate"):
                    self._delete(kind, name)

    def delete(self, spec: ClusterSpec) -> None:
        check(spec)
        if not self.live:
            return
        cluster = base_name(spec)
        self._delete("Cluster", cluster)
        deadline = self._clock() + self.delete_wait
        while self._get("Cluster", cluster) is not None:
            if self._clock() >= deadline:
                raise BackendUnavailable(
                    f"cluster-api: Cluster {self.options.namespace}/{cluster} is still being "
                    "deleted (its machines are deprovisioned first); call again later"
                )
            self._sleep(self.poll_interval)
        provider = PROVIDERS[spec.distribution]  # type: ignore[index]
        swept = (
            "ClusterResourceSet",
            "MachineDeployment",
            provider.control_plane,
            provider.bootstrap_template,
            "Metal3MachineTemplate",
            "Metal3Cluster",
        )
        for kind in swept:  # by label: a pool removed earlier included
            for obj in self._list(kind, _owned(spec)):
                self._delete(kind, obj["metadata"]["name"])
        for host in self._list_hosts(_owned(spec)):
            self._set_host_labels(
                host, {TENANT_LABEL: None, CLUSTER_NAME_LABEL: None, POOL_LABEL: None}
            )

    # --- hosts --------------------------------------------------------------------------------
    def _label_hosts(self, spec: ClusterSpec, nodes: ClusterNodes) -> None:
        """Label the allocated hosts, release the others (see the module docstring)."""
        by_node = {h["metadata"]["labels"][NODE_LABEL]: h for h in self._list_hosts(NODE_LABEL)}
        wanted: list[tuple[dict[str, Any], dict[str, str | None]]] = []
        for pool, names in sorted(nodes.pools.items()):  # check every host before changing one
            for node in names:
                host = by_node.get(node)
                if host is None:
                    raise ProvisionError(
                        f"no BareMetalHost labelled {NODE_LABEL}={node} in namespace "
                        f"{self.options.namespace}: the provider labels every enrolled host "
                        "with its fleet node name (docs/cluster-api.md)"
                    )
                labels = host["metadata"]["labels"]
                owner = (labels.get(TENANT_LABEL), labels.get(CLUSTER_NAME_LABEL))
                if owner[0] and owner != (spec.tenant, spec.name):
                    raise ProvisionError(
                        f"BareMetalHost {host['metadata']['name']} (node {node}) is still "
                        f"labelled for cluster {owner[0]}/{owner[1]}: a node is in one cluster"
                    )
                want = {TENANT_LABEL: spec.tenant, CLUSTER_NAME_LABEL: spec.name, POOL_LABEL: pool}
                wanted.append((host, dict(want)))
        for host, want in wanted:
            if any(host["metadata"]["labels"].get(k) != v for k, v in want.items()):
                self._set_host_labels(host, want)
        allocated = {host["metadata"]["name"] for host, _ in wanted}
        released = [
            h for h in self._list_hosts(_owned(spec)) if h["metadata"]["name"] not in allocated
        ]
        if not released:
            return
        machines = self._machines_on_hosts(spec)
        for host in released:
            machine = machines.get(host["metadata"]["name"])
            if machine is not None:
                self._patch(
                    "Machine", machine, {"metadata": {"annotations": {DELETE_MACHINE: "yes"}}}
                )
            self._set_host_labels(
                host, {TENANT_LABEL: None, CLUSTER_NAME_LABEL: None, POOL_LABEL: None}
            )

    def _machines_on_hosts(self, spec: ClusterSpec) -> dict[str, str]:
        """BareMetalHost name -> the Machine consuming it, from the Metal3Machines' host
        annotation and their owning Machine."""
        out: dict[str, str] = {}
        selector = f"cluster.x-k8s.io/cluster-name={base_name(spec)}"
        for m3m in self._list("Metal3Machine", selector):
            meta = m3m["metadata"]
            host = (meta.get("annotations") or {}).get(HOST_ANNOTATION, "")
            owner = next(
                (
                    o["name"]
                    for o in meta.get("ownerReferences") or []
                    if o.get("kind") == "Machine"
                ),
                None,
            )
            if host and owner:
                out[host.rpartition("/")[2]] = owner
        return out

    def _list_hosts(self, selector: str) -> list[dict[str, Any]]:
        return self._list("BareMetalHost", selector)

    def _set_host_labels(self, host: Mapping[str, Any], labels: dict[str, str | None]) -> None:
        patch = {"metadata": {"labels": labels}}
        name = host["metadata"]["name"]
        self._custom("patch", "BareMetalHost", name, patch, _content_type=MERGE_PATCH)

    # --- the client ---------------------------------------------------------------------------
    def api(self) -> Any:
        if self._api is None:
            try:
                self._api = connect(self.kubeconfig, self.context)
            except Exception as exc:  # kubeconfig missing or unreadable
                raise BackendUnavailable(f"cluster-api: no usable kubeconfig: {exc}") from None
        return self._api

    def _call(self, what: str, fn: Callable[[], Any], missing_ok: bool = False) -> Any:
        """``fn()``; unreachable -> BackendUnavailable, refused -> ProvisionError with the API
        server's message; 404 -> None where ``missing_ok``."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            return fn()
        except ApiException as exc:
            status = exc.status or 0
            if status == 404 and missing_ok:
                return None
            if status in (0, 429) or status >= 500:
                raise BackendUnavailable(f"cluster-api: {what}: {api_message(exc)}") from None
            raise ProvisionError(f"{what}: {api_message(exc)}") from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            raise BackendUnavailable(f"cluster-api: {what}: {exc}") from None

    def _custom(
        self,
        verb: str,
        kind: str,
        name: str = "",
        body: Any = None,
        missing_ok: bool = False,
        **kw: Any,
    ) -> Any:
        """One ``CustomObjectsApi`` call (``get``, ``list``, ``patch``, ``delete``) on ``kind``
        in the management namespace, through :meth:`_call`."""
        from kubernetes import client

        api = client.CustomObjectsApi(self.api())
        where = (*RESOURCES[kind][:2], self.options.namespace, RESOURCES[kind][2])
        calls: dict[str, Callable[[], Any]] = {
            "get": lambda: api.get_namespaced_custom_object(*where, name),
            "list": lambda: api.list_namespaced_custom_object(*where, **kw),
            "patch": lambda: api.patch_namespaced_custom_object(*where, name, body, **kw),
            "delete": lambda: api.delete_namespaced_custom_object(*where, name, **kw),
        }
        return self._call(f"{verb} {kind} {name}".rstrip(), calls[verb], missing_ok)

    def _apply(self, doc: Mapping[str, Any]) -> None:
        """Server-side apply: gpuaas owns the fields it writes (see the module docstring)."""
        self._custom(
            "patch",
            doc["kind"],
            doc["metadata"]["name"],
            dict(doc),
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY_PATCH,
        )

    def _patch(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        self._custom("patch", kind, name, patch, missing_ok=True, _content_type=MERGE_PATCH)

    def _get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._custom("get", kind, name, missing_ok=True)

    def _list(self, kind: str, selector: str) -> list[dict[str, Any]]:
        answer = self._custom("list", kind, missing_ok=True, label_selector=selector)
        return list((answer or {}).get("items", []))

    def _delete(self, kind: str, name: str) -> None:
        self._custom("delete", kind, name, missing_ok=True, propagation_policy="Foreground")

    def _get_configmap(self, name: str) -> Any:
        from kubernetes import client

        api = client.CoreV1Api(self.api())
        read = lambda: api.read_namespaced_config_map(name, self.options.namespace)  # noqa: E731
        return self._call(f"get ConfigMap {name}", read, missing_ok=True)


def _owned(spec: ClusterSpec) -> str:
    """The label selector of everything gpuaas made for ``spec``."""
    return f"{TENANT_LABEL}={spec.tenant},{CLUSTER_NAME_LABEL}={spec.name}"
