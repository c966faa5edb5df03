"""The scenario runner: every conformance scenario passes `gpuaas scenario check`; bad files fail
cleanly; the runner's own rules (arrival order, requeue after eviction) hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuaas.cli.main import app
from gpuaas.model.errors import GpuaasError
from gpuaas.sim.scenario import diff_outcomes, parse_scenario, run_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / ".." / "shared" / "conformance" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml")) if SCENARIOS.is_dir() else []
runner = CliRunner()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_conformance_scenario_checks(path: Path) -> None:
    result = runner.invoke(app, ["scenario", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: ")


def test_conformance_scenarios_present() -> None:
    if not FILES:
        pytest.skip(f"no conformance scenarios at {SCENARIOS} (../shared is absent)")
    assert len(FILES) >= 16


def test_run_json_has_the_expect_shape() -> None:
    if not FILES:
        pytest.skip(f"no conformance scenarios at {SCENARIOS}")
    path = next(p for p in FILES if p.name.startswith("05-"))
    result = runner.invoke(app, ["scenario", "run", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    expect = yaml.safe_load(path.read_text())["expect"]
    assert out["admitted"] == expect["admitted"]
    assert out["evicted"] == expect["evicted"]
    assert out["pending"] == sorted(expect["pending"])
    text = runner.invoke(app, ["scenario", "run", str(path)])
    assert "low-alpha  InClusterQueue" in text.output


BASE = """
name: tiny
objects:
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: ResourceFlavor
    metadata: {name: default}
    spec: {}
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {name: cq}
    spec:
      cohortName: lab
      preemption: {withinClusterQueue: LowerPriority}
      resourceGroups:
        - coveredResources: [cpu]
          flavors:
            - name: default
              resources:
                - {name: cpu, nominalQuota: "4"}
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {name: lq, namespace: ns}
    spec: {clusterQueue: cq}
workloads:
  - name: a
    queue: ns/lq
    priority: 0
    created: 0
    podSets: [{name: main, count: 1, requests: {cpu: "3"}}]
  - name: b
    queue: ns/lq
    priority: 5
    created: 10
    podSets: [{name: main, count: 1, requests: {cpu: "2"}}]
expect:
  admitted: {b: {main: {cpu: default}}}
  evicted: {a: InClusterQueue}
  pending: [a]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_arrivals_follow_creation_time_and_evicted_workloads_requeue(tmp_path: Path) -> None:
    # a arrives first and is admitted; b arrives later with a higher priority and evicts it.
    result = runner.invoke(app, ["scenario", "check", str(_write(tmp_path, BASE))])
    assert result.exit_code == 0, result.output
    outcome = run_scenario(parse_scenario(yaml.safe_load(BASE)))
    assert (
        "insufficient unused quota for cpu in flavor default: 1 more needed"
        in (outcome.reasons["a"])
    )
    assert "cohort lab has 0 to lend" in outcome.reasons["a"]


def test_check_reports_a_readable_diff(tmp_path: Path) -> None:
    wrong = BASE.replace("pending: [a]", "pending: []").replace(
        "evicted: {a: InClusterQueue}", "evicted: {}"
    )
    result = runner.invoke(app, ["scenario", "check", str(_write(tmp_path, wrong))])
    assert result.exit_code == 1
    assert "evicted: a: expected no eviction, got InClusterQueue" in result.output
    assert "pending: a is pending but should not be" in result.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [unclosed", "not valid YAML"),
        (
            BASE.replace("queue: ns/lq\n    priority: 0", "queue: ns/nope\n    priority: 0"),
            "ns/nope",
        ),
        (BASE.replace('nominalQuota: "4"', 'nominalQuota: "-4"'), "must not be negative"),
        (BASE.replace("name: default}\n    spec: {}", "name: other}\n    spec: {}"), "default"),
        (BASE.replace('requests: {cpu: "3"}', 'requests: {cpu: "lots"}'), "not a quantity"),
        (BASE + "bogus: 1\n", "bogus"),
    ],
)
def test_bad_files_fail_cleanly(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    for command in (["scenario", "check", str(path)], ["scenario", "run", str(path)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert message in result.output
        assert "Traceback" not in result.output


def test_missing_file_and_missing_expect(tmp_path: Path) -> None:
    result = runner.invoke(app, ["scenario", "check", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "cannot read" in result.output
    no_expect = BASE[: BASE.index("expect:")]
    result = runner.invoke(app, ["scenario", "check", str(_write(tmp_path, no_expect))])
    assert result.exit_code == 2 and "no `expect` section" in result.output


def test_nodes_make_admission_physical(tmp_path: Path) -> None:
    # Quota allows both 3-CPU workloads, but each node has 4 CPUs and one node is the only
    # match for the pool-a selector: the second workload must wait for nodes, not quota.
    text = BASE.replace('nominalQuota: "4"', 'nominalQuota: "100"').replace(
        "name: tiny\n",
        "name: tiny\nnodes:\n  - {name: n1, labels: {pool: a}, capacity: {cpu: '4'}}\n"
        "  - {name: n2, labels: {pool: b}, capacity: {cpu: '4'}}\n",
    )
    text = text.replace(
        'requests: {cpu: "2"}}', 'requests: {cpu: "3"}, nodeSelector: {pool: a}}'
    ).replace('requests: {cpu: "3"}}', 'requests: {cpu: "3"}, nodeSelector: {pool: a}}')
    outcome = run_scenario(parse_scenario(yaml.safe_load(text)))
    assert set(outcome.admitted) == {"a"}
    assert outcome.pending == ["b"]
    assert "do not fit on the nodes" in outcome.reasons["b"]
    expected = parse_scenario(yaml.safe_load(BASE)).expect
    assert expected is not None and diff_outcomes(expected, outcome)


def test_an_admitted_workload_that_fits_no_node_is_refused(tmp_path: Path) -> None:
    text = BASE.replace(
        "name: tiny\n", "name: tiny\nnodes:\n  - {name: n1, capacity: {cpu: '2'}}\n"
    ).replace(
        "    created: 0\n",
        "    created: 0\n    admitted: {flavors: {main: {cpu: default}}, at: 0}\n",
    )
    with pytest.raises(
        GpuaasError, match=r"workload a: admitted: its pods do not fit on the nodes"
    ):
        run_scenario(parse_scenario(yaml.safe_load(text)))
    result = runner.invoke(app, ["scenario", "check", str(_write(tmp_path, text))])
    assert result.exit_code == 2 and "do not fit on the nodes" in result.output
    assert "Traceback" not in result.output


TOPOLOGY = """
name: racks
nodes:
  - {name: a1, labels: {topology.gpuaas.io/rack: ra}, capacity: {cpu: "4", nvidia.com/gpu: "4"}}
  - {name: a2, labels: {topology.gpuaas.io/rack: ra}, capacity: {cpu: "4", nvidia.com/gpu: "4"},
     taints: ["maintenance=soon:NoSchedule"]}
  - {name: b1, labels: {topology.gpuaas.io/rack: rb}, capacity: {cpu: "4", nvidia.com/gpu: "4"}}
  - {name: c1, labels: {topology.gpuaas.io/rack: rc}, capacity: {cpu: "4", nvidia.com/gpu: "4"}}
objects:
  - {apiVersion: kueue.x-k8s.io/v1beta2, kind: ResourceFlavor, metadata: {name: gpu}, spec: {}}
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {name: cq}
    spec:
      resourceGroups:
        - coveredResources: [nvidia.com/gpu]
          flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 100}]}]
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {name: lq, namespace: ns}
    spec: {clusterQueue: cq}
workloads:
  - name: one-rack
    queue: ns/lq
    created: 0
    podSets: [{name: w, count: 2, requests: {nvidia.com/gpu: "4"},
               topologyRequest: {required: rack}}]
  - name: tolerant
    queue: ns/lq
    created: 1
    podSets: [{name: w, count: 2, requests: {nvidia.com/gpu: "4"},
               topologyRequest: {required: topology.gpuaas.io/rack},
               tolerations: [{key: maintenance, operator: Exists}]}]
"""


def test_scenario_nodes_carry_taints_and_pod_sets_a_topology_request() -> None:
    # no rack has two untainted free nodes: the first gang waits; the second tolerates the
    # taint and takes rack ra whole
    outcome = run_scenario(parse_scenario(yaml.safe_load(TOPOLOGY)))
    assert set(outcome.admitted) == {"tolerant"}
    assert outcome.pending == ["one-rack"]
    assert "rack" in outcome.reasons["one-rack"]
    bad = TOPOLOGY.replace("topologyRequest: {required: rack}", "topologyRequest: {required: row}")
    with pytest.raises(
        GpuaasError, match=r"podSets\[0\]\.topologyRequest\.required: unknown topology"
    ):
        parse_scenario(yaml.safe_load(bad))
    both = TOPOLOGY.replace("{required: rack}", "{required: rack, preferred: zone}")
    with pytest.raises(GpuaasError, match="exactly one of required or preferred"):
        parse_scenario(yaml.safe_load(both))
    taint = TOPOLOGY.replace('"maintenance=soon:NoSchedule"', '"maintenance=soon:Sometimes"')
    with pytest.raises(GpuaasError, match=r"node a2: taints\[0\]\.effect"):
        parse_scenario(yaml.safe_load(taint))


def test_bench_admission_json_shape() -> None:
    args = ["bench", "admission", "--cluster-queues", "20", "--cohorts", "4", "--workloads", "300"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert set(out) == {"admissions_per_s", "peak_rss_mib"}
    assert out["admissions_per_s"] > 0 and out["peak_rss_mib"] > 0
    text = runner.invoke(app, [*args, "--nodes", "40"])
    assert text.exit_code == 0 and "admissions/s:" in text.output
    contested = runner.invoke(
        app, [*args, "--reclaim-within-cohort", "Any", "--reclaim-only-contested-borrowers"]
    )
    assert contested.exit_code == 0 and "reclaimWithinCohort Any" in contested.output
    bad = runner.invoke(app, [*args, "--reclaim-within-cohort", "Sometimes"])
    assert bad.exit_code == 2


MIG = """
name: mig-charged-by-size
config:
  resources:
    transformations:
      - input: nvidia.com/mig-1g.10gb
        strategy: Replace
        outputs: {example.com/gpu-sevenths: "1"}
      - input: nvidia.com/mig-3g.40gb
        strategy: Replace
        outputs: {example.com/gpu-sevenths: "3"}
objects:
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: ResourceFlavor
    metadata: {name: a100}
    spec: {}
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {name: cq}
    spec:
      resourceGroups:
        - coveredResources: [example.com/gpu-sevenths]
          flavors:
            - name: a100
              resources:
                - {name: example.com/gpu-sevenths, nominalQuota: "7"}
  - apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {name: lq, namespace: ns}
    spec: {clusterQueue: cq}
workloads:
  - {name: big, queue: ns/lq, created: 0,
     podSets: [{name: main, count: 1, requests: {nvidia.com/mig-3g.40gb: "1"}}]}
  - {name: small, queue: ns/lq, created: 1,
     podSets: [{name: main, count: 4, requests: {nvidia.com/mig-1g.10gb: "1"}}]}
  - {name: late, queue: ns/lq, created: 2,
     podSets: [{name: main, count: 1, requests: {nvidia.com/mig-1g.10gb: "1"}}]}
expect:
  admitted:
    big: {main: {example.com/gpu-sevenths: a100}}
    small: {main: {example.com/gpu-sevenths: a100}}
  evicted: {}
  pending: [late]
"""


def test_mig_slices_are_charged_by_their_size(tmp_path: Path) -> None:
    # one GPU's worth of quota (7 sevenths) holds a 3g slice and four 1g slices, not 5 "GPUs"
    result = runner.invoke(app, ["scenario", "check", str(_write(tmp_path, MIG))])
    assert result.exit_code == 0, result.output
    bad = MIG.replace("strategy: Replace", "strategy: Swap", 1)
    result = runner.invoke(app, ["scenario", "check", str(_write(tmp_path, bad))])
    assert result.exit_code == 2 and "'Swap' is not Retain or Replace" in result.output


PROFILE_OBJECTS = """
  - apiVersion: gpuaas.io/v1
    kind: HardwareProfile
    metadata: {name: small}
    spec:
      displayName: Small CPU box
      localQueue: lq
      allowedTenants: [ns]
      resources:
        - {name: cpu, min: "1", default: "2", max: "3"}
workloads:"""


def test_pod_sets_can_use_a_hardware_profile(tmp_path: Path) -> None:
    text = BASE.replace("workloads:", PROFILE_OBJECTS, 1)
    text = text.replace('requests: {cpu: "3"}}', "hardwareProfile: small}")  # default: 2 CPUs
    text = text.replace('requests: {cpu: "2"}}', 'hardwareProfile: small, requests: {cpu: "3"}}')
    scenario = parse_scenario(yaml.safe_load(text))
    assert [sw.workload.pod_sets[0].requests for sw in scenario.workloads] == [
        {"cpu": 2000},
        {"cpu": 3000},
    ]
    outcome = run_scenario(scenario)
    assert set(outcome.admitted) == {"b"}  # 2 + 3 > 4: b (higher priority) preempts a
    too_big = text.replace('requests: {cpu: "3"}}', 'requests: {cpu: "4"}}')
    result = runner.invoke(app, ["scenario", "run", str(_write(tmp_path, too_big))])
    assert result.exit_code == 2
    assert "hardware profile small: cpu: 4 is above the maximum 3" in result.output
    wrong_queue = text.replace("localQueue: lq", "localQueue: other")
    with pytest.raises(GpuaasError, match=r"HardwareProfile small: spec\.localQueue"):
        parse_scenario(yaml.safe_load(wrong_queue))
