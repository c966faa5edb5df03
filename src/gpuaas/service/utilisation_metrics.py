"""The utilisation windows on ``/metrics``, in dcgm-exporter's spirit: one series per metered
device, labelled with the node, the device in the project's naming, and the tenant and job
holding it.

| series | labels | value |
|---|---|---|
| ``gpuaas_gpu_utilization`` | node, device, tenant, job | the window's mean, ratio 0..1 |
| ``gpuaas_gpu_utilization_peak`` | node, device | the window's highest reading |
| ``gpuaas_gpu_memory_used_bytes`` | node, device, tenant, job | the newest memory reading |
| ``gpuaas_gpu_memory_total_bytes`` | node, device | the device's framebuffer |
| ``gpuaas_gpu_telemetry_known`` | node, device | 1, or 0 while the window is unknown (stale) |
| ``gpuaas_node_gpu_utilization`` | node | the node's devices' mean |
| ``gpuaas_job_gpu_utilization`` | tenant, job | the job's devices' mean |
| ``gpuaas_cluster_gpu_utilization`` | tenant, cluster | the cluster's devices' mean |
| ``gpuaas_node_telemetry_condition`` | node, code | 1 while the node's telemetry has that trouble |

An unknown window has no utilisation series (a dashboard or an alert never reads it as 0);
``gpuaas_gpu_telemetry_known`` says it is unknown. ``job`` is the job id (several, comma
separated, on a shared GPU), ``""`` on an idle device.

Cardinality is bounded by the fleet, not by history: at any time there is one series per
metered device (GPUs and MIG instances: the fleet's size), one per running job and one per
cluster; nodes without trouble have no condition series. Only the ``tenant``/``job`` labels
move, as a dcgm-exporter's ``pod`` label does: a finished job's series end with it. Above
:data:`MAX_DEVICE_SERIES` devices the per-device series are left out (the node, job and
cluster series remain), so a very large fleet cannot flood a Prometheus.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuaas.model.telemetry import UtilSummary
from gpuaas.service.utilisation import Utilisation

#: Beyond this many metered devices only node, job and cluster series are exported.
MAX_DEVICE_SERIES = 50_000


UTIL_HELP = (
    "GPU utilisation over the rolling window (ratio 0..1; DCGM_FI_PROF_GR_ENGINE_ACTIVE, else "
    "DCGM_FI_DEV_GPU_UTIL/100, else synthetic)"
)
PEAK_HELP = "Highest GPU utilisation in the rolling window (ratio 0..1)"
USED_HELP = "Framebuffer memory used, newest reading (DCGM_FI_DEV_FB_USED)"
TOTAL_HELP = "Framebuffer memory of the device (used + free + reserved)"
KNOWN_HELP = "1 while the device's window has a recent sample, 0 while it is unknown (stale)"


class UtilisationCollector(Collector):
    def __init__(self, utilisation: Utilisation) -> None:
        self.utilisation = utilisation

    def collect(self) -> Iterator[GaugeMetricFamily]:
        u = self.utilisation
        jobs = u.jobs()
        device, held = ["node", "device"], ["node", "device", "tenant", "job"]
        util = GaugeMetricFamily("gpuaas_gpu_utilization", UTIL_HELP, labels=held)
        peak = GaugeMetricFamily("gpuaas_gpu_utilization_peak", PEAK_HELP, labels=device)
        used = GaugeMetricFamily("gpuaas_gpu_memory_used_bytes", USED_HELP, labels=held)
        total = GaugeMetricFamily("gpuaas_gpu_memory_total_bytes", TOTAL_HELP, labels=device)
        known = GaugeMetricFamily("gpuaas_gpu_telemetry_known", KNOWN_HELP, labels=device)
        rows = list(u.rows())
        if len(rows) <= MAX_DEVICE_SERIES:
            for r in rows:
                holders = [jobs[j] for j in r.jobs if j in jobs]
                tenant = ",".join(sorted({h.tenant for h in holders}))
                job = ",".join(str(j) for j in r.jobs)
                known.add_metric([r.node, r.device], 1.0 if r.summary.known else 0.0)
                total.add_metric([r.node, r.device], float(r.memory_total_bytes))
                if r.summary.known:
                    util.add_metric([r.node, r.device, tenant, job], r.summary.mean)
                    peak.add_metric([r.node, r.device], r.summary.peak)
                    used.add_metric(
                        [r.node, r.device, tenant, job], float(r.summary.memory_used_bytes)
                    )
        yield from (util, peak, used, total, known)
        nodes = sorted({r.node for r in rows})
        yield self._family(
            "gpuaas_node_gpu_utilization",
            "A node's devices' mean GPU utilisation over the window (ratio 0..1)",
            ["node"],
            (([n], u.node(n)) for n in nodes),
        )
        yield self._family(
            "gpuaas_job_gpu_utilization",
            "A running job's devices' mean GPU utilisation over the window (ratio 0..1)",
            ["tenant", "job"],
            (([h.tenant, str(j)], u.job(j)) for j, h in sorted(jobs.items())),
        )
        keys = u.clusters()
        yield self._family(
            "gpuaas_cluster_gpu_utilization",
            "A tenant cluster's devices' mean GPU utilisation over the window, "
            "idle devices included (ratio 0..1)",
            ["tenant", "cluster"],
            ((k.split(".", 1), u.cluster(k)) for k in keys),
        )
        conditions = GaugeMetricFamily(
            "gpuaas_node_telemetry_condition",
            "1 while a node's GPU telemetry is missing or partial, by reason code",
            labels=["node", "code"],
        )
        for node, c in sorted(u.conditions().items()):
            conditions.add_metric([node, c.reason.code.value], 1.0)
        yield conditions

    @staticmethod
    def _family(
        name: str,
        doc: str,
        labels: list[str],
        items: Iterable[tuple[Sequence[str], UtilSummary | None]],
    ) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=labels)
        for values, summary in items:
            if summary is not None and summary.known:
                family.add_metric(list(values), summary.mean)
        return family
