"""The parent of every local pod's command: it claims the pod, runs the command, reports its exit.

Run as ``python -I -S wrapper.py POD_DIR -- COMMAND...`` by the local backend, as the leader of a
new process group (so a signal to the group reaches the command and everything it spawned). It
imports nothing of gpuaas: it runs in the job's environment, not the server's, and must start fast.

1. **Claim** the pod: write ``POD_DIR/process`` (this process's pid and start time), atomically
   and only if no other wrapper did (a hard link fails when the name exists). A second wrapper
   for the same pod exits with :data:`ALREADY_CLAIMED` without running anything, so a pod's
   command runs at most once, whatever a restarted control plane does.
2. **Run** the command as a child in the same process group. SIGTERM, SIGINT and SIGHUP sent to
   the group reach the command directly; the wrapper only notes them, so that it outlives the
   command and can tell how it ended (the command gets default dispositions: Python's handlers
   do not survive exec).
3. **Report**: write ``POD_DIR/exit-code`` (JSON ``{"returncode": N}``, negative for a signal;
   ``"error"`` when the command could not be started), atomically, then kill what the command
   left behind in the group (as a container runtime does when a container's main process ends).

A control plane that was restarted cannot wait for a process that is not its child; this file is
how it learns the real exit code. A wrapper killed with SIGKILL writes nothing: its pod is then
either stopped on purpose (the backend knows) or lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

#: Exit status of a wrapper that found its pod already claimed (and ran nothing).
ALREADY_CLAIMED = 75
#: Exit status when the command could not be started (as a shell reports it).
CANNOT_RUN = 127


def start_time(pid: int) -> int:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def _write_atomically(path: str, data: dict[str, object], exclusive: bool = False) -> bool:
    """Write ``data`` as JSON at ``path`` via a temporary file, so that a reader sees all of it
    or nothing; with ``exclusive``, only if ``path`` does not exist yet (False if it did)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    if not exclusive:
        os.replace(tmp, path)
        return True
    try:
        os.link(tmp, path)  # fails if the name exists: one wrapper wins
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def _noted(_signum: int, _frame: object) -> None:
    """The group's signal reached the command too; the wrapper waits for it to end."""


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: wrapper.py POD_DIR -- COMMAND...", file=sys.stderr)
        return 2
    pod_dir, command = argv[1], argv[3:]
    me = os.getpid()
    claim = {"pid": me, "start": start_time(me), "pgid": os.getpgrp()}
    if not _write_atomically(os.path.join(pod_dir, "process"), claim, exclusive=True):
        return ALREADY_CLAIMED
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _noted)
    exit_file = os.path.join(pod_dir, "exit-code")
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        error = f"cannot run {command[0]!r}: {exc.strerror or exc}"
        print(f"gpuaas: {error}", file=sys.stderr, flush=True)
        _write_atomically(exit_file, {"returncode": CANNOT_RUN, "error": error})
        return CANNOT_RUN
    returncode = child.wait()
    _write_atomically(exit_file, {"returncode": returncode})
    if os.getpgrp() == me:  # what the command left running dies with the pod
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.killpg(me, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
