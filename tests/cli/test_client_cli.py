"""The client commands end to end: the real CLI app talking to the real API app in process."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import update
from typer.testing import CliRunner, Result

import gpuaas.cli.client as cli_client
from gpuaas.backends.logs import LogLayout
from gpuaas.cli.client_jobs import gpus_text
from gpuaas.cli.main import app
from gpuaas.client import Client
from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings
from gpuaas.store.tables import Job
from kube_fakes import FakeTransport, fake_client, node_list

ADMIN = "gpa_cli-admin-token-0123456789abcdef"
SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-samples"
URL = "http://testserver"
runner = CliRunner()

FLEET = {
    "apiVersion": "gpuaas.io/v1",
    "kind": "Fleet",
    "nodes": [
        {
            "name": "n-{i}",
            "count": 2,
            "cpu": "64",
            "memory": "512Gi",
            "gpus": {"model": "H100-80GB", "count": 8},
            "labels": {"gpuaas.io/pool": "cli"},
        }
    ],
}
CLUSTER_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "acme-cq"},
    "spec": {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}
                ],
            }
        ],
    },
}
JOB = {
    "name": "train",
    "kind": "training",
    "queue": "default",
    "command": ["python", "train.py"],
    "podSets": [{"name": "workers", "count": 2, "resources": {"nvidia.com/gpu": 1}}],
}


@pytest.fixture
def http(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The API in process; every command's client goes through it; config in tmp_path."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(FLEET), encoding="utf-8")
    settings = Settings(
        db_url=sqlite_url, data_dir=tmp_path, reconcile=False, admin_token=ADMIN, fleet=fleet
    )
    monkeypatch.setenv("GPUAAS_CONFIG", str(tmp_path / "config" / "config.json"))
    for name in ("GPUAAS_URL", "GPUAAS_TOKEN", "GPUAAS_TENANT"):
        monkeypatch.delenv(name, raising=False)
    with TestClient(create_app(settings), base_url=URL) as client:
        monkeypatch.setattr(
            cli_client, "make_client", lambda url, token: Client.from_httpx(client, token)
        )
        yield client


def gpuaas(*args: str) -> Result:
    return runner.invoke(app, list(args))


def ok_json(*args: str) -> object:
    result = gpuaas(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # JSON only on stdout


def failed(*args: str) -> str:
    """Run a command that must fail cleanly: exit 1, `error:` on stderr, no traceback."""
    result = gpuaas(*args)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.stderr


def set_up_acme(tmp_path: Path) -> str:
    """As the admin: a flavor, tenant acme with a queue and the tenant-user alice; returns
    alice's token."""
    flavor = tmp_path / "flavor.yaml"
    flavor.write_text(
        yaml.safe_dump({"name": "h100", "spec": {"nodeLabels": {"gpuaas.io/pool": "cli"}}})
    )
    assert gpuaas("flavors", "create", "-f", str(flavor)).exit_code == 0
    ok_json("tenants", "create", "acme", "--capacity", "h100:nvidia.com/gpu=16")
    cq = tmp_path / "cq.yaml"
    cq.write_text(yaml.safe_dump(CLUSTER_QUEUE))
    ok_json("cluster-queues", "create", "-f", str(cq), "--owner", "acme")
    ok_json("queues", "create", "default", "--cluster-queue", "acme-cq", "--tenant", "acme")
    ok_json("members", "set", "alice", "tenant-user", "--tenant", "acme")
    issued = ok_json("members", "token", "alice", "--name", "laptop", "--tenant", "acme")
    assert isinstance(issued, dict)
    return str(issued["token"])


def test_login_saves_a_private_config_and_whoami_reads_it(http: TestClient, tmp_path: Path) -> None:
    result = gpuaas("login", URL, ADMIN)
    assert result.exit_code == 0, result.output
    assert "logged in" in result.stdout
    config = tmp_path / "config" / "config.json"
    assert json.loads(config.read_text()) == {"url": URL, "token": ADMIN}
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    who = ok_json("whoami")
    assert isinstance(who, dict) and who["platformRole"] == "provider-admin"


def test_login_with_a_bad_token_saves_nothing(http: TestClient, tmp_path: Path) -> None:
    assert "error: " in failed("login", URL, "gpa_wrong")
    assert not (tmp_path / "config" / "config.json").exists()
    assert "gpuaas login" in failed("whoami")


def test_tenants_commands_and_clear_errors(http: TestClient) -> None:
    gpuaas("login", URL, ADMIN)
    made = ok_json(
        "tenants", "create", "acme", "--display-name", "Acme", "--capacity", "h100:cpu=8"
    )
    assert made == {**made, "name": "acme", "displayName": "Acme"}
    table = gpuaas("tenants", "list")
    assert table.exit_code == 0 and "acme" in table.stdout and "Acme" in table.stdout
    page = ok_json("tenants", "list", "--limit", "1")
    assert isinstance(page, dict) and [t["name"] for t in page["items"]] == ["acme"]
    assert ok_json("tenants", "update", "acme", "--display-name", "ACME")["displayName"] == "ACME"
    assert "not found" in failed("tenants", "get", "nope")
    assert "--capacity" in failed("tenants", "create", "x", "--capacity", "nonsense")
    err = failed("tenants", "create", "Bad Name!")
    assert "name" in err
    assert "--yes" in failed("tenants", "delete", "acme")
    assert ok_json("tenants", "delete", "acme", "--yes") == {"deleted": "acme"}


def test_tenants_take_the_providers_terms(http: TestClient, tmp_path: Path) -> None:
    """--parent-cohort, --borrowing, --lending, --max-job and --priority-ceiling reach the
    tenant's terms; --no-... clears them; a malformed term names its option."""
    gpuaas("login", URL, ADMIN)
    flavor = tmp_path / "flavor.yaml"
    flavor.write_text(yaml.safe_dump({"name": "h100", "spec": {}}))
    assert gpuaas("flavors", "create", "-f", str(flavor)).exit_code == 0
    cloud = {"name": "cloud", "spec": {}}
    headers = {"Authorization": f"Bearer {ADMIN}"}
    assert http.post("/v1/cohorts", json=cloud, headers=headers).status_code == 201
    made = ok_json(
        "tenants", "create", "acme",
        "--capacity", "h100:nvidia.com/gpu=16",
        "--parent-cohort", "cloud",
        "--borrowing", "h100:nvidia.com/gpu=4",
        "--lending", "h100:nvidia.com/gpu=8",
        "--max-job", "nvidia.com/gpu=8",
        "--priority-ceiling", "500",
    )  # fmt: skip
    assert isinstance(made, dict)
    assert made["parentCohort"] == "cloud" and made["priorityCeiling"] == 500
    assert made["borrowing"] == {"h100": {"nvidia.com/gpu": "4"}}
    assert made["lending"] == {"h100": {"nvidia.com/gpu": "8"}}
    assert made["maxJob"] == {"nvidia.com/gpu": "8"}
    changed = ok_json("tenants", "update", "acme", "--max-job", "nvidia.com/gpu=2")
    assert isinstance(changed, dict) and changed["maxJob"] == {"nvidia.com/gpu": "2"}
    assert changed["parentCohort"] == "cloud"  # left as it was
    cleared = ok_json("tenants", "update", "acme", "--no-parent-cohort", "--no-priority-ceiling")
    assert isinstance(cleared, dict)
    assert cleared["parentCohort"] is None and cleared["priorityCeiling"] is None
    assert "--max-job" in failed("tenants", "update", "acme", "--max-job", "gpu")
    assert "--borrowing" in failed("tenants", "create", "x", "--borrowing", "h100=1")
    assert "parentCohort" in failed("tenants", "create", "y", "--parent-cohort", "nowhere")


def test_a_tenant_user_submits_follows_and_cancels_jobs(http: TestClient, tmp_path: Path) -> None:
    gpuaas("login", URL, ADMIN)
    alice = set_up_acme(tmp_path)
    assert "give --tenant" in failed("jobs", "list")  # the admin is a member of no tenant
    gpuaas("login", URL, alice)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(JOB))
    job = ok_json("jobs", "submit", "-f", str(spec), "--idempotency-key", "k1")
    assert isinstance(job, dict) and job["name"] == "train" and job["tenant"] == "acme"
    again = ok_json("jobs", "submit", "-f", str(spec), "--idempotency-key", "k1")
    assert again["id"] == job["id"]  # type: ignore[index]
    listed = ok_json("jobs", "list")
    assert [j["id"] for j in listed["items"]] == [job["id"]]  # type: ignore[index]
    table = gpuaas("jobs", "list")
    assert table.exit_code == 0 and "train" in table.stdout
    assert ok_json("jobs", "get", str(job["id"]))["spec"]["kind"] == "training"  # type: ignore[index]
    ok_json("jobs", "cancel", str(job["id"]))
    events = ok_json("jobs", "events", str(job["id"]))
    assert isinstance(events, list) and events
    assert "not found" in failed("jobs", "get", "999999")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**JOB, "queue": "nope"}))
    assert "queue" in failed("jobs", "submit", "-f", str(bad))
    assert "cannot read" in failed("jobs", "submit", "-f", str(tmp_path / "missing.yaml"))
    waiting = ok_json("jobs", "submit", "-f", str(spec))
    workloads = ok_json("workloads", "list")
    assert [w["id"] for w in workloads["items"]] == [waiting["id"]]  # type: ignore[index]


def test_members_tokens_queues_and_profiles(http: TestClient, tmp_path: Path) -> None:
    gpuaas("login", URL, ADMIN)
    set_up_acme(tmp_path)
    members = ok_json("members", "list", "--tenant", "acme")
    assert [(m["user"], m["role"]) for m in members["items"]] == [("alice", "tenant-user")]  # type: ignore[index]
    queues = ok_json("queues", "list", "--tenant", "acme")
    assert [q["name"] for q in queues["items"]] == ["default"]  # type: ignore[index]
    assert ok_json("queues", "get", "default", "--tenant", "acme")["clusterQueue"] == "acme-cq"  # type: ignore[index]
    made = ok_json("priority-classes", "create", "urgent", "--value", "900", "--tenant", "acme")
    assert isinstance(made, dict) and made["value"] == 900
    classes = ok_json("priority-classes", "list", "--tenant", "acme")
    assert [c["name"] for c in classes["items"]] == ["urgent"]  # type: ignore[index]
    profiles = ok_json("profiles", "list", "--tenant", "acme")
    assert profiles["items"] == []  # type: ignore[index]
    token = ok_json("tokens", "create", "ci")
    assert isinstance(token, dict) and token["token"].startswith("gpa_")
    assert "ci" in {t["name"] for t in ok_json("tokens", "list", "--all")["items"]}  # type: ignore[index]
    assert ok_json("tokens", "revoke", str(token["id"])) == {"revoked": str(token["id"])}
    ok_json("members", "remove", "alice", "--tenant", "acme")
    assert ok_json("members", "list", "--tenant", "acme")["items"] == []  # type: ignore[index]


def test_nodes_and_kueue(http: TestClient, tmp_path: Path) -> None:
    gpuaas("login", URL, ADMIN)
    nodes = ok_json("nodes", "list")
    assert [n["name"] for n in nodes["items"]] == ["n-1", "n-2"]  # type: ignore[index]
    table = gpuaas("nodes", "list")
    assert table.exit_code == 0 and "n-1" in table.stdout
    assert ok_json("nodes", "cordon", "n-1")["cordoned"] is True  # type: ignore[index]
    assert ok_json("nodes", "uncordon", "n-1")["cordoned"] is False  # type: ignore[index]
    assert ok_json("nodes", "drain", "n-2")["draining"] is True  # type: ignore[index]
    assert "not found" in failed("nodes", "get", "n-9")
    set_up_acme(tmp_path)
    exported = gpuaas("kueue", "export")
    assert exported.exit_code == 0
    kinds = {d["kind"] for d in yaml.safe_load_all(exported.stdout) if d}
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue"} <= kinds
    out = tmp_path / "kueue.yaml"
    out.write_text(exported.stdout)
    assert gpuaas("kueue", "import", str(out), "--dry-run").exit_code == 0


@pytest.mark.parametrize("scheduler", ["kai", "volcano"])
def test_kai_and_volcano_export_and_import(
    http: TestClient, tmp_path: Path, scheduler: str
) -> None:
    """`gpuaas kai|volcano export` prints the queues; importing them back changes nothing; a
    field with no Kueue equivalent is an error naming it."""
    gpuaas("login", URL, ADMIN)
    set_up_acme(tmp_path)
    exported = gpuaas(scheduler, "export", "--tenant", "acme")
    assert exported.exit_code == 0, exported.output
    queues = [d for d in yaml.safe_load_all(exported.stdout) if d]
    assert queues and {d["kind"] for d in queues} == {"Queue"}
    out = tmp_path / f"{scheduler}.yaml"
    assert gpuaas(scheduler, "export", "-o", str(out)).exit_code == 0
    flavor = next(iter(ok_json("flavors", "list")["items"]))["name"]  # type: ignore[index]
    done = ok_json(scheduler, "import", str(out), "--flavor", flavor)
    assert done["created"] == [] and done["updated"] == [], done  # type: ignore[index]
    bad = tmp_path / "bad.yaml"
    kind = "scheduling.run.ai/v2" if scheduler == "kai" else "scheduling.volcano.sh/v1beta1"
    bad.write_text(f"apiVersion: {kind}\nkind: Queue\nmetadata: {{name: x}}\nspec: {{priority: 3}}")
    assert "spec.priority" in failed(scheduler, "import", str(bad))


GPU_NODES = Path(__file__).resolve().parents[1] / "fixtures" / "kubectl-get-nodes-gpu-operator.yaml"


def test_nodes_import_from_kubernetes(
    http: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a file, then live (the official client over a fake transport, never a real API
    server): the first import registers, the second finds them unchanged, a changed node is
    updated in place."""
    from gpuaas.supply.loaders import kubernetes_api

    gpuaas("login", URL, ADMIN)
    first = ok_json(
        "nodes", "import", "--from", "kubernetes", str(GPU_NODES),
        "--topology-label", "rack=example.com/rack",
    )  # fmt: skip
    assert isinstance(first, dict) and len(first["created"]) == 5
    assert ok_json("nodes", "get", "hgx-h100-a01")["topology"] == {  # type: ignore[index]
        "zone": "eu-west-1a",
        "rack": "r12",
        "nvlinkDomain": "7f2c9a4e-51d3-4b0e-9a55-3f1e2d0c8b71.1",
    }
    document = yaml.safe_load(GPU_NODES.read_text())
    item = next(i for i in document["items"] if i["metadata"]["name"] == "hgx-h100-a02")
    item["metadata"]["labels"]["example.com/rack"] = "r13"
    transport = FakeTransport([(200, node_list(document["items"]))])
    monkeypatch.setattr(
        kubernetes_api, "api_client", lambda path, context=None: fake_client(transport)
    )
    shown = gpuaas(
        "nodes", "import", "--from", "kubernetes", "--kubeconfig", str(tmp_path / "kubeconfig"),
        "--topology-label", "rack=example.com/rack",
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.stdout.split())  # the table's title may wrap
    assert "1 updated, 4 unchanged" in said and "hgx-h100-a02 │ updated" in said
    assert "give exactly one" in failed(
        "nodes", "import", "--from", "kubernetes", str(GPU_NODES), "--kubeconfig", "k"
    )
    assert "unknown source" in failed("nodes", "import", "--from", "lsf", str(GPU_NODES))


def test_several_documents_and_every_field_error_once(http: TestClient, tmp_path: Path) -> None:
    gpuaas("login", URL, ADMIN)
    gpuaas("login", URL, set_up_acme(tmp_path))
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump_all([JOB, {**JOB, "name": "eval"}]))
    jobs = ok_json("jobs", "submit", "-f", str(two))
    assert isinstance(jobs, list) and [j["name"] for j in jobs] == ["train", "eval"]
    assert "exactly one job" in failed("jobs", "submit", "-f", str(two), "--idempotency-key", "k")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**JOB, "name": "Bad_Name", "podSets": [{"count": 0}]}))
    err = failed("jobs", "submit", "-f", str(bad))
    assert err.count("is not a DNS-1123 label") == 1 and err.count("podSets.0.count") == 1
    assert err.startswith("error: document 1 (Bad_Name): name: ")
    lines = err.splitlines()
    assert lines[0].startswith("error: ") and any(line.startswith("  ") for line in lines[1:])


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_nodes_register_takes_every_fleet_format(http: TestClient, tmp_path: Path) -> None:
    """kubectl output (YAML and JSON), the trace's CSV, an inventory: what `fleet show` reads."""
    gpuaas("login", URL, ADMIN)
    kubectl = FIXTURES / "kubectl-get-nodes-new-gpus.yaml"
    made = ok_json("nodes", "register", "-f", str(kubectl))
    assert isinstance(made, list)
    models = {n["name"]: (n["gpuModel"], n["gpus"][0]["partition"]["mode"]) for n in made}
    assert models["h20-infer-01"] == ("H20", "mig")
    assert models["l40s-mps-03"] == ("L40S", "mps")
    assert models["rtx4090-07"] == ("RTX-4090", "whole")
    as_json = tmp_path / "nodes.json"
    as_json.write_text(
        json.dumps(yaml.safe_load((FIXTURES / "kubectl-get-nodes.yaml").read_text()))
    )
    made = ok_json("nodes", "register", "-f", str(as_json))
    assert isinstance(made, list) and len(made) == 3
    csv_file = tmp_path / "openb.csv"
    csv_file.write_text("sn,cpu_milli,memory_mib,gpu,model\nob-1,64000,262144,2,P100\n")
    table = gpuaas("nodes", "register", "-f", str(csv_file))
    assert table.exit_code == 0 and "1 nodes registered" in table.stdout, table.output
    assert ok_json("nodes", "get", "ob-1")["gpuModel"] == "P100-16GB"  # type: ignore[index]
    one = tmp_path / "one.yaml"
    one.write_text("name: cpu-9\ncpu: '8'\nmemory: 32Gi\n")  # one inventory entry still works
    assert [n["name"] for n in ok_json("nodes", "register", "-f", str(one))] == ["cpu-9"]  # type: ignore[union-attr]


def test_nodes_register_errors_name_the_entry_and_register_nothing(
    http: TestClient, tmp_path: Path
) -> None:
    gpuaas("login", URL, ADMIN)
    document = yaml.safe_load((FIXTURES / "kubectl-get-nodes-new-gpus.yaml").read_text())
    document["items"][2]["metadata"]["labels"]["nvidia.com/gpu.memory"] = "95.6GiB"
    bad = tmp_path / "nodes.yaml"
    bad.write_text(yaml.safe_dump(document))
    message = failed("nodes", "register", "-f", str(bad))
    assert "items[2] (rtxpro-b-01)" in message
    assert "metadata.labels.nvidia.com/gpu.memory" in message
    names = [n["name"] for n in ok_json("nodes", "list")["items"]]  # type: ignore[index]
    assert names == ["n-1", "n-2"]  # only the fleet the server started with


def test_kueue_import_maps_namespaces_to_tenants(http: TestClient, tmp_path: Path) -> None:
    """Kueue's quick-start file: its LocalQueue lives in namespace default."""
    gpuaas("login", URL, ADMIN)
    ok_json("tenants", "create", "acme-ai")
    sample = SAMPLES / "v0.14.8" / "admin" / "single-clusterqueue-setup.yaml"  # v1beta1
    refused = failed("kueue", "import", str(sample))
    assert "LocalQueue default/user-queue: metadata.namespace" in refused
    assert "--namespace-map default=<tenant>" in refused
    bad = gpuaas("kueue", "import", str(sample), "--namespace-map", "default")
    assert bad.exit_code == 2 and "NAMESPACE=TENANT" in bad.output
    dry = ok_json("kueue", "import", str(sample), "--namespace-map", "default=acme-ai", "--dry-run")
    assert dry["dryRun"] is True  # type: ignore[index]
    done = ok_json("kueue", "import", str(sample), "--namespace-map", "default=acme-ai")
    assert done["created"] == [  # type: ignore[index]
        "ResourceFlavor default-flavor",
        "ClusterQueue cluster-queue",
        "LocalQueue acme-ai/user-queue",
    ]
    again = ok_json("kueue", "import", str(sample), "--tenant", "acme-ai")
    assert len(again["unchanged"]) == 3  # type: ignore[index]
    table = gpuaas("kueue", "import", str(sample), "--tenant", "acme-ai")
    assert table.exit_code == 0 and "unchanged" in table.stdout
    exported = tmp_path / "export.yaml"
    assert gpuaas("kueue", "export", "-o", str(exported)).exit_code == 0
    assert "kueue.x-k8s.io/v1beta1" not in exported.read_text()  # stored as v1beta2
    back = ok_json("kueue", "import", str(exported))
    assert back["created"] == back["updated"] == []  # type: ignore[index]


def test_several_documents_all_or_none_named_errors_and_reruns_never_duplicate(
    http: TestClient, tmp_path: Path
) -> None:
    gpuaas("login", URL, ADMIN)
    gpuaas("login", URL, set_up_acme(tmp_path))
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(yaml.safe_dump_all([JOB]))
    [first] = [ok_json("jobs", "submit", "-f", str(jobs_file))]
    typo = {**JOB, "name": "eval", "podSets": [{"name": "w", "resources": {"nvidia.com/gpus": 1}}]}
    huge = {**JOB, "name": "huge", "podSets": [{"name": "w", "resources": {"nvidia.com/gpu": 64}}]}
    jobs_file.write_text(yaml.safe_dump_all([JOB, typo, huge]))
    err = failed("jobs", "submit", "-f", str(jobs_file))
    assert "document 2 (eval): podSets[0].resources.nvidia.com/gpus: unknown resource" in err
    assert "did you mean nvidia.com/gpu?" in err
    assert (
        "document 3 (huge): podSets[0].resources.nvidia.com/gpu: asks for 64 GPUs per pod; "
        "the largest node of flavor h100 has 8 GPUs"
    ) in err
    assert "document 1" not in err
    assert [j["id"] for j in ok_json("jobs", "list")["items"]] == [first["id"]]  # type: ignore[index]
    typo["podSets"] = [{"name": "w", "resources": {"nvidia.com/gpu": 1}}]
    huge["podSets"] = [{"name": "w", "resources": {"nvidia.com/gpu": 8}}]
    jobs_file.write_text(yaml.safe_dump_all([JOB, typo, huge]))
    checked = gpuaas("jobs", "submit", "-f", str(jobs_file), "--dry-run")
    assert checked.exit_code == 0 and "3 job(s) checked: all valid, none created" in checked.stdout
    assert len(ok_json("jobs", "list")["items"]) == 1  # type: ignore[index]
    rerun = gpuaas("jobs", "submit", "-f", str(jobs_file))
    assert rerun.exit_code == 0, rerun.output
    assert "not created again: 1 (train)" in rerun.stdout
    again = gpuaas("jobs", "submit", "-f", str(jobs_file))
    assert "not created again: 1 (train), 2 (eval), 3 (huge)" in again.stdout
    listed = ok_json("jobs", "list")["items"]  # type: ignore[index]
    assert sorted(j["name"] for j in listed) == ["eval", "huge", "train"]


def test_the_jobs_table_counts_gpus_plainly() -> None:
    assert [gpus_text(v) for v in (0.0, 2.0, 0.5, 1.25)] == ["0", "2", "0.5", "1.25"]


def test_jobs_logs_shows_filters_and_follows(http: TestClient, tmp_path: Path) -> None:
    """``jobs logs``: every pod's output labelled, --pod/--tail/--stdout/--stderr, a note on
    stderr when there is none yet, --follow until the job is finished, clear errors."""
    gpuaas("login", URL, ADMIN)
    gpuaas("login", URL, set_up_acme(tmp_path))
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(JOB))  # two pods
    job_id = ok_json("jobs", "submit", "-f", str(spec))["id"]  # type: ignore[index]
    empty = gpuaas("jobs", "logs", str(job_id))
    assert empty.exit_code == 0 and empty.stdout == ""
    assert f"job {job_id} has no output yet" in empty.stderr
    layout = LogLayout(http.app.state.settings.logs_dir)  # type: ignore[attr-defined]
    layout.attempt_dir(job_id, 0).mkdir(parents=True)
    layout.stdout(job_id, 0, 0).write_text("step 1\nstep 2\n")
    layout.stderr(job_id, 0, 0).write_text("warning\n")
    layout.stdout(job_id, 0, 1).write_text("worker\n")
    shown = gpuaas("jobs", "logs", str(job_id))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == (
        "[pod-0] step 1\n[pod-0] step 2\n[pod-0 stderr] warning\n[pod-1] worker\n"
    )
    assert gpuaas("jobs", "logs", str(job_id), "--pod", "0", "--tail", "1").stdout == (
        "step 2\n[stderr] warning\n"
    )
    assert gpuaas("jobs", "logs", str(job_id), "--pod", "0", "--stderr").stdout == "warning\n"
    assert gpuaas("jobs", "logs", str(job_id), "--stdout").stdout == (
        "[pod-0] step 1\n[pod-0] step 2\n[pod-1] worker\n"
    )
    assert "exclude each other" in failed("jobs", "logs", str(job_id), "--stdout", "--stderr")
    assert "pod" in failed("jobs", "logs", str(job_id), "--pod", "5")
    assert "not found" in failed("jobs", "logs", "999999")
    with http.app.state.db.session() as s:  # type: ignore[attr-defined]
        s.execute(update(Job).where(Job.id == job_id).values(state="Succeeded"))
    followed = gpuaas("jobs", "logs", str(job_id), "-f", "--pod", "1")
    assert followed.exit_code == 0, followed.output
    assert followed.stdout == "worker\n"


def test_jobs_manifest_prints_the_objects_for_a_target(http: TestClient, tmp_path: Path) -> None:
    gpuaas("login", URL, ADMIN)
    alice = set_up_acme(tmp_path)
    gpuaas("login", URL, alice)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(JOB))
    job = ok_json("jobs", "submit", "-f", str(spec))
    assert isinstance(job, dict)
    shown = gpuaas("jobs", "manifest", str(job["id"]))
    assert shown.exit_code == 0, shown.stdout
    (obj,) = list(yaml.safe_load_all(shown.stdout))
    assert (obj["apiVersion"], obj["kind"]) == ("batch/v1", "Job")
    assert obj["metadata"]["labels"]["gpuaas.io/job-id"] == str(job["id"])
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == JOB["queue"]
    (volcano,) = ok_json("jobs", "manifest", str(job["id"]), "--target", "volcano")
    assert volcano["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert "target" in failed("jobs", "manifest", str(job["id"]), "--target", "slurm")
