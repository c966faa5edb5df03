"""The local backend with real processes: environment and devices, exit codes and stderr,
gangs, cancel with a grace period, restart (reattach, exit codes read from the wrapper's file,
lost processes, reused pids), and jobs it refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuaas.backends.base import BackendEvent, BackendJob, EventKind
from gpuaas.backends.local import LocalBackend, procs
from gpuaas.backends.local.backend import WRAPPER
from gpuaas.backends.local.state import RunRecord, saved_runs
from gpuaas.backends.local.wrapper import ALREADY_CLAIMED
from gpuaas.backends.logs import LogLayout
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement

UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}" for i in range(4)]
MIG = "MIG-11111111-2222-3333-4444-555555555555"
ENDS = {EventKind.SUCCEEDED, EventKind.FAILED, EventKind.LOST, EventKind.REJECTED}


def pod(rank: int, uuids: list[str], node: str = "node-1", pod_set: str = "main") -> PodPlacement:
    devices = tuple(
        DeviceRef(f"gpu-{i}", u, i, DeviceKind.MIG if u.startswith("MIG") else DeviceKind.GPU)
        for i, u in enumerate(uuids)
    )
    return PodPlacement(pod_set, rank, rank, node, 1000, 1 << 30, devices)


def job(job_id: int = 1, attempt: int = 0, pods: int = 1, **spec: Any) -> BackendJob:
    spec.setdefault("command", ["true"])
    placed = tuple(pod(r, [UUIDS[r]], node=f"node-{r}") for r in range(pods))
    return BackendJob(job_id, f"job-{job_id}", {"name": f"job-{job_id}", **spec}, placed,
                      attempt=attempt)  # fmt: skip


@pytest.fixture
def layout(tmp_path: Path) -> LogLayout:
    return LogLayout(tmp_path / "logs")


@pytest.fixture
def backends(tmp_path: Path, layout: LogLayout) -> Iterator[list[LocalBackend]]:
    """Backends made by a test; every process they started is killed after it."""
    made: list[LocalBackend] = []
    yield made
    for record in saved_runs(tmp_path / "state"):
        for p in record.pods:
            if p.pid is not None and p.start is not None:
                procs.signal_group(p.pid, p.start, signal.SIGKILL)


def make(tmp_path: Path, layout: LogLayout, made: list[LocalBackend], **kw: Any) -> LocalBackend:
    kw.setdefault("stop_grace", 1.0)
    backend = LocalBackend(tmp_path / "state", layout, **kw)
    made.append(backend)
    return backend


def until_end(backend: LocalBackend, job_id: int, timeout: float = 15) -> list[BackendEvent]:
    """Poll until ``job_id`` ends; every event of it, in order."""
    seen: list[BackendEvent] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += [e for e in backend.poll(time.time()) if e.job_id == job_id]
        if any(e.kind in ENDS for e in seen):
            return seen
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} did not end in {timeout} s: {seen}")


def until_started(backend: LocalBackend, job_id: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.kind is EventKind.STARTED for e in backend.poll(time.time())):
            return
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} did not start")


def pods_of(tmp_path: Path, job_id: int, attempt: int = 0) -> RunRecord:
    return RunRecord.load(RunRecord.path(tmp_path / "state", job_id, attempt))


def wait_gone(record: RunRecord, timeout: float) -> float:
    """Seconds until no process of ``record``'s pods' groups is left (AssertionError after
    ``timeout``)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if not any(
            procs.group_members(p.pid, p.start)
            for p in record.pods
            if p.pid is not None and p.start is not None
        ):
            return time.monotonic() - began
        time.sleep(0.02)
    raise AssertionError("a pod's process group outlived the deadline")


def wait_file(path: Path, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written")


PRINT_ENV = [
    "sh", "-c",
    'echo "devices=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES rank=$RANK '
    'world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT node=$GPUAAS_NODE set=$GPUAAS_POD_SET '
    'job=$GPUAAS_JOB_ID local=$LOCAL_RANK noderank=$NODE_RANK epochs=$EPOCHS secret=$SECRET_X"; '
    'cat "$GPUAAS_HOSTFILE" >&2; pwd',
]  # fmt: skip


def test_a_two_pod_job_sees_exactly_its_devices_and_its_rendezvous(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("SECRET_X", "the server's own")  # not passed to jobs
    backend = make(tmp_path, layout, backends)
    placed = (pod(0, [UUIDS[0], UUIDS[1]], "node-a"), pod(1, [MIG], "node-b", "workers"))
    two = BackendJob(7, "two", {"command": PRINT_ENV, "env": {"EPOCHS": "3"}}, placed)
    backend.launch(two)
    assert backend.running() == {7}
    events = until_end(backend, 7)
    assert [e.kind for e in events] == [EventKind.STARTED, EventKind.SUCCEEDED]
    assert events[-1].exit_code == 0
    assert backend.running() == set()
    port = pods_of(tmp_path, 7).master_port
    out0 = layout.stdout(7, 0, 0).read_text().splitlines()
    out1 = layout.stdout(7, 0, 1).read_text().splitlines()
    both = f"{UUIDS[0]},{UUIDS[1]}"
    assert out0[0] == (
        f"devices={both} nvidia={both} rank=0 world=2 master=127.0.0.1:{port} node=node-a "
        "set=main job=7 local=0 noderank=0 epochs=3 secret="
    )
    assert out1[0] == (
        f"devices={MIG} nvidia={MIG} rank=1 world=2 master=127.0.0.1:{port} node=node-b "
        "set=workers job=7 local=0 noderank=1 epochs=3 secret="
    )
    assert out0[1] == str(tmp_path / "state" / "7" / "attempt-0" / "pod-0")  # its own dir
    hostfile = layout.stderr(7, 0, 0).read_text().splitlines()
    assert [h.split("#")[0].strip() for h in hostfile[1:]] == ["127.0.0.1 slots=1"] * 2


def test_a_script_runs_with_bash_in_the_pods_directory(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    backend.launch(job(3, command=None, script='echo "$BASH_VERSION" > /dev/null\nls\n'))
    assert until_end(backend, 3)[-1].kind is EventKind.SUCCEEDED
    assert "script.sh" in layout.stdout(3, 0, 0).read_text().split()


def test_a_failing_command_fails_with_its_exit_code_and_stderr_tail(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    script = "for i in 1 2 3 4 5 6 7; do echo line $i >&2; done; exit 3"
    backend.launch(job(2, command=["sh", "-c", script]))
    end = until_end(backend, 2)[-1]
    assert (end.kind, end.exit_code) == (EventKind.FAILED, 3)
    assert end.reason == "pod 0 exited with code 3: line 3 | line 4 | line 5 | line 6 | line 7"


def test_a_gang_fails_as_a_whole_with_the_failing_pods_code(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    script = 'if [ "$RANK" = 1 ]; then echo broken >&2; exit 5; fi; exec sleep 1000'
    backend.launch(job(4, pods=3, command=["sh", "-c", script]))
    events = until_end(backend, 4)
    assert (events[-1].kind, events[-1].exit_code) == (EventKind.FAILED, 5)
    assert events[-1].reason == "pod 1 exited with code 5: broken"
    wait_gone(pods_of(tmp_path, 4), 0.5)  # the others were stopped before the end was reported


def test_a_pod_killed_by_a_signal_fails_with_128_plus_the_signal(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    backend.launch(job(5, command=["sh", "-c", "kill -SEGV $$"]))
    end = until_end(backend, 5)[-1]
    assert (end.kind, end.exit_code) == (EventKind.FAILED, 128 + signal.SIGSEGV)
    assert end.reason.startswith("pod 0 was killed by signal SIGSEGV")


def test_cancel_stops_the_whole_process_group_within_the_grace(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    child = tmp_path / "child.pid"
    backend.launch(job(6, pods=2, command=["bash", "-c", f"sleep 1000 & echo $! >> {child}; wait"]))
    until_started(backend, 6)
    while len(wait_file(child).split()) < 2:
        time.sleep(0.02)
    sleepers = [int(p) for p in child.read_text().split()]
    assert all(procs.stat(p) is not None for p in sleepers)
    began = time.monotonic()
    backend.cancel(6, grace=5.0)
    assert time.monotonic() - began < 2.5  # cancel does not wait for the grace period
    assert backend.running() == set()
    assert wait_gone(pods_of(tmp_path, 6), 5.0 + 1.0) < 2.5  # SIGTERM was enough
    assert all(procs.stat(p) is None or procs.stat(p).state == "Z" for p in sleepers)  # type: ignore[union-attr]
    assert backend.poll(time.time()) == []  # a cancelled job has no end to report


def test_a_command_that_traps_sigterm_is_killed_after_the_grace(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    ready = tmp_path / "ready"
    script = f"trap 'echo term >&2' TERM; echo up > {ready}; while :; do sleep 0.05; done"
    backend.launch(job(8, command=["bash", "-c", script]))
    until_started(backend, 8)
    wait_file(ready)
    record = pods_of(tmp_path, 8)
    began = time.monotonic()
    backend.cancel(8, grace=1.0)
    time.sleep(0.5)
    assert procs.group_members(record.pods[0].pid or 0, record.pods[0].start or 0)  # still up
    took = 0.5 + wait_gone(record, 2.0)  # killed by the timer: nobody polls meanwhile
    assert time.monotonic() - began >= 1.0  # not before the grace ended
    assert took <= 1.0 + 1.0
    assert "term" in wait_file(layout.stderr(8, 0, 0))


def test_a_command_that_does_not_exist_is_rejected(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    backend.launch(job(9, command=["no-such-program-gpuaas", "--x"]))
    plain = tmp_path / "data.txt"
    plain.write_text("not a program")
    backend.launch(job(10, command=[str(plain)]))  # a file, not executable
    backend.launch(job(11, command=["./missing.sh"]))
    events = {e.job_id: e for e in backend.poll(time.time())}
    assert {e.kind for e in events.values()} == {EventKind.REJECTED}
    assert events[9].reason.startswith("command 'no-such-program-gpuaas' was not found on")
    assert events[10].reason == f"command '{plain}' is not executable"
    assert events[11].reason == "command './missing.sh' does not exist"
    said = layout.stderr(9, 0, 0).read_text()  # where `gpuaas jobs logs` looks
    assert said.startswith("gpuaas: not started: command 'no-such-program-gpuaas' was not found")
    assert backend.running() == set()
    backend.launch(job(9, command=["no-such-program-gpuaas"]))  # the same attempt again
    assert [e.kind for e in backend.poll(time.time())] == [EventKind.REJECTED]


def test_a_container_needs_a_runtime(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    backend.launch(job(12, command=None, container={"image": "busybox"}))
    [event] = backend.poll(time.time())
    assert event.kind is EventKind.REJECTED
    assert event.reason.startswith("no container runtime configured on the local backend (set ")
    missing = make(tmp_path, layout, backends, container_runtime="no-such-runtime-gpuaas")
    missing.launch(job(13, command=None, container={"image": "busybox"}))
    [event] = missing.poll(time.time())
    assert "'no-such-runtime-gpuaas' (GPUAAS_CONTAINER_RUNTIME) was not found" in event.reason


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_a_container_runs_through_the_runtime_with_its_devices(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend], runtime: str
) -> None:
    """No container runtime works in CI: a stand-in program of the runtime's name prints the
    arguments it was given, one per line; the pod runs it as it would run docker."""
    fake = tmp_path / "bin" / runtime
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    backend = make(tmp_path, layout, backends, container_runtime=str(fake))
    container = {"image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["torchrun", "t.py"],
                 "args": ["--epochs", "3"], "env": {"A": "1"}}  # fmt: skip
    two = BackendJob(14, "c", {"container": container, "env": {"B": "2"}},
                     (pod(0, [UUIDS[0], UUIDS[1]]),), attempt=2)  # fmt: skip
    backend.launch(two)
    assert until_end(backend, 14)[-1].kind is EventKind.SUCCEEDED
    argv = layout.stdout(14, 2, 0).read_text().splitlines()
    assert argv[:6] == ["run", "--rm", "--name", "gpuaas-14-2-0", "--network", "host"]
    env = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    assert {"A=1", "B=2", f"CUDA_VISIBLE_DEVICES={UUIDS[0]},{UUIDS[1]}", "RANK=0"} <= set(env)
    assert not any(e.startswith(("PATH=", "HOME=")) for e in env)  # not the host's
    if runtime == "docker":
        assert argv[-8:-4] == ["--gpus", f'"device={UUIDS[0]},{UUIDS[1]}"',
                               "--entrypoint", "torchrun"]  # fmt: skip
    else:
        cdi = [f"nvidia.com/gpu={u}" for u in UUIDS[:2]]
        assert argv[-10:-4] == ["--device", cdi[0], "--device", cdi[1], "--entrypoint", "torchrun"]
    assert argv[-4:] == ["nvcr.io/nvidia/pytorch:24.05-py3", "t.py", "--epochs", "3"]


def test_launching_the_same_attempt_twice_runs_it_once(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    ran = tmp_path / "ran"
    once = job(15, command=["sh", "-c", f"echo x >> {ran}"])
    backend.launch(once)
    backend.launch(once)
    assert until_end(backend, 15)[-1].kind is EventKind.SUCCEEDED
    assert ran.read_text() == "x\n"
    backend.launch(once)  # after it ended: its outcome again, not a second run
    assert [e.kind for e in backend.poll(time.time())] == [EventKind.SUCCEEDED]
    assert ran.read_text() == "x\n"


def test_a_start_the_caller_did_not_store_is_reported_again(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    backend.launch(job(21, command=["sleep", "1000"]))
    until_started(backend, 21)
    backend.launch(job(21, command=["sleep", "1000"]))  # launched again, still not started
    [again] = backend.poll(time.time())
    assert again.kind is EventKind.STARTED and again.at == pods_of(tmp_path, 21).started_at
    resumed = BackendJob(21, "job-21", {"command": ["sleep", "1000"]}, job(21).pods,
                         started_at=again.at)  # fmt: skip
    backend.launch(resumed)  # the caller knows it started: nothing to report
    assert backend.poll(time.time()) == []
    backend.cancel(21, grace=0.5)


def test_a_newer_attempt_stops_the_older_first(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends, stop_grace=0.5)
    old = job(16, command=["sh", "-c", "trap '' TERM; exec sleep 1000"])  # needs the SIGKILL
    backend.launch(old)
    until_started(backend, 16)
    backend.launch(job(16, attempt=1, command=["true"]))
    assert backend.running() == {16}
    events = until_end(backend, 16)
    assert events[-1].kind is EventKind.SUCCEEDED
    wait_gone(pods_of(tmp_path, 16, 0), 0.1)  # gone before the new attempt started
    assert pods_of(tmp_path, 16, 0).outcome is not None


def test_a_restarted_backend_follows_running_processes_and_reads_their_exit_codes(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    first = make(tmp_path, layout, backends)
    ran = tmp_path / "ran"
    go = tmp_path / "go"
    script = (f"echo run >> {ran}; while [ ! -e {go} ]; do sleep 0.02; done; "
              '[ "$RANK" = 0 ] && exit 6; exec sleep 1000')  # fmt: skip
    first.launch(job(17, pods=2, command=["sh", "-c", script]))
    until_started(first, 17)
    # the control plane dies (its state stays on disk); a new one starts on the same state
    second = make(tmp_path, layout, backends)
    assert second.running() == {17}
    second.launch(job(17, pods=2, command=["sh", "-c", script]))  # resumed: nothing new runs
    while len(wait_file(ran).split()) < 2:  # both commands are up before they are let go
        time.sleep(0.02)
    go.touch()
    events = until_end(second, 17)
    # pod 0's code, read from its wrapper's file (not a child of this backend); pod 1 stopped
    assert (events[-1].kind, events[-1].exit_code) == (EventKind.FAILED, 6)
    assert events[-1].reason == "pod 0 exited with code 6"
    assert ran.read_text() == "run\nrun\n"


def test_a_process_gone_without_an_exit_code_is_lost(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    backend = make(tmp_path, layout, backends)
    backend.launch(job(18, command=["sleep", "1000"]))
    until_started(backend, 18)
    record = pods_of(tmp_path, 18)
    assert record.pods[0].pid is not None
    os.killpg(record.pods[0].pid, signal.SIGKILL)  # killed from outside: no exit code
    end = until_end(backend, 18)[-1]
    assert end.kind is EventKind.LOST
    assert "is gone and left no exit code" in end.reason


def test_a_reused_pid_is_not_taken_for_the_pods_process(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    """A run recorded with this test's own pid but another start time: after a restart that
    pid belongs to another process, so the pod is lost (and that process is not signalled)."""
    backend = make(tmp_path, layout, backends)
    backend.launch(job(19, command=["true"]))
    until_end(backend, 19)
    path = RunRecord.path(tmp_path / "state", 20, 0)
    path.parent.mkdir(parents=True)
    raw = json.loads(RunRecord.path(tmp_path / "state", 19, 0).read_text())
    me = procs.stat(os.getpid())
    assert me is not None
    raw.update(job_id=20, outcome=None, started_at=None)
    raw["pods"][0].update(pid=os.getpid(), start=me.start - 1, dir=str(path.parent / "pod-0"))
    (path.parent / "pod-0").mkdir()
    path.write_text(json.dumps(raw))
    restarted = make(tmp_path, layout, backends)
    assert restarted.running() == {20}
    assert until_end(restarted, 20)[-1].kind is EventKind.LOST
    restarted.cancel(20)  # nothing to stop: this process is still here
    assert procs.stat(os.getpid()) is not None


def test_the_wrapper_runs_a_pod_at_most_once(tmp_path: Path) -> None:
    pod_dir = tmp_path / "pod"
    pod_dir.mkdir()
    out = tmp_path / "out"
    argv = [sys.executable, "-I", "-S", str(WRAPPER), str(pod_dir), "--", "sh", "-c",
            f"echo once >> {out}"]  # fmt: skip
    first = subprocess.run(argv, start_new_session=True, check=False)
    second = subprocess.run(argv, start_new_session=True, check=False)
    assert first.returncode == -signal.SIGKILL  # it ends by killing what its pod left behind
    assert second.returncode == ALREADY_CLAIMED
    assert out.read_text() == "once\n"
    assert json.loads((pod_dir / "exit-code").read_text()) == {"returncode": 0}


def test_a_command_the_system_cannot_execute_is_rejected_by_its_wrapper(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    bad = tmp_path / "not-a-program"
    bad.write_bytes(b"\x00\x01 no shebang, no ELF header\n")
    bad.chmod(0o755)  # passes the checks at launch; exec fails in the wrapper
    backend = make(tmp_path, layout, backends)
    backend.launch(job(22, command=[str(bad)]))
    end = until_end(backend, 22)[-1]
    assert end.kind is EventKind.REJECTED
    assert end.reason == f"pod 0: cannot run '{bad}': Exec format error"


class Crash(BaseException):
    """The control plane dies here."""


def test_a_run_recorded_but_not_started_is_started_after_a_restart(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    ran = tmp_path / "ran"
    two = job(23, pods=2, command=["sh", "-c", f"echo $RANK >> {ran}"])
    crashing = make(tmp_path, layout, backends)

    def crash(*_: object) -> None:
        raise Crash

    with monkeypatch.context() as m:
        m.setattr(LocalBackend, "_start", crash)
        with pytest.raises(Crash):
            crashing.launch(two)
    assert [p.pid for p in pods_of(tmp_path, 23).pods] == [None, None]  # recorded, not started
    restarted = make(tmp_path, layout, backends)
    assert restarted.running() == {23}
    restarted.launch(two)
    assert until_end(restarted, 23)[-1].kind is EventKind.SUCCEEDED
    assert sorted(ran.read_text().split()) == ["0", "1"]
    port = pods_of(tmp_path, 23).master_port
    assert port > 0  # the attempt's port, chosen once, kept


def test_a_stop_asked_before_a_restart_is_carried_out_after_it(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    ready = tmp_path / "ready"
    script = f"trap 'echo term >&2' TERM; echo up > {ready}; while :; do sleep 0.05; done"
    first = make(tmp_path, layout, backends)
    first.launch(job(24, command=["bash", "-c", script]))
    until_started(first, 24)
    wait_file(ready)
    monkeypatch.setattr(first, "_kill_later", lambda grace: None)  # it dies before its timer
    began = time.monotonic()
    first.cancel(24, grace=1.0)  # SIGTERM sent (and trapped), SIGKILL due in 1 s
    restarted = make(tmp_path, layout, backends)
    assert restarted.running() == set()  # a cancelled run is not followed as a job ...
    wait_gone(pods_of(tmp_path, 24), 3.0)  # ... but its SIGKILL still comes
    assert time.monotonic() - began <= 1.0 + 1.0
    restarted.poll(time.time())
    assert pods_of(tmp_path, 24).outcome is not None  # stopped, recorded as such


def test_a_job_whose_pods_cannot_all_start_is_rejected_and_stopped(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    backend = make(tmp_path, layout, backends)
    real = LocalBackend._start

    def second_fails(self: LocalBackend, run: Any, pod: Any) -> None:
        if pod.record.rank == 1:
            raise OSError(24, "Too many open files")
        real(self, run, pod)

    monkeypatch.setattr(LocalBackend, "_start", second_fails)
    backend.launch(job(25, pods=2, command=["sleep", "1000"]))
    [event] = backend.poll(time.time())
    assert event.kind is EventKind.REJECTED
    assert event.reason == "could not start the job's processes: [Errno 24] Too many open files"
    assert backend.running() == set()
    deadline = time.monotonic() + 2
    while pods_of(tmp_path, 25).outcome is None:  # pod 0 did start: it is stopped at once
        assert time.monotonic() < deadline
        backend.poll(time.time())
        time.sleep(0.02)
    record = pods_of(tmp_path, 25)
    assert record.outcome is not None and record.outcome.reason == "not every pod could start"
    wait_gone(record, 0.1)
    backend.launch(job(25, pods=2, command=["sleep", "1000"]))  # that attempt again: not run
    [again] = backend.poll(time.time())
    assert again.kind is EventKind.LOST


def test_an_unreadable_record_is_never_run_again(
    tmp_path: Path, layout: LogLayout, backends: list[LocalBackend]
) -> None:
    path = RunRecord.path(tmp_path / "state", 26, 0)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    backend = make(tmp_path, layout, backends)
    assert backend.running() == set()
    backend.launch(job(26, command=["true"]))
    [event] = backend.poll(time.time())
    assert event.kind is EventKind.LOST and "unreadable" in event.reason
