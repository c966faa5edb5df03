"""A stand-in for a Kubernetes API server *below* the official client: it replaces the client's
urllib3 pool manager, so every request goes through the real ``kubernetes.client`` (models,
JSON serialisation, URL building, ``ApiException`` from the response, the watch decoder) and
answers as the API server does: 201 with the stored object and a resourceVersion, 409
AlreadyExists / 404 NotFound / 422 Invalid / 403 Forbidden as ``Status`` objects, lists with a
list resourceVersion, watch streams of JSON lines (and an ``ERROR`` 410 Gone when told the
watch expired). It is not an API server: no admission, defaulting, field validation or
controllers; tests set the status a controller would write with :meth:`set_status`.
"""

from __future__ import annotations

import copy
import json
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


class _Response:
    """What urllib3 hands the client: status, reason, headers, the body (``data``, or
    ``stream()`` for a watch)."""

    def __init__(self, code: int, data: bytes, reason: str) -> None:
        self.status, self.data, self.reason = code, data, reason
        self.headers = {"content-type": "application/json"}

    def stream(self, amt: int | None = None, decode_content: bool = True):
        if self.data:
            yield self.data

    def getheaders(self) -> dict[str, str]:
        return self.headers

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def _response(code: int, body: Any, reason: str = "") -> _Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return _Response(code, data, reason or "OK")


class FakeApiServer:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (collection, ns, name)
        self.version = 1000
        self.requests: list[tuple[str, str, Any]] = []
        self.failures: list[tuple[str, str, Any]] = []  # (method, path part, status dict | exc)
        self.pending: dict[str, list[dict[str, Any]]] = {}  # collection -> watch events
        self.expired: set[str] = set()

    def client(self) -> client.ApiClient:
        api = client.ApiClient(client.Configuration(host="https://k8s.test"))
        api.rest_client.pool_manager = self  # type: ignore[assignment]
        return api

    # --- test controls --------------------------------------------------------------------
    def fail(self, method: str, path_part: str, answer: Any) -> None:
        """The next ``method`` request whose path contains ``path_part`` gets ``answer`` (a
        Status dict, or an exception the transport raises)."""
        self.failures.append((method, path_part, answer))

    def find(self, name: str, plural: str = "") -> tuple[tuple[str, str, str], dict[str, Any]]:
        """The object called ``name`` (of the collection ending in ``/plural``, when two kinds
        share the name: a Fluid Dataset and its runtime)."""
        return next(
            (k, o)
            for k, o in self.objects.items()
            if k[2] == name and "pods" not in k[0] and (not plural or k[0].endswith("/" + plural))
        )

    def set_status(self, name: str, status_: dict[str, Any], plural: str = "") -> None:
        key, obj = self.find(name, plural)
        obj["status"] = status_
        self._bump(obj)
        self.pending.setdefault(key[0], []).append({"type": "MODIFIED", "object": obj})

    def remove(self, name: str) -> None:
        key, obj = self.find(name)
        del self.objects[key]
        self.pending.setdefault(key[0], []).append({"type": "DELETED", "object": obj})

    def add_node(self, name: str, labels: dict[str, str]) -> None:
        meta = {"name": name, "labels": labels}
        self.objects[("/api/v1/nodes", "", name)] = {"apiVersion": "v1", "kind": "Node",
                                                     "metadata": meta}  # fmt: skip

    def add_pod(self, namespace: str, name: str, labels: dict[str, str], exit_code: int) -> None:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "labels": labels},
               "status": {"containerStatuses": [{
                   "name": "main", "image": "x", "imageID": "", "ready": False,
                   "restartCount": 0,
                   "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}},
               }]}}  # fmt: skip
        self.objects[("/api/v1/pods", namespace, name)] = pod

    # --- the pool manager -------------------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def request(self, method: str, url: str, body: Any = None, **_: Any) -> _Response:
        parsed = urlparse(url)
        path, query = parsed.path, parse_qs(parsed.query)
        data = json.loads(body) if isinstance(body, str | bytes) and body else None
        target = parsed.path + ("?" + parsed.query if parsed.query else "")
        self.requests.append((method, target, copy.deepcopy(data)))
        for i, (m, part, answer) in enumerate(self.failures):
            if m == method and part in path:
                del self.failures[i]
                if isinstance(answer, BaseException):
                    raise answer
                return _response(answer["code"], answer, answer["reason"])
        parts = path.strip("/").split("/")
        # /apis/<g>/<v>[/namespaces/<ns>]/<plural>[/<name>] or /api/v1/...
        base = parts[:3] if parts[0] == "apis" else parts[:2]
        rest = parts[len(base) :]
        namespace = ""
        if rest and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        collection = "/" + "/".join([*base, rest[0]])
        name = rest[1] if len(rest) > 1 else None
        if method == "POST":
            meta = data["metadata"]
            key = (collection, namespace, meta["name"])
            if key in self.objects:
                message = f'{rest[0]} "{meta["name"]}" already exists'
                return _response(409, status(409, "AlreadyExists", message), "Conflict")
            self._bump(data)
            self.objects[key] = data
            self.pending.setdefault(collection, []).append({"type": "ADDED", "object": data})
            return _response(201, data, "Created")
        if method == "DELETE":
            obj = self.objects.pop((collection, namespace, name or ""), None)
            if obj is None:
                return _response(404, status(404, "NotFound", f'"{name}" not found'), "Not Found")
            self.pending.setdefault(collection, []).append({"type": "DELETED", "object": obj})
            return _response(200, obj)
        if method == "PATCH":  # a JSON merge patch
            obj = self.objects.get((collection, namespace, name or ""))
            if obj is None:
                return _response(404, status(404, "NotFound", f'"{name}" not found'), "Not Found")
            _merge(obj, data)
            self._bump(obj)
            self.pending.setdefault(collection, []).append({"type": "MODIFIED", "object": obj})
            return _response(200, obj)
        if name is not None:
            obj = self.objects.get((collection, namespace, name))
            if obj is None:
                return _response(404, status(404, "NotFound", f'"{name}" not found'), "Not Found")
            return _response(200, obj)
        if query.get("watch") == ["true"]:
            if collection in self.expired:
                self.expired.discard(collection)
                gone = {
                    "type": "ERROR",
                    "object": status(410, "Expired", "too old resource version"),
                }
                return _response(200, (json.dumps(gone) + "\n").encode())
            events = self.pending.pop(collection, [])
            return _response(200, "".join(json.dumps(e) + "\n" for e in events).encode())
        self.pending.pop(collection, None)
        selector = query.get("labelSelector", [""])[0]
        items = [o for (c, ns, _), o in self.objects.items()
                 if c == collection and (not namespace or ns == namespace)
                 and _matches(o["metadata"].get("labels") or {}, selector)]  # fmt: skip
        meta = {"resourceVersion": str(self.version)}
        return _response(
            200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items}
        )


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def _matches(labels: dict[str, str], selector: str) -> bool:
    """Whether ``labels`` satisfy an equality label selector (``k=v,k2``)."""
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True
