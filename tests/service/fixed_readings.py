"""A small in-memory :class:`~gpuaas.model.telemetry.UtilisationReader` for tests: each node
reads the utilisation ``level`` names for it, a window of 30 samples ending now (a node not
named, or named with None: no telemetry)."""

from __future__ import annotations

import time

from gpuaas.model.telemetry import UtilSummary


class Readings:
    def __init__(self) -> None:
        self.level: dict[str, float | None] = {}

    def _of(self, node: str) -> UtilSummary | None:
        value = self.level.get(node)
        return None if value is None else UtilSummary(value, value, 30, 300.0, time.time())

    def device(self, node: str, device: str) -> UtilSummary | None:
        return self._of(node)

    def node(self, node: str) -> UtilSummary | None:
        return self._of(node)

    def job(self, job_id: int) -> UtilSummary | None:
        return None

    def cluster(self, key: str) -> UtilSummary | None:
        return None
