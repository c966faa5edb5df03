"""The server collects cyclic garbage less often than CPython's defaults once it has started,
and never lowers thresholds someone set higher."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuaas.service import collector
from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings


@pytest.fixture
def defaults() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_a_started_server_collects_less_often(defaults: None, tmp_path: Path) -> None:
    settings = Settings(db_url=None, data_dir=tmp_path, reconcile=False)
    with TestClient(create_app(settings)):
        assert gc.get_threshold() == collector.THRESHOLDS
        assert gc.get_freeze_count() > 0  # this process's first start, or an earlier one


def test_only_the_first_start_freezes(defaults: None) -> None:
    collector.tune()
    frozen = gc.get_freeze_count()
    garbage = [[] for _ in range(1000)]
    collector.tune()
    assert gc.get_freeze_count() == frozen  # what came later stays in the collector's view
    del garbage


def test_higher_thresholds_are_kept(defaults: None) -> None:
    gc.set_threshold(100_000, 50, 50)
    collector.tune()
    assert gc.get_threshold() == (100_000, 50, 50)
