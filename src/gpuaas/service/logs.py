"""A job's output as the API serves it: which files, in which order, labelled how, how much.

A backend writes each pod's stdout and stderr to two files of the job's attempt
(:class:`~gpuaas.backends.logs.LogLayout`); the API only reads them, so logs stay readable after
the job, the backend or the server stopped. Semantics of ``GET .../jobs/{id}/logs``:

- **Which attempt**: the one asked for, else the latest that left output. A requeued job runs
  again as a new attempt in a folder of its own; a follow without ``attempt`` moves on to the
  new attempt when one appears, with a line ``==> attempt N <==`` between them.
- **Which files**: the pods asked for (one rank, or every pod of the job) and the streams
  (``stdout``, ``stderr`` or ``all``). Files are read one after another: pod 0's stdout, pod 0's
  stderr, pod 1's stdout ... The files carry no timestamps, so lines of different files cannot
  be put in the order they were written; within one file they keep their order. A follow sends
  each file's new lines in that same file order at every poll.
- **Labels**: with several pods every line starts with ``[pod-N] ``; with both streams a stderr
  line is marked ``[stderr] `` (``[pod-N stderr] ``); one pod and one stream: the lines as
  written. Every line ends with a newline (an unfinished last line gets one).
- **How much**: ``tail=N`` gives the last N lines *of each file* (at most :data:`MAX_LINES`).
  Without ``tail`` a file gives at most its last :data:`MAX_LINES` lines. Either way a
  response reads at most :data:`MAX_RESPONSE_BYTES` in all, shared by its files (each at least
  :data:`MIN_FILE_BYTES`); what the caps cut is reported, never silently dropped. A file is
  read backwards from its end (:func:`~gpuaas.backends.log_reading.tail_lines`), so the cost
  is what is returned, not the file's size.
- **Bytes**: decoded as UTF-8; bytes that are not UTF-8 show as U+FFFD.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from gpuaas.backends.log_reading import LogFollower, tail_file
from gpuaas.backends.logs import LogLayout

#: Lines per file when no ``tail`` is given, and the largest ``tail``.
MAX_LINES = 10_000
#: Bytes one response reads from its files in all (before labels).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: Bytes each file may give however many files share a response.
MIN_FILE_BYTES = 64 * 1024
#: Seconds between two looks at the files and the job's state while following.
FOLLOW_POLL = 0.5


class LogStream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class LogSource:
    """One file shown: a pod's stdout or stderr, and the label its lines carry."""

    rank: int
    stream: LogStream
    path: Path
    label: str

    def render(self, lines: Iterable[bytes]) -> str:
        return "".join(
            self.label + line.decode("utf-8", "replace") + ("" if line.endswith(b"\n") else "\n")
            for line in lines
        )


def pod_count(spec: Mapping[str, Any]) -> int:
    """The pods of a job (ranks 0 .. count-1), from its resolved pod sets."""
    pod_sets = (spec.get("resolved") or {}).get("podSets") or spec.get("podSets") or []
    return sum(int(ps.get("count", 1)) for ps in pod_sets) or 1


def log_sources(
    layout: LogLayout, job_id: int, attempt: int, ranks: Sequence[int], stream: LogStream
) -> list[LogSource]:
    """The files shown, in the order they are read, with their lines' labels."""
    streams = [LogStream.STDOUT, LogStream.STDERR] if stream is LogStream.ALL else [stream]
    out = []
    for rank in ranks:
        for one in streams:
            marks = [f"pod-{rank}"] if len(ranks) > 1 else []
            if stream is LogStream.ALL and one is LogStream.STDERR:
                marks.append("stderr")
            label = f"[{' '.join(marks)}] " if marks else ""
            where = layout.stdout if one is LogStream.STDOUT else layout.stderr
            out.append(LogSource(rank, one, where(job_id, attempt, rank), label))
    return out


def latest_attempt(layout: LogLayout, job_id: int) -> int | None:
    attempts = layout.attempts(job_id)
    return attempts[-1] if attempts else None


@dataclass(frozen=True, slots=True)
class LogQuery:
    """What a caller asked for (checked by the route): ``tail`` None means the default cap."""

    job_id: int
    ranks: tuple[int, ...]
    stream: LogStream
    tail: int | None = None
    attempt: int | None = None


@dataclass(slots=True)
class LogRead:
    """What was read: ``attempt`` None when the job has no output folder yet; ``found``
    whether any file shown exists; ``truncated`` whether a cap (not ``tail``) cut lines."""

    text: str
    attempt: int | None
    found: bool
    truncated: bool
    followers: list[tuple[LogSource, LogFollower]] = field(default_factory=list)


def read_logs(layout: LogLayout, query: LogQuery, *, following: bool = False) -> LogRead:
    """The last lines of every file ``query`` selects (see the module's semantics).

    ``following``: an unfinished last line is kept back (a follow sends it once finished), and
    the read carries a follower per file that goes on from where this read ended.
    """
    attempt = query.attempt if query.attempt is not None else latest_attempt(layout, query.job_id)
    if attempt is None:
        return LogRead("", None, found=False, truncated=False)
    sources = log_sources(layout, query.job_id, attempt, query.ranks, query.stream)
    count = MAX_LINES if query.tail is None else query.tail
    budget = max(MIN_FILE_BYTES, MAX_RESPONSE_BYTES // len(sources))
    parts: list[str] = []
    found = truncated = False
    followers: list[tuple[LogSource, LogFollower]] = []
    for source in sources:
        tail = tail_file(source.path, count, max_bytes=budget)
        follower = LogFollower(source.path)
        if tail is not None:
            found = True
            truncated |= tail.start > 0 and (query.tail is None or len(tail.lines) < count)
            lines = tail.lines
            follower.offset = tail.end
            if following and lines and not lines[-1].endswith(b"\n"):
                follower.pending = lines[-1]
                lines = lines[:-1]
            parts.append(source.render(lines))
        followers.append((source, follower))
    return LogRead("".join(parts), attempt, found, truncated, followers if following else [])


class LogFollow:
    """A follow in progress: the files of one attempt read on from where the last read ended.

    :meth:`step` reads at most a chunk per file (``more`` says that bytes wait, so the caller
    reads again before it sleeps); :meth:`flush` ends unfinished lines once the job is over.
    Without a fixed attempt, a newer attempt's folder ends the current one (drained first) and
    the follow goes on there, from its start.
    """

    def __init__(self, layout: LogLayout, query: LogQuery, first: LogRead) -> None:
        self.layout = layout
        self.query = query
        self.attempt = first.attempt
        self.followers = first.followers

    def _switch(self) -> str | None:
        """Move to a newer attempt: the old one's unfinished lines and a marker; None when
        there is none."""
        newest = latest_attempt(self.layout, self.query.job_id)
        if newest is None or (self.attempt is not None and newest <= self.attempt):
            return None
        text = self.flush()
        marker = f"==> attempt {newest} <==\n" if self.attempt is not None else ""
        self.attempt = newest
        sources = log_sources(
            self.layout, self.query.job_id, newest, self.query.ranks, self.query.stream
        )
        self.followers = [(source, LogFollower(source.path)) for source in sources]
        return text + marker

    def step(self) -> tuple[str, bool]:
        """(the new lines, whether more bytes wait to be read now)."""
        parts: list[str] = []
        more = False
        for source, follower in self.followers:
            lines, waiting = follower.read()
            more |= waiting
            parts.append(source.render(lines))
        if not more and self.query.attempt is None:
            switched = self._switch()
            if switched is not None:
                parts.append(switched)
                more = True  # the new attempt's files may already hold lines
        return "".join(parts), more

    def flush(self) -> str:
        return "".join(source.render(follower.flush()) for source, follower in self.followers)
