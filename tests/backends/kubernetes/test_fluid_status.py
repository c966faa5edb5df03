"""The kubernetes backend's Fluid half through the official client, against the fake API
server below its transport: a preload applies the Dataset, runtime and a DataLoad pinned to
the nodes asked, and the warm report reads the status a Fluid controller would write (set
here by hand: no Fluid runs in these tests, see docs/kubernetes.md)."""

from __future__ import annotations

import pytest
from fake_apiserver import FakeApiServer, status

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.kubernetes.backend import PRELOAD_AT, KubernetesBackend, PreloadRefused
from gpuaas.backends.kubernetes.fluid_status import cache_label, cached_percent, fluid_state
from gpuaas.model.dataset import CacheRuntime, Dataset

NS = "gpuaas-acme"
IMAGENET = Dataset(name="imagenet", tenant="acme", uri="s3://data/imagenet",
                   size_bytes=2**30, runtime=CacheRuntime.ALLUXIO)  # fmt: skip
FLUID = "/apis/data.fluid.io/v1alpha1/namespaces/gpuaas-acme/"


def _posts(server: FakeApiServer) -> list[str]:
    return [path for method, path, _ in server.requests if method == "POST"]


def _hosts(obj: dict, *path: str) -> list[str]:
    for key in path:
        obj = obj[key]
    return obj["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]


def _bound(server: FakeApiServer, cached: str = "0.0%") -> None:
    server.set_status("imagenet", {"phase": "Bound", "cacheStates": {
        "cached": "0B", "cacheCapacity": "2GiB", "cachedPercentage": cached},
        "hcfs": {"endpoint": "alluxio://imagenet-master-0.gpuaas-acme:19998"}},
        plural="datasets")  # fmt: skip


def test_a_preload_applies_dataset_runtime_and_a_pinned_dataload() -> None:
    server = FakeApiServer()
    backend = KubernetesBackend(server.client())
    backend.preload_dataset(IMAGENET, ["gpu-2", "gpu-1"], 100.0)
    assert _posts(server) == [FLUID + "datasets", FLUID + "alluxioruntimes", FLUID + "dataloads"]
    _, load = server.find("imagenet-preload", "dataloads")
    assert load["metadata"]["annotations"] == {PRELOAD_AT: "100.0"}
    affinity = load["spec"]["affinity"]["nodeAffinity"]
    assert _hosts(affinity, "requiredDuringSchedulingIgnoredDuringExecution") == ["gpu-1", "gpu-2"]
    _, dataset = server.find("imagenet", "datasets")
    assert _hosts(dataset["spec"]["nodeAffinity"], "required") == ["gpu-1", "gpu-2"]
    assert server.find("imagenet", "alluxioruntimes")[1]["spec"]["replicas"] == 2
    # the same preload again (a retried step): nothing new is made
    backend.preload_dataset(IMAGENET, ["gpu-1", "gpu-2"], 100.0)
    assert len(_posts(server)) == 3
    # a later preload on another node: the dataset and runtime widen, the DataLoad is redone
    backend.preload_dataset(IMAGENET, ["gpu-3"], 200.0)
    _, dataset = server.find("imagenet", "datasets")
    assert _hosts(dataset["spec"]["nodeAffinity"], "required") == ["gpu-1", "gpu-2", "gpu-3"]
    assert server.find("imagenet", "alluxioruntimes")[1]["spec"]["replicas"] == 3
    _, load = server.find("imagenet-preload", "dataloads")
    assert load["metadata"]["annotations"] == {PRELOAD_AT: "200.0"}
    assert any(m == "DELETE" and p.endswith("dataloads/imagenet-preload")
               for m, p, _ in server.requests)  # fmt: skip


def test_warm_where_fluid_labels_its_workers_once_the_data_is_loaded() -> None:
    server = FakeApiServer()
    backend = KubernetesBackend(server.client())
    assert backend.fluid_state(IMAGENET).exists is False  # never applied: nothing is warm
    backend.preload_dataset(IMAGENET, ["gpu-1", "gpu-2"], 100.0)
    label = cache_label(NS, "imagenet")
    server.add_node("gpu-1", {label: "true"})
    server.add_node("gpu-2", {label: "true"})
    server.add_node("gpu-3", {"fluid.io/s-gpuaas-acme-other": "true"})
    state = backend.fluid_state(IMAGENET, 100.0)
    assert state.exists and not state.bound and state.warm == frozenset()
    _bound(server)
    server.set_status("imagenet-preload", {"phase": "Executing"}, plural="dataloads")
    state = backend.fluid_state(IMAGENET, 100.0)
    assert state.bound and state.workers == {"gpu-1", "gpu-2"} and state.warm == frozenset()
    server.set_status("imagenet-preload", {"phase": "Complete"}, plural="dataloads")
    state = backend.fluid_state(IMAGENET, 100.0)
    assert state.load == "Complete" and state.warm == {"gpu-1", "gpu-2"}
    # a DataLoad made for another preload says nothing of this one
    assert backend.fluid_state(IMAGENET, 300.0).load == ""
    # the nodes asked for come from the API server's label selector, not a client-side filter
    lists = [p for m, p, _ in server.requests if m == "GET" and p.startswith("/api/v1/nodes")]
    assert lists and "labelSelector=fluid.io/s-gpuaas-acme-imagenet%3Dtrue" in lists[-1]


def test_the_runtimes_cache_affinity_names_the_label() -> None:
    """Fluid may spell the label otherwise (a long name is shortened): its own affinity wins."""
    server = FakeApiServer()
    backend = KubernetesBackend(server.client())
    backend.preload_dataset(IMAGENET, ["gpu-1"], 1.0)
    term = {"matchExpressions": [{"key": "fluid.io/s-h4sh3d", "operator": "In",
                                  "values": ["true"]}]}  # fmt: skip
    server.set_status("imagenet", {"cacheAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}},
        plural="alluxioruntimes")  # fmt: skip
    server.add_node("gpu-1", {"fluid.io/s-h4sh3d": "true"})
    server.add_node("gpu-2", {cache_label(NS, "imagenet"): "true"})
    _bound(server, cached="100.0%")  # no DataLoad result needed: all of it is cached
    assert backend.fluid_state(IMAGENET).warm == {"gpu-1"}


def test_a_failed_dataload_carries_fluids_reason() -> None:
    server = FakeApiServer()
    backend = KubernetesBackend(server.client())
    backend.preload_dataset(IMAGENET, ["gpu-1"], 1.0)
    server.add_node("gpu-1", {cache_label(NS, "imagenet"): "true"})
    _bound(server)
    failed = {"type": "Failed", "status": "True", "reason": "DataLoadJobFailed",
              "message": "[Calculated] s3 access denied"}  # fmt: skip
    server.set_status("imagenet-preload", {"phase": "Failed", "conditions": [failed]},
                      plural="dataloads")  # fmt: skip
    state = backend.fluid_state(IMAGENET, 1.0)
    assert state.load == "Failed" and state.warm == frozenset()
    assert state.reason == "DataLoadJobFailed: [Calculated] s3 access denied"


def test_a_thin_dataset_is_never_warm() -> None:
    dataset = {"status": {"phase": "Bound", "cacheStates": {"cachedPercentage": "100%"}}}
    nodes = [{"metadata": {"name": "n", "labels": {"l": "true"}}}]
    assert fluid_state(dataset, None, nodes, "l").warm == {"n"}
    assert fluid_state(dataset, None, nodes, "l", thin=True).warm == frozenset()
    assert cached_percent({"status": {"cacheStates": {"cachedPercentage": "n/a"}}}) == 0.0


def test_fluid_not_installed_or_invalid_refuses_the_preload_unreachable_is_retried() -> None:
    server = FakeApiServer()
    backend = KubernetesBackend(server.client())
    server.fail("POST", "/datasets", status(404, "NotFound", "the server could not find"))
    with pytest.raises(PreloadRefused, match="is Fluid installed"):
        backend.preload_dataset(IMAGENET, ["gpu-1"], 1.0)
    server.fail("POST", "/alluxioruntimes", status(422, "Invalid", "spec.replicas: Invalid"))
    with pytest.raises(PreloadRefused, match=r"refused AlluxioRuntime imagenet: spec\.replicas"):
        backend.preload_dataset(IMAGENET, ["gpu-1"], 1.0)
    server.fail("GET", "/datasets/", status(503, "ServiceUnavailable", "etcd down"))
    with pytest.raises(BackendUnavailable, match="etcd down"):
        backend.fluid_state(IMAGENET)
