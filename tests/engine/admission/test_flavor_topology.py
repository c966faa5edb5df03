"""A flavor that names a Kueue Topology offers only that Topology's levels to pod sets."""

from __future__ import annotations

import yaml

from gpuaas.engine.admission import AdmissionEngine
from gpuaas.model.governance import AdmissionPodSet, AdmissionWorkload
from gpuaas.model.topology import Level
from gpuaas.model.workload import TopologyMode, TopologyRequest
from gpuaas.supply.kueue import load_objects

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: blocks}
spec:
  levels:
    - nodeLabel: cloud.provider.com/topology-block
    - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: tas}
spec: {topologyName: blocks}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: plain}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: a}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors:
        - name: tas
          resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
        - name: plain
          resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: a, namespace: ns}
spec: {clusterQueue: a}
"""


def _job(name: str, level: Level, mode: TopologyMode = TopologyMode.REQUIRED) -> AdmissionWorkload:
    pod_set = AdmissionPodSet(
        "main", 2, {"nvidia.com/gpu": 2}, topology=TopologyRequest(level, mode)
    )
    return AdmissionWorkload(name, "ns/a", (pod_set,))


def test_flavor_offers_only_its_topology_levels() -> None:
    gov = load_objects(yaml.safe_load_all(CONFIG))
    assert gov.topologies["blocks"].levels == (Level.BLOCK, Level.HOSTNAME)
    engine = AdmissionEngine(gov)
    engine.submit(_job("block-bound", Level.BLOCK))
    engine.submit(_job("rack-bound", Level.RACK))
    engine.submit(_job("rack-preferred", Level.RACK, TopologyMode.PREFERRED))
    engine.run(3)
    assert engine.admitted["block-bound"].flavors == {"main": {"nvidia.com/gpu": "tas"}}
    # the rack is not a level of Topology blocks: both go to the flavor without a Topology
    assert engine.admitted["rack-bound"].flavors == {"main": {"nvidia.com/gpu": "plain"}}
    assert engine.admitted["rack-preferred"].flavors == {"main": {"nvidia.com/gpu": "plain"}}


def test_no_flavor_with_the_level_leaves_the_job_pending_saying_why() -> None:
    only_tas = CONFIG.replace(
        "        - name: plain\n          resources: [{name: nvidia.com/gpu, nominalQuota: 8}]\n",
        "",
    )
    engine = AdmissionEngine(load_objects(yaml.safe_load_all(only_tas)))
    engine.submit(_job("rack-bound", Level.RACK))
    engine.run(1)
    assert "rack-bound" not in engine.admitted
    assert "flavor tas's Topology blocks has no level rack" in engine.reasons["rack-bound"]
