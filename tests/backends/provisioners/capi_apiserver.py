"""The Kubernetes backend's fake API server (tests/backends/kubernetes/fake_apiserver.py, below
the official client's transport) with what the Cluster API provisioner also sends: PATCH
(server-side apply creates or updates; a JSON merge patch updates, ``null`` removes a key),
``labelSelector`` on lists (``k=v`` and ``k``, ANDed), and an object that outlives its DELETE
for a number of reads (a Cluster whose machines Cluster API is still deprovisioning). Like the
original it is no API server: no managed fields, no admission, no controllers."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kubernetes"))

from fake_apiserver import FakeApiServer, _matches, _merge, _response, status

__all__ = ["CapiApiServer", "status"]


def collection_of(path: str) -> tuple[str, str, str | None]:
    """(collection, namespace, name) of a REST path, as the fake server keys objects."""
    parts = path.strip("/").split("/")
    base = parts[:3] if parts[0] == "apis" else parts[:2]
    rest = parts[len(base) :]
    namespace = ""
    if rest and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    return "/" + "/".join([*base, rest[0]]), namespace, (rest[1] if len(rest) > 1 else None)


class CapiApiServer(FakeApiServer):
    def __init__(self) -> None:
        super().__init__()
        self.linger: dict[str, int] = {}  # name -> reads it survives after its DELETE
        self.content_types: list[str] = []  # of each PATCH

    def put(self, collection: str, namespace: str, obj: dict[str, Any]) -> None:
        obj.setdefault("metadata", {})["namespace"] = namespace
        self._bump(obj)
        self.objects[(collection, namespace, obj["metadata"]["name"])] = obj

    def request(self, method: str, url: str, body: Any = None, **kw: Any) -> Any:
        parsed = urlparse(url)
        query = parse_qs(parsed.query)
        collection, namespace, name = collection_of(parsed.path)
        key = (collection, namespace, name or "")
        if method == "PATCH":
            data = json.loads(body)
            target = parsed.path + ("?" + parsed.query if parsed.query else "")
            content_type = (kw.get("headers") or {}).get("Content-Type", "")
            self.requests.append((method, target, copy.deepcopy(data)))
            self.content_types.append(content_type)
            for i, (m, part, answer) in enumerate(self.failures):
                if m == method and part in parsed.path:
                    del self.failures[i]
                    if isinstance(answer, BaseException):
                        raise answer
                    return _response(answer["code"], answer, answer["reason"])
            obj = self.objects.get(key)
            if obj is None:
                if "apply-patch" not in content_type:
                    return _response(
                        404, status(404, "NotFound", f'"{name}" not found'), "Not Found"
                    )
                obj = self.objects[key] = {"metadata": {"name": name, "namespace": namespace}}
            _merge(obj, data)
            self._bump(obj)
            return _response(200, obj)
        if method == "DELETE" and self.linger.get(name or "", 0) > 0 and key in self.objects:
            self.requests.append((method, parsed.path, json.loads(body) if body else None))
            self.objects[key]["metadata"]["deletionTimestamp"] = "2026-11-25T20:00:00Z"
            return _response(200, self.objects[key])
        if (
            method == "GET"
            and name
            and "deletionTimestamp" in self.objects.get(key, {}).get("metadata", {})
        ):
            if self.linger.get(name, 0) > 0:
                self.linger[name] -= 1
            else:  # Cluster API has finished: the object is gone
                del self.objects[key]
        answer = super().request(method, url, body=body, **kw)
        selector = query.get("labelSelector", [""])[0]
        if method == "GET" and name is None and selector:
            listed = json.loads(answer.data)
            listed["items"] = [
                o for o in listed["items"] if _matches(o["metadata"].get("labels") or {}, selector)
            ]
            return _response(200, listed)
        return answer
