"""The official ``kubernetes`` client over a fake transport: its request, model and
serialisation code run as they would against an API server, the network does not. Shared by the
loader and CLI tests of ``gpuaas nodes import --from kubernetes``."""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes.client import ApiClient, Configuration


class FakeTransport:
    """Stands in for urllib3's pool manager under the client's REST layer: records each
    request and answers from a list of (status, body)."""

    def __init__(self, answers: list[tuple[int, dict[str, Any]]]) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, url: str, **_: Any) -> urllib3.HTTPResponse:
        self.requests.append((method, url))
        status, body = self.answers.pop(0)
        return urllib3.HTTPResponse(
            body=json.dumps(body).encode(),
            status=status,
            reason={200: "OK", 403: "Forbidden"}.get(status, ""),
            headers={"Content-Type": "application/json"},
            preload_content=False,
        )


def fake_client(transport: FakeTransport) -> ApiClient:
    client = ApiClient(Configuration(host="https://k8s.invalid"))
    client.rest_client.pool_manager = transport
    return client


def node_list(items: list[dict[str, Any]], token: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "NodeList",
        "metadata": {"resourceVersion": "48211", "continue": token},
        "items": items,
    }
