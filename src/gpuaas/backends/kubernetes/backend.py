"""The Kubernetes backend: apply a job's manifests with the official client, follow them back.

Apply. :meth:`KubernetesBackend.launch` renders the job for the configured target
(:mod:`.manifests`) and creates each object: core kinds through their typed APIs and models
(``BatchV1Api``, ``ResourceV1Api``; the manifest is read into ``V1Job`` /
``V1ResourceClaimTemplate``), custom resources (JobSet, Volcano Job) through
``CustomObjectsApi``. The API server's answers become what the reconciler understands:

* **409 AlreadyExists**: the object is read back; if its labels name this job *and* this
  attempt it is adopted (a retried create whose first answer was lost, or a resume after a
  control-plane restart); an object of that name gpuaas did not make for this attempt is never
  overwritten and the job is REJECTED. So a ``(job, attempt)`` is created once, never twice.
* **400 / 422 Invalid**: REJECTED with the API's own message (the field and the problem).
* **403 Forbidden** and **404 NotFound** on create: :class:`BackendUnavailable`, retried. Both
  mean the cluster is not set up for gpuaas (no RBAC for its service account in the tenant's
  namespace, the namespace not created, a ResourceQuota exhausted, the CRD not installed), not
  that the job is wrong: an operator fixes it and the waiting jobs go on, where REJECTED
  would fail every job submitted meanwhile for good.
* **5xx, 429, connection errors**: :class:`BackendUnavailable`.

An object created before a later one is refused is deleted again, so a rejected job leaves
nothing behind.

Follow. :meth:`poll` keeps, per kind it launched, a list of gpuaas's objects
(``app.kubernetes.io/managed-by=gpuaas``, all namespaces) and its ``resourceVersion``, then
watches from that version (``timeout_seconds`` bounds each poll); a watch that expired
(410 Gone) lists again. Status maps to events: a Job's ``Complete`` / ``Failed`` conditions, a
JobSet's ``Completed`` / ``Failed``, a Volcano Job's phase; pods running (``active``/``ready``,
Volcano ``Running``) is STARTED. A failure reads its pods for the first non-zero exit code. An
object that vanished without gpuaas cancelling it is LOST.

Cancel deletes the workload with ``propagationPolicy: Foreground`` (its pods go first, each
with ``grace`` seconds) and its claim templates in the background; an object already gone is
fine.

Not tested against a live API server (none can run where this was built): the client, the
models and the error handling are exercised with recorded API responses in
``tests/backends/kubernetes/test_backend.py``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuaas.backends.base import (
    DEFAULT_GRACE,
    BackendEvent,
    BackendJob,
    BackendUnavailable,
    EventKind,
)
from gpuaas.backends.kubernetes.fluid import FLUID_API, RUNTIME_KINDS, dataset_objects, fluid_name
from gpuaas.backends.kubernetes.fluid_status import FluidState, fluid_state, label_of
from gpuaas.backends.kubernetes.manifests import (
    ATTEMPT,
    JOB_ID,
    MANAGED_BY,
    ManifestOptions,
    namespace_of,
    render,
)
from gpuaas.model.dataset import CacheRuntime, Dataset
from gpuaas.model.errors import InvalidValue


@dataclass(frozen=True, slots=True)
class Kind:
    """Where the API serves one kind: ``group`` ("" for core), version, plural."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


JOB = Kind("batch", "v1", "jobs", "Job")
JOBSET = Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
VOLCANO_JOB = Kind("batch.volcano.sh", "v1alpha1", "jobs", "Job")
CLAIM_TEMPLATE = Kind("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
KINDS = {k.api_version + "/" + k.kind: k for k in (JOB, JOBSET, VOLCANO_JOB, CLAIM_TEMPLATE)}
WORKLOADS = (JOB, JOBSET, VOLCANO_JOB)
SELECTOR = f"{MANAGED_BY}=gpuaas"


#: seconds a Fluid call may take: the reconciler makes them on its own thread, which a hung
#: connection must not hold
FLUID_TIMEOUT = 10

#: the preload a DataLoad was made for (the time it was asked, as the service stores it)
PRELOAD_AT = "gpuaas.io/preload-at"


class PreloadRefused(Exception):
    """The cluster refused a preload's Fluid objects for good (invalid, or Fluid not
    installed): the message says which object and why."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient for ``kubeconfig`` (and ``context``); without one, the in-cluster service
    account when gpuaas runs in a pod, else ``~/.kube/config``."""
    from kubernetes import client, config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except config.ConfigException:
        return config.new_client_from_config(context=context)


def kind_of(obj: Mapping[str, Any]) -> Kind:
    key = f"{obj['apiVersion']}/{obj['kind']}"
    if key not in KINDS:
        raise InvalidValue("kind", f"the kubernetes backend cannot apply {key}")
    return KINDS[key]


@dataclass(slots=True)
class _Followed:
    job_id: int
    attempt: int
    namespace: str
    name: str
    kind: Kind
    claims: list[tuple[str, str]] = field(default_factory=list)
    started: bool = False
    #: how many syncs of its kind had completed when it was created: a sync after that one
    #: that does not show the object means it is gone
    syncs_before: int = 0


def api_message(exc: Any) -> str:
    """The API server's sentence from an ApiException (its Status ``message``), else the
    exception's reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            status = json.loads(body)
            if isinstance(status, dict) and status.get("message"):
                return str(status["message"])
        except ValueError:
            pass
    return f"{getattr(exc, 'status', '')} {getattr(exc, 'reason', '')}".strip()


class KubernetesBackend:
    """See the module docstring. ``api_client`` is a ``kubernetes.client.ApiClient`` (or a
    callable that makes one, called on first use so a server without a kubeconfig starts and
    shows the backend as unavailable rather than failing)."""

    name = "kubernetes"
    time_scale = 1.0
    blocking = True

    def __init__(
        self,
        api_client: Any | Callable[[], Any],
        options: ManifestOptions | None = None,
        *,
        watch_seconds: int = 1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = options or ManifestOptions()
        self.watch_seconds = max(1, watch_seconds)  # 0 would ask the server for no timeout
        self.clock = clock
        self._make = api_client if callable(api_client) else None
        self._api = None if callable(api_client) else api_client
        self._jobs: dict[int, _Followed] = {}
        self._seen: dict[Kind, dict[tuple[str, str], dict[str, Any]]] = {}
        self._versions: dict[Kind, str | None] = {}
        self._syncs: dict[Kind, int] = {}
        self._events: list[BackendEvent] = []
        self._lock = threading.Lock()

    # --- the client ---------------------------------------------------------------------
    def api(self) -> Any:
        if self._api is None:
            assert self._make is not None
            try:
                self._api = self._make()
            except Exception as exc:  # kubeconfig missing or unreadable
                raise BackendUnavailable(f"kubernetes: no usable kubeconfig: {exc}") from None
        return self._api

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` with transport failures as BackendUnavailable; ApiExceptions with a status
        the caller decides on are passed through."""
        from kubernetes.client.exceptions import ApiException

        try:
            return fn()
        except ApiException as exc:
            if exc.status in (0, 429) or (exc.status or 0) >= 500:
                raise BackendUnavailable(f"kubernetes: {what}: {api_message(exc)}") from None
            raise
        except OSError as exc:
            raise BackendUnavailable(f"kubernetes: {what}: {exc}") from None
        except Exception as exc:
            import urllib3

            if isinstance(exc, urllib3.exceptions.HTTPError):
                raise BackendUnavailable(f"kubernetes: {what}: {exc}") from None
            raise

    # --- objects ------------------------------------------------------------------------
    @staticmethod
    def _body(obj: Mapping[str, Any]) -> Any:
        """``obj`` as the client's model for a core kind (ValueError when it does not fit),
        as itself for a custom resource."""
        from kubernetes import client

        kind = kind_of(obj)
        if kind == JOB:
            return client.V1Job.from_dict(obj)
        if kind == CLAIM_TEMPLATE:
            return client.V1ResourceClaimTemplate.from_dict(obj)
        return dict(obj)

    def _create(self, obj: Mapping[str, Any], body: Any) -> None:
        from kubernetes import client

        kind = kind_of(obj)
        namespace = obj["metadata"]["namespace"]
        api = self.api()
        if kind == JOB:
            client.BatchV1Api(api).create_namespaced_job(namespace, body)
        elif kind == CLAIM_TEMPLATE:
            client.ResourceV1Api(api).create_namespaced_resource_claim_template(namespace, body)
        else:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, body
            )

    def _read(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        from kubernetes import client

        api = self.api()
        if kind == JOB:
            model = client.BatchV1Api(api).read_namespaced_job(name, namespace)
            return api.sanitize_for_serialization(model)
        if kind == CLAIM_TEMPLATE:
            model = client.ResourceV1Api(api).read_namespaced_resource_claim_template(
                name, namespace
            )
            return api.sanitize_for_serialization(model)
        return client.CustomObjectsApi(api).get_namespaced_custom_object(
            kind.group, kind.version, namespace, kind.plural, name
        )

    def _delete(self, kind: Kind, namespace: str, name: str, policy: str, grace: int) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = self.api()
        try:
            if kind == JOB:
                client.BatchV1Api(api).delete_namespaced_job(
                    name, namespace, propagation_policy=policy, grace_period_seconds=grace
                )
            elif kind == CLAIM_TEMPLATE:
                client.ResourceV1Api(api).delete_namespaced_resource_claim_template(
                    name, namespace, propagation_policy=policy
                )
            else:
                client.CustomObjectsApi(api).delete_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name,
                    propagation_policy=policy, grace_period_seconds=grace,
                )  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:  # already gone is what was asked
                raise

    # --- Backend ------------------------------------------------------------------------
    def launch(self, job: BackendJob) -> None:
        followed = self._jobs.get(job.id)
        if followed is not None and followed.attempt == job.attempt:
            return
        try:
            objects = render(job, self.options)
        except InvalidValue as exc:
            self._reject(job.id, f"cannot express the job for Kubernetes: {exc}")
            return
        workload = objects[-1]
        meta = workload["metadata"]
        kind = kind_of(workload)
        followed = _Followed(job.id, job.attempt, meta["namespace"], meta["name"], kind,
                             syncs_before=self._syncs.get(kind, 0))  # fmt: skip
        created: list[Mapping[str, Any]] = []
        for obj in objects:
            problem = self._apply(job, obj)
            if problem is not None:
                self._undo(created)
                self._reject(job.id, problem)
                return
            created.append(obj)
            if kind_of(obj) == CLAIM_TEMPLATE:
                followed.claims.append((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        with self._lock:
            self._jobs[job.id] = followed

    def _apply(self, job: BackendJob, obj: Mapping[str, Any]) -> str | None:
        """Create ``obj`` (or adopt it, see the module docstring); the reason the job is
        rejected, or None."""
        from kubernetes.client.exceptions import ApiException

        kind, meta = kind_of(obj), obj["metadata"]
        what = f"create {kind.kind} {meta['namespace']}/{meta['name']}"
        try:
            body = self._body(obj)
        except ValueError as exc:  # the client's model refuses it: it would never apply
            return f"{kind.kind} {meta['name']} does not fit the Kubernetes API: {exc}"
        try:
            self._call(what, lambda: self._create(obj, body))
            return None
        except ApiException as exc:
            status, message = exc.status, api_message(exc)
            if status == 409:
                existing = self._call(
                    what, lambda: self._read(kind, meta["namespace"], meta["name"])
                )
                labels = (existing.get("metadata") or {}).get("labels") or {}
                if labels.get(JOB_ID) == str(job.id) and labels.get(ATTEMPT) == str(job.attempt):
                    return None
                return (
                    f"{kind.kind} {meta['namespace']}/{meta['name']} already exists and is not "
                    f"this job's (attempt {job.attempt})"
                )
            if status in (400, 422):
                return f"the API server refused {kind.kind} {meta['name']}: {message}"
            raise BackendUnavailable(f"kubernetes: {what}: {message}") from None

    def _undo(self, created: list[Mapping[str, Any]]) -> None:
        for obj in reversed(created):
            kind, meta = kind_of(obj), obj["metadata"]
            self._remove(kind, meta["namespace"], meta["name"], "Background", 0)

    def _remove(self, kind: Kind, namespace: str, name: str, policy: str, grace: int) -> None:
        from kubernetes.client.exceptions import ApiException

        what = f"delete {kind.kind} {namespace}/{name}"
        try:
            self._call(what, lambda: self._delete(kind, namespace, name, policy, grace))
        except ApiException as exc:  # 403: gpuaas may not delete there (RBAC): retry later
            raise BackendUnavailable(f"kubernetes: {what}: {api_message(exc)}") from None

    def _reject(self, job_id: int, reason: str) -> None:
        with self._lock:
            self._events.append(BackendEvent(job_id, EventKind.REJECTED, self.clock(), reason))

    def cancel(self, job_id: int, grace: float = DEFAULT_GRACE) -> None:
        followed = self._jobs.get(job_id)
        if followed is None:
            return
        seconds = max(0, int(grace))
        self._remove(followed.kind, followed.namespace, followed.name, "Foreground", seconds)
        for namespace, name in followed.claims:
            self._remove(CLAIM_TEMPLATE, namespace, name, "Background", 0)
        with self._lock:
            self._jobs.pop(job_id, None)

    def running(self) -> set[int]:
        return set(self._jobs)

    def poll(self, now: float) -> list[BackendEvent]:
        for kind in sorted({f.kind for f in self._jobs.values()}, key=lambda k: k.api_version):
            self._sync(kind)
        for followed in list(self._jobs.values()):
            self._judge(followed, now)
        with self._lock:
            events, self._events = self._events, []
        return events

    # --- following ----------------------------------------------------------------------
    def _list_fn(self, kind: Kind) -> Callable[..., Any]:
        from kubernetes import client

        api = self.api()
        if kind == JOB:
            return client.BatchV1Api(api).list_job_for_all_namespaces
        custom = client.CustomObjectsApi(api)

        def list_custom(**kwargs: Any) -> Any:
            return custom.list_custom_object_for_all_namespaces(
                kind.group, kind.version, kind.plural, **kwargs
            )

        list_custom.__doc__ = ":return: object"  # the watch reads the return type from here
        return list_custom

    def _sync(self, kind: Kind) -> None:
        """Bring ``self._seen[kind]`` up to date: a list the first time and after a 410, a
        watch from the last resourceVersion otherwise."""
        from kubernetes.client.exceptions import ApiException

        api = self.api()
        fn = self._list_fn(kind)
        version = self._versions.get(kind)
        if version is None:
            listed = self._call(f"list {kind.plural}", lambda: fn(label_selector=SELECTOR))
            data = listed if isinstance(listed, dict) else api.sanitize_for_serialization(listed)
            self._seen[kind] = {_key(o): o for o in data.get("items") or []}
            self._versions[kind] = (data.get("metadata") or {}).get("resourceVersion")
            self._syncs[kind] = self._syncs.get(kind, 0) + 1
            return
        try:
            for event in self._call(f"watch {kind.plural}", lambda: list(self._watch(fn, version))):
                obj = event["raw_object"]
                if event["type"] == "BOOKMARK":
                    self._versions[kind] = obj["metadata"]["resourceVersion"]
                    continue
                if event["type"] == "DELETED":
                    self._seen[kind].pop(_key(obj), None)
                else:
                    self._seen[kind][_key(obj)] = obj
                self._versions[kind] = obj["metadata"].get("resourceVersion", version)
            self._syncs[kind] = self._syncs.get(kind, 0) + 1
        except ApiException as exc:
            if exc.status != 410:
                raise BackendUnavailable(
                    f"kubernetes: watch {kind.plural}: {api_message(exc)}"
                ) from None
            self._versions[kind] = None  # expired: list again
            self._sync(kind)

    def _watch(self, fn: Callable[..., Any], version: str) -> Iterator[dict[str, Any]]:
        from kubernetes import watch

        yield from watch.Watch().stream(
            fn, label_selector=SELECTOR, resource_version=version,
            timeout_seconds=self.watch_seconds, allow_watch_bookmarks=True,
        )  # fmt: skip

    def _judge(self, followed: _Followed, now: float) -> None:
        obj = self._seen.get(followed.kind, {}).get((followed.namespace, followed.name))
        if obj is None:
            if self._syncs.get(followed.kind, 0) > followed.syncs_before:
                # a list or watch that began after it was created does not show it: deleted
                # behind gpuaas's back
                reason = f"{followed.kind.kind} {followed.namespace}/{followed.name} was deleted"
                self._finish(followed, BackendEvent(followed.job_id, EventKind.LOST, now, reason))
            return
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(ATTEMPT) != str(followed.attempt):
            return
        started, outcome, reason = status_of(followed.kind, obj)
        if (started or outcome is EventKind.SUCCEEDED) and not followed.started:
            followed.started = True
            self._events.append(BackendEvent(followed.job_id, EventKind.STARTED, now))
        if outcome is EventKind.SUCCEEDED:
            self._finish(followed, BackendEvent(followed.job_id, outcome, now, reason, 0))
        elif outcome is EventKind.FAILED:
            code = self._exit_code(followed)
            self._finish(followed, BackendEvent(followed.job_id, outcome, now, reason, code))

    def _finish(self, followed: _Followed, event: BackendEvent) -> None:
        with self._lock:
            self._events.append(event)
            self._jobs.pop(followed.job_id, None)

    def _exit_code(self, followed: _Followed) -> int | None:
        from kubernetes import client

        selector = f"{JOB_ID}={followed.job_id},{ATTEMPT}={followed.attempt}"
        try:
            pods = self._call("list pods", lambda: client.CoreV1Api(self.api()).list_namespaced_pod(
                followed.namespace, label_selector=selector))  # fmt: skip
        except Exception:  # the exit code is a detail: the failure stands without it
            return None
        for pod in pods.items or []:
            for status in (pod.status and pod.status.container_statuses) or []:
                terminated = status.state and status.state.terminated
                if terminated and terminated.exit_code:
                    return int(terminated.exit_code)
        return None

    # --- Fluid: preloads and where a dataset is warm -------------------------------------
    def preload_dataset(self, dataset: Dataset, nodes: list[str], asked_at: float) -> None:
        """Apply ``dataset``'s Fluid ``Dataset`` and runtime (their node affinity widened to
        ``nodes`` when they exist already) and a ``DataLoad`` pinned to ``nodes``, annotated
        with ``asked_at``; a DataLoad of an earlier preload is replaced, this one's is kept.
        PreloadRefused when the cluster refuses an object for good; BackendUnavailable when it
        cannot be reached (retry)."""
        from kubernetes.client.exceptions import ApiException

        namespace = namespace_of(dataset.tenant, self.options.namespace)
        name = fluid_name(dataset.name)
        existing = self._fluid_get("datasets", namespace, name)
        pinned = set(_affinity_nodes((existing or {}).get("spec", {}).get("nodeAffinity")))
        everywhere = sorted(pinned | set(nodes))
        fluid_dataset, runtime = dataset_objects(
            dataset, namespace, preload=False, nodes=everywhere
        )
        *_, load = dataset_objects(dataset, namespace, preload=True, nodes=nodes)
        load["metadata"]["annotations"] = {PRELOAD_AT: repr(asked_at)}
        for obj in (fluid_dataset, runtime):
            plural = obj["kind"].lower() + "s"
            if existing is not None and set(everywhere) == pinned:
                break  # there already, pinned where asked: nothing to change
            if not self._fluid_create(plural, obj):  # there already: widen its nodes
                self._fluid("patch", plural, namespace, name, {"spec": obj["spec"]})
        load_name = load["metadata"]["name"]
        before = self._fluid_get("dataloads", namespace, load_name)
        if before is None and self._fluid_create("dataloads", load):
            return
        annotations = ((before or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get(PRELOAD_AT) == repr(asked_at):
            return  # this preload's, made by an earlier call
        try:
            self._fluid("delete", "dataloads", namespace, load_name)
        except ApiException as exc:
            if exc.status != 404:
                message = api_message(exc)
                raise BackendUnavailable(f"kubernetes: delete DataLoad: {message}") from None
        if not self._fluid_create("dataloads", load):  # the old one is still going away
            raise BackendUnavailable(f"kubernetes: DataLoad {namespace}/{load_name} is deleting")

    def fluid_state(self, dataset: Dataset, asked_at: float | None = None) -> FluidState:
        """What Fluid says of ``dataset`` (:mod:`.fluid_status`); the DataLoad counts only
        when it is the preload asked at ``asked_at`` (None: whichever is there)."""
        from kubernetes import client

        namespace = namespace_of(dataset.tenant, self.options.namespace)
        name = fluid_name(dataset.name)
        found = self._fluid_get("datasets", namespace, name)
        if found is None:
            return FluidState(exists=False)
        runtime_plural = RUNTIME_KINDS[dataset.runtime].lower() + "s"
        runtime = self._fluid_get(runtime_plural, namespace, name)
        load = self._fluid_get("dataloads", namespace, f"{name}-preload")
        if load is not None and asked_at is not None:
            annotations = (load.get("metadata") or {}).get("annotations") or {}
            if annotations.get(PRELOAD_AT) != repr(asked_at):
                load = None
        label = label_of(runtime, namespace, name)
        core = client.CoreV1Api(self.api())
        listed = self._call(
            "list nodes",
            lambda: core.list_node(label_selector=f"{label}=true", _request_timeout=FLUID_TIMEOUT),
        )
        nodes = self.api().sanitize_for_serialization(listed).get("items") or []
        thin = dataset.runtime is CacheRuntime.THIN
        return fluid_state(found, load, nodes, label, thin=thin)

    def _fluid(self, verb: str, plural: str, namespace: str, *args: Any) -> Any:
        """``CustomObjectsApi.<verb>_namespaced_custom_object`` on a Fluid kind, through
        :meth:`_call` (transport failures are BackendUnavailable)."""
        from kubernetes import client

        custom = client.CustomObjectsApi(self.api())
        fn = getattr(custom, f"{verb}_namespaced_custom_object")
        group, version = FLUID_API.split("/")
        what = f"{verb} {plural} {namespace}/{args[0] if isinstance(args[0], str) else ''}"
        return self._call(
            what,
            lambda: fn(group, version, namespace, plural, *args, _request_timeout=FLUID_TIMEOUT),
        )

    def _fluid_get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._fluid("get", plural, namespace, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise BackendUnavailable(f"kubernetes: get {plural}: {api_message(exc)}") from None

    def _fluid_create(self, plural: str, obj: Mapping[str, Any]) -> bool:
        """Create a Fluid object; False when it exists already. 400/422 and 404 (the CRD is
        not served: Fluid not installed) are PreloadRefused; 403 is BackendUnavailable."""
        from kubernetes.client.exceptions import ApiException

        assert obj["apiVersion"] == FLUID_API
        meta = obj["metadata"]
        what = f"create {obj['kind']} {meta['namespace']}/{meta['name']}"
        try:
            self._fluid("create", plural, meta["namespace"], dict(obj))
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status in (400, 422):
                raise PreloadRefused(
                    f"the API server refused {obj['kind']} {meta['name']}: {api_message(exc)}"
                ) from None
            if exc.status == 404:
                raise PreloadRefused(
                    f"the cluster serves no {FLUID_API} {obj['kind']} in {meta['namespace']} "
                    f"(is Fluid installed, the namespace there?): {api_message(exc)}"
                ) from None
            raise BackendUnavailable(f"kubernetes: {what}: {api_message(exc)}") from None


def _affinity_nodes(affinity: Mapping[str, Any] | None) -> list[str]:
    """The hostnames a Fluid Dataset's ``spec.nodeAffinity`` pins it to."""
    required = (affinity or {}).get("required") or {}
    return [
        str(v)
        for term in required.get("nodeSelectorTerms") or []
        for expr in term.get("matchExpressions") or []
        if expr.get("key") == "kubernetes.io/hostname"
        for v in expr.get("values") or []
    ]


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def _condition(obj: Mapping[str, Any], *types: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") in types and c.get("status") == "True":
            return c
    return None


def _because(c: Mapping[str, Any]) -> str:
    return ": ".join(x for x in (c.get("reason"), c.get("message")) if x)


def status_of(kind: Kind, obj: Mapping[str, Any]) -> tuple[bool, EventKind | None, str]:
    """(pods have run, SUCCEEDED / FAILED / None, the cluster's reason) of a workload: a job
    that failed before any pod ran (refused by the cluster, deadline while still suspended)
    reports FAILED without STARTED."""
    status = obj.get("status") or {}
    if kind == VOLCANO_JOB:
        state = status.get("state") or {}
        phase = state.get("phase", "")
        reason = ": ".join(x for x in (state.get("reason"), state.get("message")) if x)
        if phase == "Completed":
            return True, EventKind.SUCCEEDED, reason
        if phase in ("Failed", "Aborted", "Terminated"):
            return True, EventKind.FAILED, reason or phase
        return phase in ("Running", "Completing"), None, ""
    if kind == JOBSET:
        ran = any(
            sum(r.get(k) or 0 for k in ("active", "ready", "succeeded", "failed")) > 0
            for r in status.get("replicatedJobsStatus") or []
        )
    else:
        ran = sum(status.get(k) or 0 for k in ("active", "ready", "succeeded", "failed")) > 0
    done = _condition(obj, "Complete", "Completed")
    if done is not None:
        return True, EventKind.SUCCEEDED, _because(done)
    failed = _condition(obj, "Failed")
    if failed is not None:
        return ran, EventKind.FAILED, _because(failed) or "Failed"
    return ran, None, ""
