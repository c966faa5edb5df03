"""`gpuaas datasets preload` and `gpuaas datasets warm` against the real app in process (the five
verbs are tested with every kind in test_client_kinds_cli.py)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from test_client_cli import ADMIN, URL, failed, gpuaas, ok_json
from test_client_cli import http as served  # noqa: F401  (the API in process, as a fixture)

from gpuaas.client import Client
from kind_samples import TENANT, build_world


@pytest.fixture
def http(served: TestClient) -> TestClient:  # noqa: F811
    admin = Client.from_httpx(served, ADMIN)
    build_world(admin)
    admin.register_nodes(
        {
            "name": "gpu-1",
            "cpu": "64",
            "memory": "512Gi",
            "gpus": {"model": "H100-80GB", "count": 8},
        }
    )
    assert gpuaas("login", URL, ADMIN).exit_code == 0
    return served


def test_preload_then_warm_shows_each_nodes_cache(http: TestClient) -> None:
    made = ok_json("datasets", "create", "corpus", "--uri", "/data/corpus", "--size", "2Gi",
                   "--tenant", TENANT)  # fmt: skip
    assert made["scheme"] == "file" and made["size"] == 2 << 30
    out = ok_json("datasets", "preload", "corpus", "--node", "gpu-1", "--tenant", TENANT)
    assert [(c["node"], c["state"]) for c in out["caches"]] == [("gpu-1", "loading")]
    caches = ok_json("datasets", "warm", "corpus", "--tenant", TENANT)
    assert caches[0]["node"] == "gpu-1" and caches[0]["source"] == "preload"
    table = gpuaas("datasets", "warm", "corpus", "--tenant", TENANT)
    assert table.exit_code == 0 and "gpu-1" in table.stdout and "loading" in table.stdout
    assert "no node named 'nope'" in failed(
        "datasets", "preload", "corpus", "--node", "nope", "--tenant", TENANT
    )
    assert "unknown scheme 'ftp'" in failed(
        "datasets", "create", "x", "--uri", "ftp://h/x", "--tenant", TENANT
    )
