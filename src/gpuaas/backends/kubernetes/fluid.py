"""A registered dataset as Fluid objects, and the volume a job mounts it through.

Fluid (CNCF) caches a dataset on the nodes that read it: a ``data.fluid.io/v1alpha1``
``Dataset`` says where the data lives (``spec.mounts[].mountPoint``), a runtime of the same name
runs the cache, and Fluid then creates a PersistentVolumeClaim named after the Dataset in its
namespace, which pods mount. :func:`dataset_objects` is the one entry point from a
:class:`~gpuaas.model.dataset.Dataset`:

* the ``Dataset``, named :func:`fluid_name` (the dataset's name as a DNS label) in the tenant's
  namespace; its mount point is the URI (``s3://``, ``hdfs://``; an NFS export or a local path
  becomes ``pvc://`` or ``local://`` as Fluid spells them: ``nfs://server/export`` is mounted
  through a PVC the provider made for it, named after the dataset, which Fluid reads with
  ``pvc://<name>``; a local path is ``local:///path``, present on every node);
* the runtime chosen by :class:`~gpuaas.model.dataset.CacheRuntime`: ``AlluxioRuntime``,
  ``JuiceFSRuntime``, ``JindoRuntime`` (each with one tiered-store level of ``cache_bytes``,
  default the dataset's size, in memory under ``/dev/shm``, one cache worker per node given,
  at least one) or ``ThinRuntime`` (a mount with no cache of its own, through a
  ``ThinRuntimeProfile`` the provider installs, named ``gpuaas-<scheme>``);
* with ``preload``, a ``DataLoad`` of the whole dataset (``/``, one replica), which, given
  ``nodes``, runs pinned to them (a required node affinity on ``kubernetes.io/hostname``), so
  the cache is warm where the jobs will run.

A job with ``dataset`` mounts the PVC (:func:`dataset_volume`) read-only at ``mountPath``,
default ``/datasets/<name>``. Credentials (an S3 key, a JuiceFS metadata URL) are the tenant's
secrets and are not in these objects: Fluid takes them from ``encryptOptions`` the provider adds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuaas.model.dataset import CacheRuntime, Dataset, DatasetScheme
from gpuaas.model.errors import InvalidValue
from gpuaas.model.resources import MEMORY, format_amount

FLUID_API = "data.fluid.io/v1alpha1"
RUNTIME_KINDS = {
    CacheRuntime.ALLUXIO: "AlluxioRuntime",
    CacheRuntime.JUICEFS: "JuiceFSRuntime",
    CacheRuntime.JINDO: "JindoRuntime",
    CacheRuntime.THIN: "ThinRuntime",
}
HOSTNAME = "kubernetes.io/hostname"
DATASET_ROOT = "/datasets"
VOLUME_PREFIX = "dataset-"
_CACHE_PATH = "/dev/shm"


def fluid_name(dataset: str) -> str:
    """The Fluid Dataset (and so PVC) name of a registered dataset."""
    from gpuaas.backends.kubernetes.manifests import dns_label

    return dns_label(dataset)


def mount_point(dataset: Dataset) -> str:
    """The dataset's URI as Fluid's ``mountPoint`` (see the module docstring)."""
    try:
        scheme = dataset.scheme
    except ValueError:
        head = dataset.uri.partition("://")[0]
        raise InvalidValue(
            "uri",
            f"unknown scheme {head!r} (known: {', '.join(s.value for s in DatasetScheme)})",
        ) from None
    if scheme is DatasetScheme.NFS:
        return f"pvc://{fluid_name(dataset.name)}"
    if scheme is DatasetScheme.FILE:
        path = dataset.uri.removeprefix("file://")
        return f"local://{path}"
    return dataset.uri


def _metadata(name: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def _tiered_store(dataset: Dataset) -> dict[str, Any]:
    quota = dataset.cache_bytes or dataset.size_bytes
    quota_text = format_amount(MEMORY, quota)
    return {"levels": [{"mediumtype": "MEM", "path": _CACHE_PATH, "quota": quota_text}]}


def _runtime(dataset: Dataset, name: str, namespace: str, labels, replicas: int):
    spec: dict[str, Any] = {"replicas": replicas}
    if dataset.runtime is CacheRuntime.THIN:
        spec = {"profileName": f"gpuaas-{dataset.scheme.value}", "replicas": replicas}
    else:
        spec["tieredstore"] = _tiered_store(dataset)
    return {
        "apiVersion": FLUID_API,
        "kind": RUNTIME_KINDS[dataset.runtime],
        "metadata": _metadata(name, namespace, labels),
        "spec": spec,
    }


def _mount(dataset: Dataset, name: str) -> dict[str, Any]:
    if dataset.runtime is CacheRuntime.JUICEFS:
        # JuiceFS mounts its own file system; the object store is its bucket option.
        mount: dict[str, Any] = {"name": name, "mountPoint": "juicefs:///"}
        if dataset.scheme is not DatasetScheme.FILE:
            mount["options"] = {"bucket": dataset.uri}
        return mount
    return {"name": name, "mountPoint": mount_point(dataset)}


def _pinned(nodes: Sequence[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": list(nodes)}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def dataset_objects(
    dataset: Dataset,
    namespace: str,
    *,
    preload: bool = True,
    nodes: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Fluid ``Dataset``, its runtime and (``preload``) a ``DataLoad`` for ``dataset`` in
    ``namespace``, the load pinned to ``nodes`` when given (module docstring). InvalidValue
    names the field of a dataset Fluid cannot express."""
    if dataset.size_bytes < 0 or dataset.cache_bytes < 0:
        raise InvalidValue("sizeBytes", "must not be negative")
    name = fluid_name(dataset.name)
    labels = {"app.kubernetes.io/managed-by": "gpuaas", **(labels or {})}
    nodes = sorted(dict.fromkeys(nodes))
    spec: dict[str, Any] = {"mounts": [_mount(dataset, name)], "accessModes": ["ReadOnlyMany"]}
    if nodes:
        term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": nodes}]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    out = [
        {
            "apiVersion": FLUID_API,
            "kind": "Dataset",
            "metadata": _metadata(name, namespace, labels),
            "spec": spec,
        },
        _runtime(dataset, name, namespace, labels, max(1, len(nodes))),
    ]
    if preload:
        load: dict[str, Any] = {
            "dataset": {"name": name, "namespace": namespace},
            "loadMetadata": True,
            "target": [{"path": "/", "replicas": 1}],
        }
        if nodes:
            load["affinity"] = _pinned(nodes)
        out.append(
            {
                "apiVersion": FLUID_API,
                "kind": "DataLoad",
                "metadata": _metadata(f"{name}-preload", namespace, labels),
                "spec": load,
            }
        )
    return out


def dataset_mount_path(ref: Mapping[str, Any]) -> str:
    """Where a job's ``dataset`` is mounted: its ``mountPath``, else ``/datasets/<name>``."""
    return str(ref.get("mountPath") or f"{DATASET_ROOT}/{ref['name']}")


def dataset_volume(
    ref: Mapping[str, Any], datasets: Mapping[str, Dataset] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod volume, container volume mount) of a job's ``dataset``: Fluid's PVC, read-only.

    ``datasets``: the tenant's registered datasets by name, when known; a name not among them
    is refused (``dataset.name``). None: not checked (the PVC is named after the dataset
    whatever it holds)."""
    name = str(ref.get("name") or "")
    if not name:
        raise InvalidValue("dataset.name", "is required")
    if datasets is not None and name not in datasets:
        raise InvalidValue("dataset.name", f"no dataset {name!r} is registered for the tenant")
    volume_name = VOLUME_PREFIX + fluid_name(name)
    volume_name = volume_name[:63].rstrip("-")
    volume = {
        "name": volume_name,
        "persistentVolumeClaim": {"claimName": fluid_name(name), "readOnly": True},
    }
    mount = {"name": volume_name, "mountPath": dataset_mount_path(ref), "readOnly": True}
    return volume, mount
