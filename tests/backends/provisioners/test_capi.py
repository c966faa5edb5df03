"""The Cluster API provisioner's apply / scale / delete through the official client, against
the Kubernetes backend's fake API server below the client's transport (capi_apiserver.py):
the requests it makes, in order. Not a live management cluster: what only one shows is in
docs/cluster-api.md."""

from __future__ import annotations

import copy
from urllib.parse import parse_qs, urlparse

import pytest
import urllib3
from capi_apiserver import CapiApiServer, status
from capi_cases import CREATED, SCALED, SHRUNK, check_golden, scaled, spec

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.backends.provisioners.capi import ClusterApiProvisioner
from gpuaas.model.cluster import ClusterNodes, Distribution

NS = "gpuaas-clusters"
CAPI = "/apis/cluster.x-k8s.io/v1beta2/namespaces/gpuaas-clusters"
BMHS = "/apis/metal3.io/v1alpha1/baremetalhosts"
M3M = "/apis/infrastructure.cluster.x-k8s.io/v1beta2/metal3machines"
MACHINES = "/apis/cluster.x-k8s.io/v1beta2/machines"
HOSTS = ("gpu-01", "gpu-02", "gpu-03", "gpu-07")


def _server(scheduler: str = "kueue") -> CapiApiServer:
    """A management cluster with the provider's part done: a BareMetalHost per fleet node
    (labelled ``gpuaas.io/node``) and the add-on ConfigMaps."""
    server = CapiApiServer()
    for node in HOSTS:
        server.put(
            BMHS,
            NS,
            {
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "BareMetalHost",
                "metadata": {"name": f"bmh-{node}", "labels": {"gpuaas.io/node": node}},
            },
        )
    for addon in ("gpu-operator", scheduler):
        server.put(
            "/api/v1/configmaps",
            NS,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"gpuaas-addon-{addon}"},
            },
        )
    return server


def _provisioner(server: CapiApiServer, **kw) -> ClusterApiProvisioner:
    clock = iter(float(t) for t in range(10_000))
    return ClusterApiProvisioner(
        api_client=server.client(), clock=lambda: next(clock), sleep=lambda _: None, **kw
    )


def _applied(server: CapiApiServer, since: int = 0) -> list[tuple[str, dict]]:
    """(path, body) of the server-side apply requests after request ``since``."""
    out = []
    content_types = iter(server.content_types)  # one per PATCH, in order
    for method, path, body in server.requests:
        if method == "PATCH" and "apply-patch" in next(content_types):
            out.append((path, body))
    return out[since:]


def _labels(server: CapiApiServer, node: str) -> dict:
    return server.objects[(BMHS, NS, f"bmh-{node}")]["metadata"]["labels"]


def _replicas(server: CapiApiServer) -> dict[str, int]:
    return {
        k[2]: o["spec"]["replicas"]
        for k, o in server.objects.items()
        if k[0].endswith("/machinedeployments")
    }


@pytest.mark.parametrize("distribution", list(Distribution))
def test_create_sends_every_document_by_server_side_apply(distribution: Distribution) -> None:
    server = _server()
    provisioner = _provisioner(server)
    provisioner.apply(spec(distribution), CREATED, {})
    expected = list(provisioner.manifest(spec(distribution), CREATED, {}))
    applied = _applied(server)
    assert [body for _, body in applied] == expected
    for path, body in applied:
        query = parse_qs(urlparse(path).query)
        assert query == {"fieldManager": ["gpuaas"], "force": ["true"]}
        assert urlparse(path).path.endswith("/" + body["metadata"]["name"])
    assert applied[-1][0].startswith(f"{CAPI}/clusters/acme-train?")
    for node, pool in (("gpu-01", "h100"), ("gpu-02", "h100"), ("gpu-07", "l40s")):
        assert _labels(server, node) == {
            "gpuaas.io/node": node,
            "gpuaas.io/tenant": "acme",
            "gpuaas.io/cluster": "train",
            "gpuaas.io/pool": pool,
        }
    assert _labels(server, "gpu-03") == {"gpuaas.io/node": "gpu-03"}  # not this cluster's
    # applying the same state again changes nothing but re-applies (idempotent, no labels)
    before = copy.deepcopy(server.objects)
    n = len(server.requests)
    provisioner.apply(spec(distribution), CREATED, {})
    assert not [r for r in server.requests[n:] if BMHS in r[1] and r[0] == "PATCH"]
    assert {k: o["spec"] for k, o in server.objects.items() if "spec" in o} == {
        k: o["spec"] for k, o in before.items() if "spec" in o
    }


@pytest.mark.parametrize("distribution", list(Distribution))
def test_scale_out_then_in_moves_replicas_and_releases_the_drained_host(
    distribution: Distribution,
) -> None:
    server = _server()
    provisioner = _provisioner(server)
    provisioner.apply(spec(distribution), CREATED, {})
    assert _replicas(server) == {"acme-train-h100": 2, "acme-train-l40s": 1}
    provisioner.apply(scaled(distribution), SCALED, {})
    assert _replicas(server) == {"acme-train-h100": 3, "acme-train-l40s": 1}
    control_plane = next(o for k, o in server.objects.items() if "controlplane" in k[0])
    assert control_plane["spec"]["replicas"] == 3
    assert _labels(server, "gpu-03")["gpuaas.io/pool"] == "h100"
    # Cluster API made machines; the one on gpu-02 is to leave (the service drained it)
    for node in ("gpu-01", "gpu-02", "gpu-03"):
        server.put(MACHINES, NS, {"metadata": {"name": f"machine-{node}"}})
        server.put(
            M3M,
            NS,
            {
                "metadata": {
                    "name": f"m3m-{node}",
                    "labels": {"cluster.x-k8s.io/cluster-name": "acme-train"},
                    "annotations": {"metal3.io/BareMetalHost": f"{NS}/bmh-{node}"},
                    "ownerReferences": [
                        {
                            "apiVersion": "cluster.x-k8s.io/v1beta2",
                            "kind": "Machine",
                            "name": f"machine-{node}",
                            "uid": "u",
                        }
                    ],
                }
            },
        )
    n = len(server.requests)
    provisioner.apply(scaled(distribution), SHRUNK, {})
    steps = [(m, urlparse(p).path, b) for m, p, b in server.requests[n:] if m == "PATCH"]
    mark = steps.index(
        (
            "PATCH",
            f"{CAPI}/machines/machine-gpu-02",
            {"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": "yes"}}},
        )
    )
    scale = next(
        i for i, s in enumerate(steps) if s[1] == f"{CAPI}/machinedeployments/acme-train-h100"
    )
    assert mark < scale, "the machine on the released host is marked before replicas drop"
    assert _replicas(server) == {"acme-train-h100": 2, "acme-train-l40s": 1}
    assert _labels(server, "gpu-02") == {"gpuaas.io/node": "gpu-02"}
    kept = server.objects[(MACHINES, NS, "machine-gpu-01")]["metadata"]
    assert "annotations" not in kept


def test_a_pool_dropped_deletes_its_machine_deployment_and_templates() -> None:
    server = _server()
    provisioner = _provisioner(server)
    provisioner.apply(spec(Distribution.UPSTREAM), CREATED, {})
    n = len(server.requests)
    provisioner.apply(spec(Distribution.UPSTREAM), ClusterNodes({"h100": ("gpu-01", "gpu-02")}), {})
    deletes = [urlparse(p).path for m, p, _ in server.requests[n:] if m == "DELETE"]
    assert deletes == [
        f"{CAPI}/machinedeployments/acme-train-l40s",
        "/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/gpuaas-clusters/kubeadmconfigtemplates/acme-train-l40s",
        "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/gpuaas-clusters/metal3machinetemplates/acme-train-l40s",
    ]
    assert _labels(server, "gpu-07") == {"gpuaas.io/node": "gpu-07"}
    assert _replicas(server) == {"acme-train-h100": 2}


@pytest.mark.parametrize("distribution", list(Distribution))
def test_delete_removes_the_cluster_first_then_what_it_does_not_own(
    distribution: Distribution,
) -> None:
    server = _server()
    provisioner = _provisioner(server)
    provisioner.apply(spec(distribution), CREATED, {})
    provisioner.apply(scaled(distribution), SCALED, {})
    n = len(server.requests)
    provisioner.delete(scaled(distribution))
    requests = [{"method": m, "path": p} for m, p, _ in server.requests[n:]]
    check_golden(f"{distribution.value}.delete", [requests])
    assert requests[0] == {
        "method": "DELETE",
        "path": f"{CAPI}/clusters/acme-train?propagationPolicy=Foreground",
    }
    left = [k for k, o in server.objects.items() if "/configmaps" not in k[0] and BMHS not in k[0]]
    assert left == []
    for node in HOSTS:
        assert _labels(server, node) == {"gpuaas.io/node": node}
    n = len(server.requests)
    provisioner.delete(scaled(distribution))  # already gone: no error
    assert all(m in ("DELETE", "GET") for m, _, _ in server.requests[n:])


def test_delete_waits_for_cluster_api_then_asks_to_be_called_again() -> None:
    server = _server()
    provisioner = _provisioner(server, delete_wait=5.0)
    provisioner.apply(spec(Distribution.UPSTREAM), CREATED, {})
    server.linger["acme-train"] = 100  # machines deprovisioning for a long time
    with pytest.raises(BackendUnavailable, match="still being deleted"):
        provisioner.delete(spec(Distribution.UPSTREAM))
    assert not [p for m, p, _ in server.requests if m == "DELETE" and "machinedeployments" in p]
    assert _labels(server, "gpu-01")["gpuaas.io/cluster"] == "train"  # hosts still in use
    server.linger["acme-train"] = 2  # now Cluster API finishes within the wait
    provisioner.delete(spec(Distribution.UPSTREAM))
    assert _labels(server, "gpu-01") == {"gpuaas.io/node": "gpu-01"}
    assert not [k for k in server.objects if "machinedeployments" in k[0]]


def test_refusals_carry_the_api_servers_message() -> None:
    server = _server()
    message = "admission webhook denied the request: spec.replicas: Invalid value: 2: must be odd"
    server.fail("PATCH", "kubeadmcontrolplanes", status(422, "Invalid", message))
    with pytest.raises(ProvisionError, match="must be odd") as caught:
        _provisioner(server).apply(spec(Distribution.UPSTREAM), CREATED, {})
    assert "KubeadmControlPlane acme-train" in str(caught.value)
    forbidden = _server()
    refusal = 'clusters.cluster.x-k8s.io "acme-train" is forbidden: User "gpuaas" cannot patch'
    forbidden.fail("PATCH", "clusters", status(403, "Forbidden", refusal))
    with pytest.raises(ProvisionError, match="forbidden"):
        _provisioner(forbidden).apply(spec(Distribution.UPSTREAM), CREATED, {})


def test_what_the_provider_must_supply_is_named() -> None:
    no_host = _server()
    del no_host.objects[(BMHS, NS, "bmh-gpu-07")]
    with pytest.raises(ProvisionError, match=r"no BareMetalHost labelled gpuaas\.io/node=gpu-07"):
        _provisioner(no_host).apply(spec(Distribution.UPSTREAM), CREATED, {})
    assert not [r for r in no_host.requests if r[0] == "PATCH" and "/clusters/" in r[1]]
    taken = _server()
    _labels(taken, "gpu-02").update({"gpuaas.io/tenant": "globex", "gpuaas.io/cluster": "infer"})
    with pytest.raises(ProvisionError, match="still labelled for cluster globex/infer"):
        _provisioner(taken).apply(spec(Distribution.UPSTREAM), CREATED, {})
    assert _labels(taken, "gpu-01") == {"gpuaas.io/node": "gpu-01"}  # nothing half-labelled
    no_addon = _server(scheduler="kueue")
    with pytest.raises(ProvisionError, match="gpuaas-addon-volcano is missing"):
        _provisioner(no_addon, scheduler="volcano").apply(spec(Distribution.UPSTREAM), CREATED, {})
    assert [r for r in no_addon.requests if r[0] == "PATCH"] == []  # nothing half-made


@pytest.mark.parametrize(
    "failure",
    [
        urllib3.exceptions.MaxRetryError(None, "/", "connection refused"),  # type: ignore[arg-type]
        status(503, "ServiceUnavailable", "etcd leader changed"),
        status(429, "TooManyRequests", "slow down"),
    ],
)
def test_an_unreachable_management_cluster_is_backend_unavailable(failure) -> None:
    server = _server()
    server.fail("PATCH", "metal3clusters", failure)
    with pytest.raises(BackendUnavailable):
        _provisioner(server).apply(spec(Distribution.RANCHER), CREATED, {})
    down = _server()
    down.fail("DELETE", "clusters", failure)
    with pytest.raises(BackendUnavailable):
        _provisioner(down).delete(spec(Distribution.RANCHER))


def test_without_a_kubeconfig_nothing_is_sent() -> None:
    provisioner = ClusterApiProvisioner()
    assert not provisioner.live
    provisioner.apply(spec(Distribution.OPENSHIFT), CREATED, {})  # checks the spec only
    provisioner.delete(spec(Distribution.OPENSHIFT))
    assert provisioner._api is None
    assert ClusterApiProvisioner(kubeconfig="/nonexistent/kubeconfig").live
    with pytest.raises(BackendUnavailable, match="kubeconfig"):
        ClusterApiProvisioner(kubeconfig="/nonexistent/kubeconfig").delete(
            spec(Distribution.OPENSHIFT)
        )
