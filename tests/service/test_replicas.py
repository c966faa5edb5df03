"""Time-sliced replicas get names: never the same replica for two live jobs, kept while the
job lives, given back lazily when it ends; and the typed pods a backend reads use them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission.restore import typed_pods
from gpuaas.engine.replica_names import ReplicaBook
from gpuaas.model.placement import DeviceKind
from gpuaas.supply.loaders import fleet_from_text

FLEET = """
apiVersion: gpuaas.io/v1
kind: Fleet
nodes:
  - name: mixed
    cpu: "64"
    memory: 512Gi
    gpus:
      model: A100-80GB
      count: 3
      perGpu:
        - indices: [1]
          partitioning: {mig: {3g.40gb: 1, 2g.20gb: 1, 1g.10gb: 2}}
        - indices: [2]
          partitioning: {timeSlicing: {replicas: 4}}
"""


def _pod(node: str, **assignment: Any) -> dict[str, Any]:
    return {"podSet": "main", "index": 0, "node": node, "assignment": assignment}


def test_typed_pods_name_devices_as_the_supply_plane_does() -> None:
    node = fleet_from_text(FLEET, "fleet.yaml").nodes[0]
    uuid = [gpu.uuid for gpu in node.gpus]
    pods = typed_pods(
        [_pod("mixed", cpu=4000, memory=2**30, gpus=[[0, 1000]], mig=[[1, 0]],
              replicaIds=[[2, 3]])],
        {"mixed": node}.get,
    )  # fmt: skip
    (pod,) = pods
    assert (pod.rank, pod.node, pod.cpu_milli, pod.memory_bytes) == (0, "mixed", 4000, 2**30)
    whole, mig, replica = pod.devices
    assert (whole.name, whole.uuid, whole.kind) == ("gpu-0", uuid[0], DeviceKind.GPU)
    assert mig.kind is DeviceKind.MIG and mig.uuid.startswith("MIG-") and mig.gpu == 1
    assert mig.name.startswith("gpu-1-mig-")
    assert (replica.name, replica.uuid, replica.gpu) == ("gpu-2-ts-3", uuid[2], 2)
    assert pod.visible_devices == f"{uuid[0]},{mig.uuid},{uuid[2]}"
    assert pod.gpu_indexes == (0, 1, 2)


def test_a_share_is_its_gpu() -> None:
    node = fleet_from_text(FLEET, "fleet.yaml").nodes[0]
    (pod,) = typed_pods([_pod("mixed", gpus=[[0, 250]])], {"mixed": node}.get)
    (share,) = pod.devices
    assert (share.kind, share.milli, share.uuid) == (DeviceKind.SHARE, 250, node.gpus[0].uuid)


def test_two_jobs_on_one_gpu_get_different_replicas_and_a_freed_one_is_reused() -> None:
    book = ReplicaBook()
    live = {1, 2}
    alive = lambda job, attempt: job in live  # noqa: E731
    first = [_pod("n", replicas=[[0, 2]])]
    second = [_pod("n", replicas=[[0, 1]])]
    book.name(1, 0, first, alive)
    book.name(2, 0, second, alive)
    assert first[0]["assignment"]["replicaIds"] == [[0, 0], [0, 1]]
    assert second[0]["assignment"]["replicaIds"] == [[0, 2]]
    live.discard(1)  # job 1 ended: its replicas are free again
    third = [_pod("n", replicas=[[0, 2]])]
    live.add(3)
    book.name(3, 0, third, alive)
    assert third[0]["assignment"]["replicaIds"] == [[0, 0], [0, 1]]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 2), st.integers(1, 3)), min_size=1, max_size=40
    )
)
def test_no_replica_is_held_by_two_live_jobs(steps: list[tuple[bool, int, int]]) -> None:
    """Admit (gpu, count) or end the oldest live job, in any order: the replicas named for the
    live jobs never repeat, and each job gets as many as it asked for."""
    book = ReplicaBook()
    live: dict[int, list[list[int]]] = {}
    alive = lambda job, attempt: job in live  # noqa: E731
    for job_id, (admit, gpu, count) in enumerate(steps):
        if not admit and live:
            del live[min(live)]
            continue
        placement = [_pod("n", replicas=[[gpu, count]])]
        book.name(job_id, 0, placement, alive)
        ids = placement[0]["assignment"]["replicaIds"]
        assert len(ids) == count and all(g == gpu for g, _ in ids)
        live[job_id] = ids
        held = [tuple(x) for ids in live.values() for x in ids]
        assert len(held) == len(set(held))
