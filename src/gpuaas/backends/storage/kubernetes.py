"""Kubernetes PersistentVolumeClaims (any storage class other than ``local`` and ``nfs``: the
name of a StorageClass of the cluster).

A volume is the claim ``<name>`` in the tenant's namespace (the Kubernetes backend's pattern,
default ``gpuaas-{tenant}``): ``spec.storageClassName`` the class, ``accessModes`` the volume's,
``resources.requests.storage`` its size in bytes, labelled as gpuaas's (tenant, volume, cluster).
The storage class's provisioner makes the PersistentVolume and enforces the size as its backend
does; growing a volume patches the request (the class must allow volume expansion, else the API
server refuses and the volume is ``Failed`` with its message).

With a client (a cluster configured), :meth:`PersistentVolumeClaims.provision` creates the claim
(an existing one of gpuaas's is adopted and its request raised), and its phase is the state:
``Bound`` -> ``Ready``, anything else ``Pending`` (a class with ``WaitForFirstConsumer`` binds
only when the first pod mounts it, so jobs may mount a pending claim). Without one the claim is
only rendered (its manifest is in the volume's ``details``); the volume stays ``Pending``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.kubernetes.manifests import MANAGED_BY, TENANT, dns_label, namespace_of
from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.model.volume import Realised, Volume, VolumeCode, VolumeReason, VolumeState

VOLUME_LABEL = "gpuaas.io/volume"


def claim_name(volume: Volume) -> str:
    return dns_label(volume.name)


def claim_manifest(volume: Volume, storage_class: str, namespace_pattern: str) -> dict[str, Any]:
    """The PersistentVolumeClaim of ``volume`` (core/v1)."""
    labels = {
        MANAGED_BY: "gpuaas",
        TENANT: dns_label(volume.tenant),
        VOLUME_LABEL: dns_label(volume.name),
    }
    if volume.cluster:
        labels[CLUSTER_LABEL] = dns_label(volume.cluster)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(volume),
            "namespace": namespace_of(volume.tenant, namespace_pattern),
            "labels": labels,
        },
        "spec": {
            "accessModes": [volume.access_mode.value],
            "storageClassName": storage_class,
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": str(volume.size_bytes)}},
        },
    }


class PersistentVolumeClaims:
    """See the module docstring. ``client``: builds a kubernetes ApiClient (None: render only)."""

    def __init__(
        self,
        storage_class: str,
        namespace_pattern: str = "gpuaas-{tenant}",
        client: Callable[[], Any] | None = None,
    ) -> None:
        self.storage_class = storage_class
        self.namespace_pattern = namespace_pattern
        self._client = client

    def manifest(self, volume: Volume) -> Sequence[dict[str, Any]]:
        return [claim_manifest(volume, self.storage_class, self.namespace_pattern)]

    def provision(self, volume: Volume) -> Realised:
        doc = claim_manifest(volume, self.storage_class, self.namespace_pattern)
        if self._client is None:
            return self._realised(volume, None, doc)
        api = self._core()
        meta = doc["metadata"]
        try:
            found = api.create_namespaced_persistent_volume_claim(meta["namespace"], doc)
        except Exception as exc:  # the client's ApiException, or a connection error
            status = getattr(exc, "status", None)
            if status == 409:
                found = self._adopt(api, volume, doc)
            elif status in (400, 403, 404, 422):
                raise ProvisionError(f"the API server refused the claim: {_message(exc)}") from None
            else:
                raise BackendUnavailable(f"kubernetes: {_message(exc)}") from None
        return self._realised(volume, _phase(found), doc)

    def observe(self, volume: Volume, realised: Realised) -> Realised:
        doc = claim_manifest(volume, self.storage_class, self.namespace_pattern)
        if self._client is None:
            return self._realised(volume, None, doc)
        meta = doc["metadata"]
        try:
            found = self._core().read_namespaced_persistent_volume_claim(
                meta["name"], meta["namespace"]
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return self.provision(volume)
            raise BackendUnavailable(f"kubernetes: {_message(exc)}") from None
        return self._realised(volume, _phase(found), doc)

    def usage(self, volume: Volume) -> int | None:
        return None  # the kubelet's volume stats, not the API, know it

    def delete(self, volume: Volume) -> None:
        if self._client is None:
            return
        meta = claim_manifest(volume, self.storage_class, self.namespace_pattern)["metadata"]
        try:
            self._core().delete_namespaced_persistent_volume_claim(meta["name"], meta["namespace"])
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise BackendUnavailable(f"kubernetes: {_message(exc)}") from None

    # --- details ------------------------------------------------------------------------------

    def _core(self) -> Any:
        from kubernetes import client

        assert self._client is not None
        return client.CoreV1Api(self._client())

    def _adopt(self, api: Any, volume: Volume, doc: dict[str, Any]) -> Any:
        meta = doc["metadata"]
        found = api.read_namespaced_persistent_volume_claim(meta["name"], meta["namespace"])
        labels = _get(found, "metadata", "labels") or {}
        if labels.get(MANAGED_BY) != "gpuaas" or labels.get(VOLUME_LABEL) != meta["name"]:
            raise ProvisionError(
                f"a PersistentVolumeClaim {meta['namespace']}/{meta['name']} exists that gpuaas "
                "did not make; it is left alone"
            )
        patch = {"spec": {"resources": doc["spec"]["resources"]}}
        try:
            return api.patch_namespaced_persistent_volume_claim(
                meta["name"], meta["namespace"], patch
            )
        except Exception as exc:
            raise ProvisionError(f"the API server refused the new size: {_message(exc)}") from None

    def _realised(self, volume: Volume, phase: str | None, doc: dict[str, Any]) -> Realised:
        meta = doc["metadata"]
        where = {"namespace": meta["namespace"], "claim": meta["name"]}
        details = {"kind": "PersistentVolumeClaim", **where, "manifest": doc}
        if phase is None:
            reason = VolumeReason(VolumeCode.CLAIM_RENDERED, where)
            return Realised(VolumeState.PENDING, reason, claim=meta["name"], details=details)
        if phase == "Bound":
            reason = VolumeReason(VolumeCode.CLAIM_BOUND, where)
            return Realised(VolumeState.READY, reason, claim=meta["name"], details=details)
        reason = VolumeReason(VolumeCode.CLAIM_PENDING, {**where, "phase": phase or "Pending"})
        return Realised(VolumeState.PENDING, reason, claim=meta["name"], details=details)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
    return obj


def _phase(found: Any) -> str:
    return str(_get(found, "status", "phase") or "Pending")


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    return str(body or getattr(exc, "reason", None) or exc)[:500]
