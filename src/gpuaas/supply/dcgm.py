"""dcgm-exporter's text, read into per-device samples in the project's one device naming.

A dcgm-exporter on a GPU node serves Prometheus text (``:9400/metrics``); its field names are
NVIDIA's (``etc/default-counters.csv``, ``etc/dcp-metrics-included.csv``; the copies in
``../shared/data/dcgm/``). We read it with ``prometheus_client``'s own parser and take:

- **utilisation**: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a ratio 0..1; DCGM 4.x's name for it is
  ``DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO``) where the exporter has it, else
  ``DCGM_FI_DEV_GPU_UTIL`` (a percentage, divided by 100). On a MIG instance
  ``DCGM_FI_DEV_GPU_UTIL`` reads 0 whatever runs there, so a MIG instance without the
  profiling field gets *no* utilisation sample (unknown), never a 0 (idle);
- **memory**: ``DCGM_FI_DEV_FB_USED`` (MiB), and the total as used + free + reserved
  (``DCGM_FI_DEV_FB_FREE``, ``DCGM_FI_DEV_FB_RESERVED``).

Each row is matched to a device of the node as we know it (:mod:`gpuaas.supply.telemetry`):
the GPU by its ``UUID`` label where the node's GPUs have UUIDs, else by the ``gpu`` label (the
index); a MIG row by ``GPU_I_PROFILE`` and ``GPU_I_ID``. The exporter says which GPU instance
(its id) but not where the instance sits (its start slice, which our names carry), so the
instances of one profile on one GPU are paired with the node's instances of that profile in
order: ascending GPU-instance id to ascending start slice, as the driver numbers instances
created in placement order; when the counts differ they are left unmatched rather than
guessed. Rows that match no device, and devices no row reports, are listed so the service can
say so as a node condition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from gpuaas.model.node import Node
from gpuaas.model.telemetry import DeviceSample, UtilSource
from gpuaas.supply.telemetry import MeteredDevice, metered_devices

#: Utilisation fields, most trusted first: (name, source, divide by).
UTIL_FIELDS: tuple[tuple[str, UtilSource, float], ...] = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", UtilSource.GR_ENGINE_ACTIVE, 1.0),
    ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", UtilSource.GR_ENGINE_ACTIVE, 1.0),  # DCGM 4.x
    ("DCGM_FI_DEV_GPU_UTIL", UtilSource.GPU_UTIL, 100.0),
)
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
MEMORY_FIELDS = (FB_USED, FB_FREE, FB_RESERVED)
#: Every field read (tests check them against NVIDIA's lists).
FIELDS = tuple(f for f, _, _ in UTIL_FIELDS) + MEMORY_FIELDS
_MIB = 2**20


class ExporterTextError(ValueError):
    """The text is not Prometheus exposition text."""


@dataclass(slots=True)
class Reading:
    """What one scrape said: ``samples`` per device; ``unmatched`` exporter rows that name no
    device of the node (``gpu 3``, ``gpu 0 GI 9 1g.10gb``); ``unreported`` devices of the node
    no row (or no utilisation field) reports."""

    samples: list[DeviceSample] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    unreported: list[str] = field(default_factory=list)


# (GPU label value, UUID, GI profile, GI id): one exporter row's device
_RowKey = tuple[str, str, str, str]


def _rows(text: str) -> dict[_RowKey, dict[str, float]]:
    rows: dict[_RowKey, dict[str, float]] = {}
    wanted = set(FIELDS)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in wanted:
                    continue
                labels = sample.labels
                key = (
                    labels.get("gpu", ""),
                    labels.get("UUID", ""),
                    labels.get("GPU_I_PROFILE", "").lower(),
                    labels.get("GPU_I_ID", ""),
                )
                rows.setdefault(key, {})[sample.name] = float(sample.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise ExporterTextError(f"not Prometheus text: {exc}") from None
    return rows


def _gpu_of(node: Node, gpu_label: str, uuid: str) -> int | None:
    if uuid:
        for g in node.gpus:
            if g.uuid and g.uuid == uuid:
                return g.index
    if gpu_label.isdigit() and any(g.index == int(gpu_label) for g in node.gpus):
        return int(gpu_label)
    return None


def _describe(key: _RowKey) -> str:
    gpu, uuid, profile, gi = key
    where = f"gpu {gpu or '?'}" + (f" ({uuid})" if uuid and not gpu else "")
    return where + (f" GI {gi} {profile}" if profile else "")


def _match(node: Node, keys: Iterable[_RowKey]) -> tuple[dict[_RowKey, MeteredDevice], list[str]]:
    """Which metered device each row is, and the rows that are none."""
    devices = metered_devices(node)
    whole = {d.gpu: d for d in devices if not d.profile}
    mig: dict[tuple[int, str], list[MeteredDevice]] = {}
    for d in devices:
        if d.profile:
            mig.setdefault((d.gpu, d.profile.lower()), []).append(d)
    matched: dict[_RowKey, MeteredDevice] = {}
    unmatched: list[str] = []
    instances: dict[tuple[int, str], list[tuple[int, _RowKey]]] = {}
    mig_gpus = {d.gpu for d in devices if d.profile}
    for key in keys:
        gpu_label, uuid, profile, gi = key
        gpu = _gpu_of(node, gpu_label, uuid)
        if gpu is None:
            unmatched.append(_describe(key))
        elif profile:
            instances.setdefault((gpu, profile), []).append((int(gi) if gi.isdigit() else -1, key))
        elif gpu in whole:
            matched[key] = whole[gpu]
        elif gpu not in mig_gpus:
            unmatched.append(_describe(key))
        # else: the parent row of a MIG GPU; its instances are what we meter
    for group, rows in instances.items():
        ours = sorted(mig.get(group, ()), key=lambda d: d.start)
        if len(ours) != len(rows):
            unmatched.extend(_describe(k) for _, k in sorted(rows))
            continue
        for device, (_, key) in zip(ours, sorted(rows), strict=True):
            matched[key] = device
    return matched, unmatched


def read_exporter(text: str, node: Node, at: float) -> Reading:
    """The samples ``text`` (one dcgm-exporter scrape of ``node`` at time ``at``) holds."""
    rows = _rows(text)
    matched, unmatched = _match(node, rows)
    reading = Reading(unmatched=unmatched)
    reported: set[str] = set()
    for key, device in matched.items():
        values = rows[key]
        util: tuple[float, UtilSource] | None = None
        for name, source, divide in UTIL_FIELDS:
            if name in values and not (device.profile and source is UtilSource.GPU_UTIL):
                util = (min(max(values[name] / divide, 0.0), 1.0), source)
                break
        if util is None:
            continue
        used = int(values.get(FB_USED, 0) * _MIB)
        total = int(sum(values.get(f, 0) for f in MEMORY_FIELDS) * _MIB) or device.memory_bytes
        reading.samples.append(DeviceSample(node.name, device.name, at, util[0], used, total,
                                            util[1]))  # fmt: skip
        reported.add(device.name)
    reading.unreported = [d.name for d in metered_devices(node) if d.name not in reported]
    return reading
