"""A tenant Kubernetes cluster as Cluster API objects on Metal3 bare-metal hosts.

What a cluster becomes (all in one management namespace, every object named
``<tenant>-<cluster>[-<pool>]`` and labelled with the tenant and the cluster):

- a ``Cluster`` (cluster.x-k8s.io/v1beta2) referring to its control plane and to a
  ``Metal3Cluster`` (the API endpoint ``<tenant>-<cluster>.<endpoint domain>:6443``, which the
  provider's DNS / load balancer points at the control-plane machines);
- the control plane of the distribution with ``spec.control_plane`` replicas:
  ``KubeadmControlPlane`` (upstream), ``RKE2ControlPlane`` (SUSE Rancher),
  ``OpenshiftAssistedControlPlane`` (Red Hat OpenShift), on a ``Metal3MachineTemplate`` of
  its own;
- per node pool a ``MachineDeployment`` with ``replicas`` = the pool's node count, its
  bootstrap template from the same provider (``KubeadmConfigTemplate``,
  ``RKE2ConfigTemplate``, ``OpenshiftAssistedConfigTemplate``) and a ``Metal3MachineTemplate``;
- the add-ons (the NVIDIA GPU operator and the chosen batch scheduler: Kueue, KAI or Volcano)
  as a ``ClusterResourceSet`` (addons.cluster.x-k8s.io/v1beta2) that Cluster API applies into
  the new cluster once its API answers, from ConfigMaps the provider keeps in the management
  namespace (one per add-on, ``gpuaas-addon-<name>``, holding the add-on's rendered manifests).

Pinning to the carved hosts. A ``Metal3MachineTemplate``'s ``hostSelector`` is part of the
machine template, and changing a MachineDeployment's template rolls every machine (on bare
metal: reprovisions every host), so the selector must not change when the cluster scales.
It therefore selects by *stable* labels, ``gpuaas.io/tenant``, ``gpuaas.io/cluster`` and
``gpuaas.io/pool``, and the provisioner puts these labels on exactly the BareMetalHosts the
allocation names (found by the label ``gpuaas.io/node: <fleet node name>``, which the provider
puts on each BareMetalHost when it enrols it) and takes them off the hosts it releases. The
hosts of each pool are also listed, for people, in the MachineDeployment's annotation
``gpuaas.io/hosts`` (metadata only: no rollout). Control-plane machines use the pool named
``control-plane`` when the allocation carves one; otherwise the provider's own control-plane
hosts, BareMetalHosts labelled ``gpuaas.io/role: control-plane`` (a BareMetalHost is consumed
by one machine at a time, so no two clusters share one).

Everything here is pure: documents in, documents out; ``capi.py`` sends them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuaas.model.cluster import ClusterKind, ClusterNodes, ClusterSpec, Distribution
from gpuaas.model.errors import InvalidValue

CLUSTER_API = "cluster.x-k8s.io"
CONTROL_PLANE = "controlplane.cluster.x-k8s.io"
BOOTSTRAP = "bootstrap.cluster.x-k8s.io"
INFRASTRUCTURE = "infrastructure.cluster.x-k8s.io"
ADDONS = "addons.cluster.x-k8s.io"

#: Labels: who owns an object / which hosts a pool's machines may take.
TENANT_LABEL = "gpuaas.io/tenant"
CLUSTER_NAME_LABEL = "gpuaas.io/cluster"
POOL_LABEL = "gpuaas.io/pool"
#: Put by the provider on every BareMetalHost: the fleet node it is.
NODE_LABEL = "gpuaas.io/node"
#: Put by the provider on the BareMetalHosts that may run control planes.
ROLE_LABEL = "gpuaas.io/role"
HOSTS_ANNOTATION = "gpuaas.io/hosts"
CAPI_CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
#: The pool name that carves control-plane hosts from the fleet.
CONTROL_PLANE_POOL = "control-plane"

#: Batch schedulers installed as an add-on beside the GPU operator.
SCHEDULERS = ("kueue", "kai", "volcano")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Provider:
    """One distribution's Cluster API providers: the control plane and bootstrap kinds and
    the versions of their APIs this module writes (the storage versions of the CRDs in
    ``../shared/schemas/cluster-api``)."""

    control_plane: str
    control_plane_version: str
    bootstrap_template: str
    bootstrap_version: str


PROVIDERS = {
    Distribution.UPSTREAM: Provider(
        "KubeadmControlPlane", "v1beta2", "KubeadmConfigTemplate", "v1beta2"
    ),
    Distribution.RANCHER: Provider("RKE2ControlPlane", "v1beta2", "RKE2ConfigTemplate", "v1beta2"),
    Distribution.OPENSHIFT: Provider(
        "OpenshiftAssistedControlPlane", "v1alpha3", "OpenshiftAssistedConfigTemplate", "v1alpha2"
    ),
}


@dataclass(frozen=True, slots=True)
class CapiOptions:
    """What the provider decides once for every tenant cluster (see docs/cluster-api.md).

    ``images`` maps a distribution to the OS image Metal3 writes to the hosts (url, checksum
    url); the kubeadm image must carry kubeadm/kubelet of ``kubernetes_version``, the RKE2
    one is any supported OS, the OpenShift one RHCOS matching ``openshift_version``.
    """

    namespace: str = "gpuaas-clusters"
    kubernetes_version: str = "v1.34.2"
    rke2_version: str = "v1.34.2+rke2r1"
    openshift_version: str = "4.20.0"
    scheduler: str = "kueue"
    endpoint_domain: str = "clusters.gpuaas.internal"
    pod_cidr: str = "192.168.0.0/16"
    service_cidr: str = "10.96.0.0/12"
    openshift_pull_secret: str = "gpuaas-openshift-pull-secret"
    images: Mapping[str, tuple[str, str]] = field(
        default_factory=lambda: {
            Distribution.UPSTREAM.value: (
                "http://images.gpuaas.internal/ubuntu-2404-kube-v1.34.2.qcow2",
                "http://images.gpuaas.internal/ubuntu-2404-kube-v1.34.2.qcow2.sha256sum",
            ),
            Distribution.RANCHER.value: (
                "http://images.gpuaas.internal/sles-16-rke2.qcow2",
                "http://images.gpuaas.internal/sles-16-rke2.qcow2.sha256sum",
            ),
            Distribution.OPENSHIFT.value: (
                "http://images.gpuaas.internal/rhcos-4.20-x86_64-openstack.qcow2",
                "http://images.gpuaas.internal/rhcos-4.20-x86_64-openstack.qcow2.sha256sum",
            ),
        }
    )

    def __post_init__(self) -> None:
        if self.scheduler and self.scheduler not in SCHEDULERS:
            raise InvalidValue(
                "scheduler", f"{self.scheduler!r} is not one of {', '.join(SCHEDULERS)} (or empty)"
            )

    @property
    def addons(self) -> tuple[str, ...]:
        """The add-ons every cluster gets, by name (each a provider ConfigMap)."""
        return ("gpu-operator", self.scheduler) if self.scheduler else ("gpu-operator",)


def addon_configmap(addon: str) -> str:
    return f"gpuaas-addon-{addon}"


def base_name(spec: ClusterSpec) -> str:
    """``<tenant>-<cluster>``: the Cluster's name, and the prefix of every other object's."""
    return f"{spec.tenant}-{spec.name}"


def check(spec: ClusterSpec, nodes: ClusterNodes | None = None) -> None:
    """Refuse, naming the field, what cannot become Cluster API objects: names that are not
    DNS labels (they become object names and label values; 48 characters leave room for the
    longest suffix, ``-control-plane``), a missing distribution, a
    control plane of other than an odd count (etcd needs a majority)."""
    if spec.kind is not ClusterKind.KUBERNETES:
        raise InvalidValue(
            "kind", f"the Cluster API provisioner makes kubernetes clusters, not {spec.kind}"
        )
    if spec.distribution is None:
        raise InvalidValue(
            "distribution", "a kubernetes cluster needs one of " + ", ".join(Distribution)
        )
    for what, value in (("tenant", spec.tenant), ("name", spec.name)):
        if not _DNS_LABEL.fullmatch(value):
            raise InvalidValue(
                what, f"{value!r} is not a DNS label (lower-case letters, digits, '-')"
            )
    if len(base_name(spec)) > 48:
        raise InvalidValue(
            "name", f"{base_name(spec)!r}: tenant and name together exceed 48 characters"
        )
    if spec.control_plane < 1 or spec.control_plane % 2 == 0:
        raise InvalidValue(
            "controlPlane", f"{spec.control_plane}: must be odd (1, 3, 5) for etcd quorum"
        )
    pools = [p.name for p in spec.pools] + list((nodes.pools if nodes else {}).keys())
    for pool in pools:  # object names <tenant>-<cluster>-<pool> are DNS labels too
        if not _DNS_LABEL.fullmatch(pool) or len(base_name(spec)) + 1 + len(pool) > 63:
            raise InvalidValue(
                "pools.name",
                f"{pool!r}: {base_name(spec)}-{pool} is not a DNS label (at most 63 characters)",
            )


def _ref(group: str, kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": group, "kind": kind, "name": name}


def _meta(spec: ClusterSpec, options: CapiOptions, name: str, **extra: Any) -> dict[str, Any]:
    labels = {
        CAPI_CLUSTER_LABEL: base_name(spec),
        TENANT_LABEL: spec.tenant,
        CLUSTER_NAME_LABEL: spec.name,
    }
    meta: dict[str, Any] = {"name": name, "namespace": options.namespace, "labels": labels}
    meta.update(extra)
    return meta


def _host_selector(spec: ClusterSpec, pool: str) -> dict[str, Any]:
    labels = {TENANT_LABEL: spec.tenant, CLUSTER_NAME_LABEL: spec.name, POOL_LABEL: pool}
    return {"matchLabels": labels}


def _machine_template(
    spec: ClusterSpec, options: CapiOptions, name: str, selector: dict[str, Any]
) -> dict[str, Any]:
    assert spec.distribution is not None
    url, checksum = options.images[spec.distribution.value]
    return {
        "apiVersion": f"{INFRASTRUCTURE}/v1beta2",
        "kind": "Metal3MachineTemplate",
        "metadata": _meta(spec, options, name),
        "spec": {
            "nodeReuse": False,
            "template": {
                "spec": {
                    "hostSelector": selector,
                    "automatedCleaningMode": "metadata",
                    "image": {
                        "url": url,
                        "checksum": checksum,
                        "checksumType": "sha256",
                        "diskFormat": "qcow2",
                    },
                }
            },
        },
    }


def version(spec: ClusterSpec, options: CapiOptions) -> str:
    """The version the control plane runs: the tenant's ``kubernetes_version`` where given,
    else the provider's default for the distribution."""
    if spec.distribution is Distribution.OPENSHIFT:
        return spec.kubernetes_version or options.openshift_version
    if spec.distribution is Distribution.RANCHER:
        return spec.kubernetes_version or options.rke2_version
    return spec.kubernetes_version or options.kubernetes_version


def _control_plane(spec: ClusterSpec, options: CapiOptions, template: str) -> dict[str, Any]:
    assert spec.distribution is not None
    provider = PROVIDERS[spec.distribution]
    name = base_name(spec)
    infra = _ref(INFRASTRUCTURE, "Metal3MachineTemplate", template)
    body: dict[str, Any]
    if spec.distribution is Distribution.UPSTREAM:
        body = {
            "replicas": spec.control_plane,
            "version": version(spec, options),
            "machineTemplate": {"spec": {"infrastructureRef": infra}},
            "kubeadmConfigSpec": {
                "initConfiguration": _control_plane_registration(),
                "joinConfiguration": _control_plane_registration(),
            },
        }
    elif spec.distribution is Distribution.RANCHER:
        body = {
            "replicas": spec.control_plane,
            "version": version(spec, options),
            "machineTemplate": {"spec": {"infrastructureRef": infra}},
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
            "serverConfig": {"cni": "calico"},
        }
    else:
        body = {
            "replicas": spec.control_plane,
            "distributionVersion": version(spec, options),
            "machineTemplate": {"infrastructureRef": infra},
            "config": {
                "baseDomain": options.endpoint_domain,
                "clusterName": name,
                "pullSecretRef": {"name": options.openshift_pull_secret},
            },
        }
        if spec.ssh_keys:
            body["config"]["sshAuthorizedKey"] = "\n".join(spec.ssh_keys)
    if spec.ssh_keys and spec.distribution is Distribution.UPSTREAM:
        body["kubeadmConfigSpec"]["users"] = [_admin_user(spec)]
    return {
        "apiVersion": f"{CONTROL_PLANE}/{provider.control_plane_version}",
        "kind": provider.control_plane,
        "metadata": _meta(spec, options, name),
        "spec": body,
    }


def _control_plane_registration() -> dict[str, Any]:
    """A fresh one each call: a list shared by two places would print as a YAML anchor."""
    labels = [{"name": "node-labels", "value": f"{POOL_LABEL}={CONTROL_PLANE_POOL}"}]
    return {"nodeRegistration": {"kubeletExtraArgs": labels}}


def _admin_user(spec: ClusterSpec) -> dict[str, Any]:
    """The tenant's SSH keys on its kubeadm nodes (user ``tenant``, passwordless sudo)."""
    return {
        "name": "tenant",
        "sshAuthorizedKeys": list(spec.ssh_keys),
        "sudo": "ALL=(ALL) NOPASSWD:ALL",
    }


def _bootstrap_template(
    spec: ClusterSpec, options: CapiOptions, name: str, pool: str
) -> dict[str, Any]:
    assert spec.distribution is not None
    provider = PROVIDERS[spec.distribution]
    node_label = f"{POOL_LABEL}={pool}"
    template: dict[str, Any]
    if spec.distribution is Distribution.UPSTREAM:
        registration = {"kubeletExtraArgs": [{"name": "node-labels", "value": node_label}]}
        template = {"spec": {"joinConfiguration": {"nodeRegistration": registration}}}
        if spec.ssh_keys:
            template["spec"]["users"] = [_admin_user(spec)]
    elif spec.distribution is Distribution.RANCHER:
        template = {"spec": {"agentConfig": {"nodeLabels": [node_label]}}}
    else:
        template = {
            "spec": {
                "nodeRegistration": {"kubeletExtraLabels": [node_label]},
                "pullSecretRef": {"name": options.openshift_pull_secret},
            }
        }
        if spec.ssh_keys:
            template["spec"]["sshAuthorizedKey"] = "\n".join(spec.ssh_keys)
    return {
        "apiVersion": f"{BOOTSTRAP}/{provider.bootstrap_version}",
        "kind": provider.bootstrap_template,
        "metadata": _meta(spec, options, name),
        "spec": {"template": template},
    }


def _machine_deployment(
    spec: ClusterSpec, options: CapiOptions, pool: str, hosts: tuple[str, ...]
) -> dict[str, Any]:
    assert spec.distribution is not None
    provider = PROVIDERS[spec.distribution]
    cluster = base_name(spec)
    name = f"{cluster}-{pool}"
    selector = {CAPI_CLUSTER_LABEL: cluster, DEPLOYMENT_LABEL: name}
    machine: dict[str, Any] = {
        "clusterName": cluster,
        "bootstrap": {"configRef": _ref(BOOTSTRAP, provider.bootstrap_template, name)},
        "infrastructureRef": _ref(INFRASTRUCTURE, "Metal3MachineTemplate", name),
    }
    if spec.distribution is not Distribution.OPENSHIFT:
        machine["version"] = version(spec, options)
    meta = _meta(spec, options, name, annotations={HOSTS_ANNOTATION: ",".join(hosts)})
    return {
        "apiVersion": f"{CLUSTER_API}/v1beta2",
        "kind": "MachineDeployment",
        "metadata": meta,
        "spec": {
            "clusterName": cluster,
            "replicas": len(hosts),
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": {**selector, POOL_LABEL: pool}}, "spec": machine},
        },
    }


def worker_pools(nodes: ClusterNodes) -> dict[str, tuple[str, ...]]:
    """The pools that become MachineDeployments (all but the control-plane pool)."""
    return {p: hosts for p, hosts in sorted(nodes.pools.items()) if p != CONTROL_PLANE_POOL}


def documents(spec: ClusterSpec, nodes: ClusterNodes, options: CapiOptions) -> list[dict[str, Any]]:
    """Every object of the cluster, in the order they are applied: templates and
    infrastructure first, the Cluster (which ties them together) last, so no controller
    sees a reference to an object that does not exist yet."""
    check(spec, nodes)
    assert spec.distribution is not None
    cluster = base_name(spec)
    provider = PROVIDERS[spec.distribution]
    cp_template = f"{cluster}-control-plane"
    if CONTROL_PLANE_POOL in nodes.pools:
        cp_selector = _host_selector(spec, CONTROL_PLANE_POOL)
        if len(nodes.pools[CONTROL_PLANE_POOL]) < spec.control_plane:
            raise InvalidValue(
                "controlPlane",
                f"{spec.control_plane} control-plane machines but the pool "
                f"{CONTROL_PLANE_POOL!r} holds {len(nodes.pools[CONTROL_PLANE_POOL])} hosts",
            )
    else:
        cp_selector = {"matchLabels": {ROLE_LABEL: "control-plane"}}
    out: list[dict[str, Any]] = [
        {
            "apiVersion": f"{INFRASTRUCTURE}/v1beta2",
            "kind": "Metal3Cluster",
            "metadata": _meta(spec, options, cluster),
            "spec": {
                "controlPlaneEndpoint": {
                    "host": f"{cluster}.{options.endpoint_domain}",
                    "port": 6443,
                },
                "cloudProviderEnabled": False,
            },
        },
        _machine_template(spec, options, cp_template, cp_selector),
        _control_plane(spec, options, cp_template),
    ]
    for pool, hosts in worker_pools(nodes).items():
        name = f"{cluster}-{pool}"
        out.append(_machine_template(spec, options, name, _host_selector(spec, pool)))
        out.append(_bootstrap_template(spec, options, name, pool))
        out.append(_machine_deployment(spec, options, pool, hosts))
    out.append(
        {
            "apiVersion": f"{ADDONS}/v1beta2",
            "kind": "ClusterResourceSet",
            "metadata": _meta(spec, options, f"{cluster}-addons"),
            "spec": {
                "clusterSelector": {
                    "matchLabels": {TENANT_LABEL: spec.tenant, CLUSTER_NAME_LABEL: spec.name}
                },
                "resources": [
                    {"kind": "ConfigMap", "name": addon_configmap(a)} for a in options.addons
                ],
                "strategy": "Reconcile",
            },
        }
    )
    cluster_spec: dict[str, Any] = {
        "clusterNetwork": {
            "pods": {"cidrBlocks": [options.pod_cidr]},
            "services": {"cidrBlocks": [options.service_cidr]},
        },
        "controlPlaneRef": _ref(CONTROL_PLANE, provider.control_plane, cluster),
        "infrastructureRef": _ref(INFRASTRUCTURE, "Metal3Cluster", cluster),
    }
    out.append(
        {
            "apiVersion": f"{CLUSTER_API}/v1beta2",
            "kind": "Cluster",
            "metadata": _meta(spec, options, cluster),
            "spec": cluster_spec,
        }
    )
    return out
