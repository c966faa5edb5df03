"""The idle pool's usage in ``/metrics`` (docs/billing.md): GPU-seconds sold from the
idle-capacity pool in the current billing period, by GPU model, shape and MIG profile,
computed from the usage records at scrape time (one aggregate query), so every replica
reports the same numbers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from gpuaas.billing.metering import period_of
from gpuaas.service.usage import pool_usage


class PoolUsageCollector(Collector):
    def __init__(self, session: Session, now: float | None = None) -> None:
        self.session = session
        self.now = time.time() if now is None else now

    def collect(self) -> Iterator[Any]:
        family = GaugeMetricFamily(
            "gpuaas_idle_pool_gpu_seconds",
            "GPU-seconds sold from the idle-capacity pool in the billing period (a MIG instance"
            " counts one unit of its profile, a shared replica its fraction of a GPU)",
            labels=["gpu_model", "shape", "profile", "period"],
        )
        for u in pool_usage(self.session, period_of(self.now)):
            family.add_metric([u.gpu_model, u.shape, u.profile, u.period], float(u.gpu_seconds))
        yield family
