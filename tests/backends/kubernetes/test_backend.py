"""The kubernetes backend's apply / follow / delete path through the official client, against
the fake API server below the client's transport (fake_apiserver.py). Not a live API server:
what only a cluster shows is listed in docs/kubernetes.md."""

from __future__ import annotations

from dataclasses import replace

import pytest
import urllib3
from fake_apiserver import FakeApiServer, status
from k8s_kinds import DRA_CLAIMS, KINDS, RDMA_NODES
from kubernetes import client

from gpuaas.backends.base import BackendUnavailable, EventKind
from gpuaas.backends.kubernetes.backend import KubernetesBackend
from gpuaas.backends.kubernetes.manifests import ManifestOptions, render
from gpuaas.backends.kubernetes.targets import Target


def _backend(
    server: FakeApiServer, target: Target = Target.KUEUE, dra: bool = False
) -> KubernetesBackend:
    """``dra``: the pod set ``main`` of every job claims DRA_CLAIMS."""
    options = ManifestOptions(target=target, claims=DRA_CLAIMS if dra else {}, nodes=RDMA_NODES)
    return KubernetesBackend(server.client(), options, clock=lambda: 5.0)


def _posts(server: FakeApiServer) -> list[tuple[str, dict]]:
    return [(path, body) for method, path, body in server.requests if method == "POST"]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("target", list(Target))
def test_the_client_sends_exactly_the_manifests(kind: str, target: Target) -> None:
    """Through the typed models and back to JSON, nothing is lost or renamed."""
    server = FakeApiServer()
    backend = _backend(server, target, dra=kind == "dra")
    job = KINDS[kind]()
    backend.launch(job)
    expected = render(job, backend.options)
    assert [body for _, body in _posts(server)] == expected
    assert backend.running() == {job.id}


def test_paths_by_kind() -> None:
    server = FakeApiServer()
    backend = _backend(server, dra=True)
    backend.launch(KINDS["dra"]())
    backend.launch(KINDS["multi-pod-set"]())
    paths = [path for path, _ in _posts(server)]
    assert paths == [
        "/apis/resource.k8s.io/v1/namespaces/gpuaas-acme/resourceclaimtemplates",
        "/apis/batch/v1/namespaces/gpuaas-acme/jobs",
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/gpuaas-acme/jobsets",
    ]
    volcano = FakeApiServer()
    _backend(volcano, Target.VOLCANO).launch(KINDS["training-gang"]())
    assert _posts(volcano)[0][0] == "/apis/batch.volcano.sh/v1alpha1/namespaces/gpuaas-acme/jobs"


def test_a_job_runs_and_succeeds_as_its_status_says() -> None:
    server = FakeApiServer()
    backend = _backend(server)
    job = KINDS["training-gang"]()
    backend.launch(job)
    assert backend.poll(10.0) == []  # listed: suspended, nothing running yet
    server.set_status("gpuaas-101-1", {"active": 4, "ready": 4})
    events = backend.poll(11.0)
    assert [(e.job_id, e.kind) for e in events] == [(101, EventKind.STARTED)]
    watches = [p for m, p, _ in server.requests if "watch=true" in p]
    assert watches and "resourceVersion=" in watches[-1] and "managed-by" in watches[-1]
    server.set_status(
        "gpuaas-101-1",
        {"succeeded": 4, "conditions": [{"type": "Complete", "status": "True"}]},
    )
    events = backend.poll(12.0)
    assert [(e.kind, e.exit_code) for e in events] == [(EventKind.SUCCEEDED, 0)]
    assert backend.running() == set()


def test_a_failure_carries_the_reason_and_the_pods_exit_code() -> None:
    server = FakeApiServer()
    backend = _backend(server)
    job = KINDS["non-containerized"]()
    backend.launch(job)
    backend.poll(1.0)
    server.add_pod("gpuaas-acme", "gpuaas-106-0-0-abcde",
                   {"gpuaas.io/job-id": "106", "gpuaas.io/attempt": "0"}, 3)  # fmt: skip
    failed = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
              "message": "Job was active longer than specified deadline"}  # fmt: skip
    server.set_status("gpuaas-106-0", {"failed": 1, "conditions": [failed]})
    started, event = backend.poll(2.0)
    assert started.kind is EventKind.STARTED
    assert event.kind is EventKind.FAILED
    assert event.exit_code == 3
    assert event.reason.startswith("DeadlineExceeded: Job was active longer")


def test_jobset_and_volcano_status() -> None:
    server = FakeApiServer()
    backend = _backend(server)
    backend.launch(KINDS["multi-pod-set"]())
    backend.poll(1.0)
    server.set_status("gpuaas-102-0", {"replicatedJobsStatus": [{"name": "workers", "active": 1}]})
    assert [e.kind for e in backend.poll(2.0)] == [EventKind.STARTED]
    server.set_status("gpuaas-102-0", {"conditions": [{"type": "Failed", "status": "True",
                                                       "reason": "FailedJobs"}]})  # fmt: skip
    assert [e.kind for e in backend.poll(3.0)] == [EventKind.FAILED]
    volcano = FakeApiServer()
    vb = _backend(volcano, Target.VOLCANO)
    vb.launch(KINDS["inference"]())
    vb.poll(1.0)
    volcano.set_status("gpuaas-107-0", {"state": {"phase": "Running"}})
    volcano.set_status("gpuaas-107-0", {"state": {"phase": "Completed"}})
    assert [e.kind for e in vb.poll(2.0)] == [EventKind.STARTED, EventKind.SUCCEEDED]


def test_conflict_adopts_this_attempts_object_and_never_creates_twice() -> None:
    server = FakeApiServer()
    job = KINDS["training-gang"]()
    _backend(server).launch(job)
    # a restarted control plane launches the same attempt again: adopted, followed
    again = _backend(server)
    again.launch(replace(job, started_at=1.0))
    assert again.running() == {101}
    assert len([o for k, o in server.objects.items() if k[2] == "gpuaas-101-1"]) == 1
    assert [e.kind for e in again.poll(1.0)] == []
    # an object of that name that is not this job's: never overwritten, the job is rejected
    server.objects[next(iter(server.objects))]["metadata"]["labels"]["gpuaas.io/job-id"] = "9"
    third = _backend(server)
    third.launch(job)
    (event,) = third.poll(1.0)
    assert event.kind is EventKind.REJECTED
    assert "already exists and is not this job's" in event.reason
    assert third.running() == set()


def test_invalid_is_rejected_with_the_api_message_and_leaves_nothing_behind() -> None:
    server = FakeApiServer()
    message = ('Job.batch "gpuaas-105-0" is invalid: spec.template.spec.containers[0].image: '
               "Required value")  # fmt: skip
    server.fail("POST", "/jobs", status(422, "Invalid", message))
    backend = _backend(server, dra=True)
    backend.launch(KINDS["dra"]())
    (event,) = backend.poll(1.0)
    assert event.kind is EventKind.REJECTED
    assert message in event.reason
    assert server.objects == {}  # the claim template created first was deleted again
    deletes = [p for m, p, _ in server.requests if m == "DELETE"]
    assert deletes and "resourceclaimtemplates/gpuaas-105-0-main-gpus" in deletes[0]


@pytest.mark.parametrize(
    "answer",
    [
        status(403, "Forbidden", 'jobs.batch is forbidden: User "system:serviceaccount:gpuaas" '
               'cannot create resource "jobs" in the namespace "gpuaas-acme"'),
        status(404, "NotFound", 'namespaces "gpuaas-acme" not found'),
        status(500, "InternalError", "etcdserver: request timed out"),
        status(429, "TooManyRequests", "slow down"),
        urllib3.exceptions.ProtocolError("Connection refused"),
        urllib3.exceptions.MaxRetryError(None, "https://k8s.test", "Connection refused"),
    ],
)  # fmt: skip
def test_cluster_trouble_is_unavailable_and_a_retry_creates_once(answer) -> None:
    server = FakeApiServer()
    server.fail("POST", "/jobs", answer)
    backend = _backend(server)
    job = KINDS["training-gang"]()
    with pytest.raises(BackendUnavailable, match="kubernetes: create Job"):
        backend.launch(job)
    assert backend.running() == set()
    backend.launch(job)  # the driver retries
    assert backend.running() == {101}
    assert len(server.objects) == 1


def test_a_create_whose_answer_was_lost_is_adopted_on_retry() -> None:
    server = FakeApiServer()
    backend = _backend(server)
    job = KINDS["mig"]()
    real = server.request

    def lose_answer(method, url, body=None, **kw):
        real(method, url, body=body, **kw)  # the server created it ...
        raise urllib3.exceptions.ProtocolError("connection reset")  # ... the answer is lost

    server.request = lose_answer  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable):
        backend.launch(job)
    server.request = real  # type: ignore[method-assign]
    backend.launch(job)
    assert backend.running() == {104}
    assert len(server.objects) == 1


def test_cancel_deletes_foreground_with_grace_and_the_claim_templates() -> None:
    server = FakeApiServer()
    backend = _backend(server, dra=True)
    backend.launch(KINDS["dra"]())
    backend.cancel(105, grace=7.0)
    deletes = [(p, b) for m, p, b in server.requests if m == "DELETE"]
    assert "/jobs/gpuaas-105-0?" in deletes[0][0]
    assert "propagationPolicy=Foreground" in deletes[0][0]
    assert "gracePeriodSeconds=7" in deletes[0][0]
    assert "resourceclaimtemplates/gpuaas-105-0-main-gpus" in deletes[1][0]
    assert server.objects == {}
    assert backend.running() == set()
    backend.cancel(105)  # unknown now: ignored
    # an object already gone is what cancel asked for
    backend.launch(KINDS["mig"]())
    server.remove("gpuaas-104-2")
    backend.cancel(104)
    assert backend.running() == set()


def test_an_expired_watch_lists_again() -> None:
    server = FakeApiServer()
    backend = _backend(server)
    backend.launch(KINDS["mig"]())
    backend.poll(1.0)
    server.set_status("gpuaas-104-2", {"active": 2})
    server.expired.add("/apis/batch/v1/jobs")
    assert [e.kind for e in backend.poll(2.0)] == [EventKind.STARTED]
    lists = [p for m, p, _ in server.requests if m == "GET" and "/apis/batch/v1/jobs" in p
             and "watch=true" not in p]  # fmt: skip
    assert len(lists) == 2


def test_an_object_deleted_behind_gpuaas_is_lost() -> None:
    server = FakeApiServer()
    backend = _backend(server)
    backend.launch(KINDS["mig"]())
    backend.poll(1.0)
    server.remove("gpuaas-104-2")
    (event,) = backend.poll(2.0)
    assert event.kind is EventKind.LOST
    assert "was deleted" in event.reason


def test_a_fresh_object_is_not_lost_before_a_sync_could_show_it() -> None:
    server = FakeApiServer()
    backend = _backend(server)
    backend.launch(KINDS["mig"]())
    backend.poll(1.0)
    backend.launch(KINDS["inference"]())  # created after the list: the next watch shows it
    assert backend.poll(2.0) == []
    assert backend.running() == {104, 107}


def test_without_a_kubeconfig_the_backend_is_unavailable_not_broken() -> None:
    def no_config():
        raise FileNotFoundError("~/.kube/config")

    backend = KubernetesBackend(no_config)
    with pytest.raises(BackendUnavailable, match="no usable kubeconfig"):
        backend.launch(KINDS["mig"]())


@pytest.mark.parametrize("kind", list(KINDS))
def test_core_objects_round_trip_through_the_client_models(kind: str) -> None:
    api = client.ApiClient()
    models = {"Job": client.V1Job, "ResourceClaimTemplate": client.V1ResourceClaimTemplate}
    for target in Target:
        options = ManifestOptions(target=target, claims=DRA_CLAIMS, nodes=RDMA_NODES)
        for obj in render(KINDS[kind](), options):
            if obj["apiVersion"] in ("batch/v1", "resource.k8s.io/v1"):
                model = models[obj["kind"]].from_dict(obj)
                assert api.sanitize_for_serialization(model) == obj


def test_the_server_builds_it_from_its_settings(tmp_path) -> None:
    from gpuaas.service.backends import Backends, check_backend_name
    from gpuaas.service.settings import Settings

    assert check_backend_name("kubernetes") == "kubernetes"
    settings = Settings(
        data_dir=tmp_path,
        backend="kubernetes",
        kube_target="volcano",
        kube_namespace="team-{tenant}",
        kube_config=str(tmp_path / "none"),
    )
    backend = Backends(settings).get("kubernetes")
    assert isinstance(backend, KubernetesBackend) and backend.blocking
    assert backend.options.target is Target.VOLCANO
    assert backend.options.namespace == "team-{tenant}"
    with pytest.raises(BackendUnavailable, match="no usable kubeconfig"):
        backend.launch(KINDS["mig"]())  # the kubeconfig named does not exist


def test_an_object_the_client_model_refuses_is_rejected_and_nothing_is_sent(monkeypatch) -> None:
    import gpuaas.backends.kubernetes.backend as b

    real = b.render

    def broken(job, options):
        objects = real(job, options)
        objects[-1]["spec"]["parallelism"] = "many"  # no integer: V1JobSpec refuses it
        return objects

    monkeypatch.setattr(b, "render", broken)
    server = FakeApiServer()
    backend = _backend(server)
    backend.launch(KINDS["mig"]())
    (event,) = backend.poll(1.0)
    assert event.kind is EventKind.REJECTED
    assert "does not fit the Kubernetes API" in event.reason and "parallelism" in event.reason
    assert _posts(server) == []
