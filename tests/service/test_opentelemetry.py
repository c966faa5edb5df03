"""FastAPI's native OpenTelemetry is the operator's choice (``GPUAAS_OPENTELEMETRY``): off, a
configured tracer provider is never asked for a tracer; on, each request is traced with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace

from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings


class _CountingProvider(trace.TracerProvider):
    """A provider FastAPI takes as configured (not one of the API's deferred ones) that counts
    the tracers asked of it."""

    def __init__(self) -> None:
        self.asked = 0

    def get_tracer(self, *args: object, **kwargs: object) -> trace.Tracer:
        self.asked += 1
        return trace.NoOpTracer()


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[_CountingProvider]:
    counting = _CountingProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: counting)
    yield counting


@pytest.mark.parametrize("value, traced", [(None, False), ("0", False), ("1", True)])
def test_requests_are_traced_only_when_the_operator_asks(
    provider: _CountingProvider,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    value: str | None,
    traced: bool,
) -> None:
    if value is None:
        monkeypatch.delenv("GPUAAS_OPENTELEMETRY", raising=False)
    else:
        monkeypatch.setenv("GPUAAS_OPENTELEMETRY", value)
    settings = Settings(db_url=None, data_dir=tmp_path, reconcile=False)
    assert settings.opentelemetry is traced
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
    assert (provider.asked > 0) is traced
