"""What the local backend reads of processes it may not own: /proc, by pid and start time.

A pid alone does not name a process across a control-plane restart: it may have been reused.
A pid *and* its start time (clock ticks since boot, field 22 of ``/proc/PID/stat``) do. A
process group is signalled only while one of its members started no earlier than the pod's
wrapper (a group id is not reused while any member lives; after that it could be).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    state: str  # R, S, D, Z (zombie: exited, not yet reaped), ...
    pgid: int
    start: int


def stat(pid: int) -> ProcStat | None:
    """``/proc/PID/stat`` read, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return ProcStat(pid, fields[0].decode(), int(fields[2]), int(fields[19]))


def alive(pid: int, start: int) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs (a zombie has ended)."""
    found = stat(pid)
    return found is not None and found.start == start and found.state not in ("Z", "X")


def group_members(pgid: int, since: int) -> list[int]:
    """Live processes of the group whose leader was process ``pgid`` started at ``since``.

    Empty when another process now has the leader's pid (the pid was reused, so a group with
    that id is someone else's); while the leader is gone but members are left, the id cannot
    be reused, and the members are ours."""
    leader = stat(pgid)
    if leader is not None and leader.start != since:
        return []
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        found = stat(int(entry))
        if (
            found is not None
            and found.pgid == pgid
            and found.start >= since
            and found.state not in ("Z", "X")
        ):
            members.append(found.pid)
    return members


def signal_group(pgid: int, since: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to group ``pgid`` if it still has members of ours; whether it had any."""
    if not group_members(pgid, since):
        return False
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True
