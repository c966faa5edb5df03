"""`PUT /v1/nodes`: register or replace, what a repeated `gpuaas nodes import` sends (SQLite and
PostgreSQL). New names are registered, changed ones replaced in place (cordon kept), equal ones
left alone; the fleet version moves once per changing request and the reconciler applies the
change to its engine without a rebuild."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from conftest import Api
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.tables import Meta

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kubectl-get-nodes-gpu-operator.yaml"


def fleet_version(api: Api) -> int:
    with api.client.app.state.db.session() as session:  # type: ignore[attr-defined]
        row = session.get(Meta, "fleet.version")
        return int(row.value) if row else 0


def nodes() -> dict[str, Any]:
    return yaml.safe_load(FIXTURE.read_text())


def fewer_replicas(document: dict[str, Any]) -> dict[str, Any]:
    """The time-sliced node reconfigured from 4 to 2 replicas per GPU."""
    changed = copy.deepcopy(document)
    item = next(i for i in changed["items"] if i["metadata"]["name"] == "l40s-ts-c01")
    item["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "2"
    item["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    return changed


def test_register_then_update_in_place(api: Api) -> None:
    version = fleet_version(api)
    first = api.put("/v1/nodes", json=nodes())
    assert first.status_code == 200, first.text
    assert sorted(first.json()["created"]) == [
        "a100-mig-b01",
        "hgx-h100-a01",
        "hgx-h100-a02",
        "l40s-mps-c02",
        "l40s-ts-c01",
    ]
    assert fleet_version(api) == version + 1
    assert api.post("/v1/nodes/l40s-ts-c01/cordon").status_code == 200
    version = fleet_version(api)

    again = api.put("/v1/nodes", json=nodes()).json()
    assert again["created"] == [] and again["updated"] == [] and len(again["unchanged"]) == 5
    assert fleet_version(api) == version  # nothing changed, nothing moved

    changed = api.put("/v1/nodes", json=fewer_replicas(nodes())).json()
    assert changed["updated"] == ["l40s-ts-c01"] and len(changed["unchanged"]) == 4
    assert fleet_version(api) == version + 1
    node = api.get("/v1/nodes/l40s-ts-c01").json()
    assert node["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["cordoned"] is True  # the operator's cordon outlives the import


def test_bad_node_changes_nothing(api: Api) -> None:
    api.put("/v1/nodes", json=nodes())
    bad = fewer_replicas(nodes())
    bad["items"][0]["status"]["allocatable"]["cpu"] = "lots"
    response = api.put("/v1/nodes", json=bad)
    assert response.status_code == 422 and "cpu" in response.text
    assert api.get("/v1/nodes/l40s-ts-c01").json()["allocatable"]["nvidia.com/gpu"] == "16"


def test_the_reconciler_applies_an_import_in_place(sqlite_api: Api, tmp_path: Path) -> None:
    api = sqlite_api
    api.put("/v1/nodes", json=nodes())
    db = api.client.app.state.db  # type: ignore[attr-defined]
    reconciler = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    try:
        reconciler.step(1000.0)
        engine = reconciler.engine
        assert engine is not None
        api.put("/v1/nodes", json=fewer_replicas(nodes()))
        reconciler.step(1001.0)
        assert reconciler.engine is engine  # a fleet diff, not a rebuild
        assert reconciler._versions is not None
        assert reconciler._versions[1] == str(fleet_version(api))
    finally:
        reconciler.stop()
