"""The service's Prometheus metrics, one registry per application (tests start many apps).

The reconciler counts admissions and observes admission wait times here; gauges that are facts
of the database (queue depth, jobs by state, GPUs allocated and available) are computed when
``/metrics`` is scraped.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

#: Admission wait buckets in seconds: from an idle cluster to a day in the queue.
WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 86400)


class Telemetry:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.admissions = Counter(
            "gpuaas_admissions",
            "Workloads admitted, per ClusterQueue and LocalQueue",
            ["cluster_queue", "local_queue", "tenant"],
            registry=self.registry,
        )
        self.evictions = Counter(
            "gpuaas_evictions",
            "Admitted workloads evicted or requeued, per ClusterQueue and reason code "
            "(InClusterQueue ... for preemption, NodeDrained, NodeRemoved, DeviceLost, "
            "BackendLost for a lost place)",
            ["cluster_queue", "reason"],
            registry=self.registry,
        )
        self.admission_wait = Histogram(
            "gpuaas_admission_wait_seconds",
            "Time from submission (or requeue) to admission, per ClusterQueue",
            ["cluster_queue"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.cycle_seconds = Histogram(
            "gpuaas_reconcile_cycle_seconds",
            "Wall time of one reconciler pass",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
            registry=self.registry,
        )
        # the pass's own CPU (its thread's), apart from waiting for the database or a busy
        # machine: what one tenant's admission costs every other tenant (issue 19)
        self.cycle_cpu_seconds = Histogram(
            "gpuaas_reconcile_cycle_cpu_seconds",
            "CPU time of one reconciler pass (the reconciler thread's)",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5),
            registry=self.registry,
        )

        self.backend_up = Gauge(
            "gpuaas_backend_up",
            "1 while the backend answers its calls, 0 while it cannot be reached",
            ["backend"],
            registry=self.registry,
            multiprocess_mode="liveall",
        )
        self.backend_calls = Counter(
            "gpuaas_backend_calls",
            "Calls to a backend (launch, cancel, poll, adopt) by outcome (ok, unavailable, error)",
            ["backend", "call", "outcome"],
            registry=self.registry,
        )
        self.backend_call_seconds = Histogram(
            "gpuaas_backend_call_seconds",
            "Wall time of one call to a backend",
            ["backend", "call"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
            registry=self.registry,
        )
        # the idle-capacity pool (service/idle_pool.py): nodes given back to tenants
        self.idle_pool_reclaims = Counter(
            "gpuaas_idle_pool_reclaims",
            "Idle-pool nodes given back to tenants (after their pool jobs' grace period)",
            registry=self.registry,
        )
        self.idle_pool_reclaim_seconds = Histogram(
            "gpuaas_idle_pool_reclaim_seconds",
            "Time from a reclaim's request to its node being free for tenants",
            buckets=(1, 5, 10, 20, 30, 40, 60, 90, 120, 300, 600, 1800),
            registry=self.registry,
        )

        self.dcgm_scrapes = Counter(
            "gpuaas_dcgm_scrapes",
            "Scrapes of the nodes' dcgm-exporters by outcome (ok, partial, failed, unreadable); "
            "which node and why: GET /v1/nodes/{node}/utilization (docs/telemetry.md)",
            ["outcome"],
            registry=self.registry,
        )

    def dcgm_scrapes_counted(self, outcome: str) -> None:
        self.dcgm_scrapes.labels(outcome).inc()

    def source(self) -> CollectorRegistry:
        """What ``/metrics`` shows: this registry, or in multiprocess mode (``gpuaas serve``, where
        the reconciler is a process of its own) the sum over every process's metric files."""
        path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not path:
            return self.registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=path)
        return registry
