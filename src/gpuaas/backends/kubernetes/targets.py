"""What differs between the cluster schedulers gpuaas hands its decisions to.

gpuaas decides who runs where; the cluster's scheduler binds the pods. Each target reads the
decision in its own words:

* **Kueue** (``kueue``): the workload names its LocalQueue with the label
  ``kueue.x-k8s.io/queue-name`` and its WorkloadPriorityClass with
  ``kueue.x-k8s.io/priority-class``; it is created suspended and Kueue unsuspends it; a pod set
  that asked for a topology level carries ``kueue.x-k8s.io/podset-required-topology`` (or
  ``-preferred-``) on its pod template. Pods are bound by the default scheduler.
* **Volcano** (``volcano``): a ``batch.volcano.sh/v1alpha1`` Job, one task per pod set,
  ``minAvailable`` = every pod (gpuaas admits a job all or nothing), ``queue`` and
  ``priorityClassName`` on the Job, ``schedulerName: volcano`` on every pod.
* **KAI** (``kai``, the open-source core of Run:ai): the queue as the label
  ``kai.scheduler/queue`` on the workload and its pods, the priority class as the pod label
  ``priorityClassName``, ``schedulerName: kai-scheduler``; a GPU share is the pod
  annotation ``gpu-fraction``.

A share of one GPU (``gpuaas.io/gpu-milli`` below 1000) has no core Kubernetes form: KAI takes
the fraction annotation, Volcano its vGPU resources (``volcano.sh/vgpu-number`` and
``volcano.sh/vgpu-cores``, percent), and a Kueue cluster the HAMi device plugin's
(``nvidia.com/gpu`` 1 with ``nvidia.com/gpucores`` and ``nvidia.com/gpumem-percentage``).
"""

from __future__ import annotations

from enum import StrEnum

from gpuaas.model.errors import InvalidValue


class Target(StrEnum):
    KUEUE = "kueue"
    VOLCANO = "volcano"
    KAI = "kai"

    @classmethod
    def parse(cls, value: str, field: str = "target") -> Target:
        try:
            return cls(value.strip().lower())
        except ValueError:
            known = ", ".join(t.value for t in cls)
            raise InvalidValue(field, f"unknown target {value!r} (known: {known})") from None


QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
KAI_QUEUE = "kai.scheduler/queue"
KAI_PRIORITY = "priorityClassName"
KAI_FRACTION = "gpu-fraction"
KAI_SCHEDULER = "kai-scheduler"
VOLCANO_SCHEDULER = "volcano"


def share_resources(target: Target, milli: int) -> dict[str, str]:
    """The container resources a share of ``milli`` milli-GPU takes on ``target`` (KAI: none,
    the share is an annotation, see :func:`share_annotations`)."""
    percent = str(max(1, milli // 10))
    if target is Target.VOLCANO:
        return {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": percent}
    if target is Target.KUEUE:
        return {
            "nvidia.com/gpu": "1",
            "nvidia.com/gpucores": percent,
            "nvidia.com/gpumem-percentage": percent,
        }
    return {}


def share_annotations(target: Target, milli: int) -> dict[str, str]:
    if target is Target.KAI:
        return {KAI_FRACTION: f"{milli / 1000:g}"}
    return {}
