"""GPU nodes read live from a Kubernetes API server with the official ``kubernetes`` client.

``gpuaas nodes import --from kubernetes --kubeconfig K`` lists the cluster's nodes with
``CoreV1Api.list_node`` and a label selector (by default GPU feature discovery's
``nvidia.com/gpu.present=true``, so CPU-only nodes stay out), page by page (``limit`` and
``continue``, as kubectl pages), and turns the typed answer back into the Node objects
``kubectl get nodes -o json`` prints (``ApiClient.sanitize_for_serialization``). From there the
same loader reads them as it reads a file (:mod:`gpuaas.supply.loaders.kubernetes`), so a live
import and an import of a saved file register the same nodes.

Errors name what failed: a kubeconfig that cannot be read, a context it lacks, an API server
that refuses (its status and reason: 401, 403 for a user without ``list nodes``), one that
cannot be reached. Tests drive this through the official client's own request and model code
with a fake transport; it has not been run against a live API server here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuaas.model.errors import GpuaasError

GPU_NODE_SELECTOR = "nvidia.com/gpu.present=true"
PAGE_SIZE = 500


class ClusterError(GpuaasError):
    """The cluster could not be read (kubeconfig, context, API server)."""


def api_client(kubeconfig: str, context: str | None = None) -> Any:
    """An ApiClient for ``kubeconfig`` (and ``context``, else its current context)."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except ConfigException as exc:
        where = f"{kubeconfig}" + (f" (context {context})" if context else "")
        raise ClusterError(f"kubeconfig {where}: {exc}") from None
    except OSError as exc:
        raise ClusterError(f"kubeconfig {kubeconfig}: {exc.strerror or exc}") from None


def list_gpu_nodes(client: Any, selector: str | None = GPU_NODE_SELECTOR) -> dict[str, Any]:
    """Every node matching ``selector`` (None or "": all nodes) as a ``NodeList`` document."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    api = CoreV1Api(client)
    items: list[Mapping[str, Any]] = []
    token: str | None = None
    while True:
        try:
            page = api.list_node(label_selector=selector or None, limit=PAGE_SIZE, _continue=token)
        except ApiException as exc:
            raise ClusterError(_refusal(exc)) from None
        except HTTPError as exc:
            raise ClusterError(f"the API server cannot be reached: {exc}") from None
        except ValueError as exc:  # the client's models refuse the answer (pydantic)
            first = str(exc).splitlines()[:3]
            raise ClusterError(
                f"the API server's node list does not read: {' '.join(first)}"
            ) from None
        listed = client.sanitize_for_serialization(page)
        for item in listed.get("items") or []:
            items.append({"apiVersion": "v1", "kind": "Node", **item})
        token = (listed.get("metadata") or {}).get("continue")
        if not token:
            break
    return {"apiVersion": "v1", "kind": "NodeList", "items": items}


def _refusal(exc: Any) -> str:
    """An API server's refusal as one sentence: status, reason and its Status message."""
    import json

    message = ""
    try:
        body = json.loads(exc.body or "{}")
        message = str(body.get("message") or "")
    except (TypeError, ValueError):
        message = str(exc.body or "")
    text = f"the API server refused to list nodes: {exc.status} {exc.reason}"
    return f"{text}: {message}" if message else text
