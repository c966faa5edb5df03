"""Reading a pod's log file: its last lines, read from the end, and new lines as it grows.

A log file (:class:`~gpuaas.backends.logs.LogLayout`) may be many gigabytes: a training job
that prints a line per step for a week. Nothing here reads a whole file. :func:`tail_lines`
seeks backwards from the end a block at a time until it holds the lines asked for (or a byte
budget is spent), so its cost is what it returns, not the file's size. :class:`LogFollower`
remembers an offset and hands out whole lines as they are appended, a bounded chunk per call.

A *line* is what ends with ``\\n``; the file's last bytes after its last ``\\n`` are a line too
(one still being written). Lines stay bytes here: a process may write anything, and splitting
at ``\\n`` never cuts a UTF-8 character; the API decodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

#: Bytes read per step backwards from the end.
BLOCK = 64 * 1024
#: Bytes a follower reads per call and file (the rest on the next call).
CHUNK = 1024 * 1024
#: A line still without its newline is handed out anyway once it grows this long.
MAX_PENDING = 1024 * 1024


def split_lines(data: bytes) -> list[bytes]:
    """``data`` cut after every ``\\n``; a last piece without one is a line too."""
    lines = data.split(b"\n")
    last = lines.pop()
    out = [line + b"\n" for line in lines]
    if last:
        out.append(last)
    return out


@dataclass(frozen=True, slots=True)
class Tail:
    """The last lines of a file's first ``end`` bytes; they begin at offset ``start``
    (``start == 0``: they are the whole file)."""

    lines: list[bytes]
    start: int
    end: int


def _read_at(file: BinaryIO, offset: int, size: int) -> bytes:
    file.seek(offset)
    parts: list[bytes] = []
    while size > 0:
        data = file.read(size)
        if not data:
            break
        parts.append(data)
        size -= len(data)
    return b"".join(parts)


def tail_lines(
    file: BinaryIO,
    count: int,
    *,
    end: int | None = None,
    max_bytes: int | None = None,
    block: int = BLOCK,
) -> Tail:
    """The last ``count`` lines of ``file`` up to offset ``end`` (default: its size now).

    Blocks are read backwards from ``end`` until ``count`` newlines separate the lines found
    (then the earliest of the last ``count`` lines is known to be whole) or the file's start is
    reached. ``max_bytes`` bounds what is read: when it stops the reading first, the partial
    earliest line is dropped, unless it is the only line (then its last ``max_bytes`` bytes
    are returned), so fewer than ``count`` lines come back.
    """
    if block < 1:
        raise ValueError("block must be at least 1 byte")
    size = file.seek(0, 2)
    end = size if end is None else min(end, size)
    if count <= 0 or end == 0:
        return Tail([], end, end)
    budget = end if max_bytes is None else min(end, max_bytes)
    chunks: list[bytes] = []
    pos, newlines, read = end, 0, 0
    trailing: bool | None = None  # whether the region ends with a newline (it ends a line)
    while pos > 0 and read < budget:
        step = min(block, pos, budget - read)
        pos -= step
        data = _read_at(file, pos, step)
        if len(data) < step:  # the file shrank under us: read what is there from scratch
            return tail_lines(file, count, max_bytes=max_bytes, block=block)
        chunks.append(data)
        read += step
        newlines += data.count(b"\n")
        if trailing is None:
            trailing = data.endswith(b"\n")
        if newlines - trailing >= count:
            break
    lines = split_lines(b"".join(reversed(chunks)))
    if pos > 0 and len(lines) > count:
        lines = lines[-count:]  # every one whole: a separator precedes the earliest
    elif pos > 0 and len(lines) > 1 and _read_at(file, pos - 1, 1) != b"\n":
        lines = lines[1:]  # the budget ran out mid-line: drop the partial first one
    lines = lines[-count:]
    return Tail(lines, end - sum(len(line) for line in lines), end)


def tail_file(path: Path, count: int, *, max_bytes: int | None = None) -> Tail | None:
    """:func:`tail_lines` of the file at ``path``; None when there is no such file."""
    try:
        with path.open("rb") as file:
            return tail_lines(file, count, max_bytes=max_bytes)
    except FileNotFoundError:
        return None


@dataclass(slots=True)
class LogFollower:
    """One file followed from ``offset``: each :meth:`read` returns the whole lines appended
    since, keeping a line without its newline yet until it is finished (or :meth:`flush`).

    The file may not exist yet (a pod not started): it is read from its start once it does.
    A file shorter than the offset was replaced: it is read again from its start.
    """

    path: Path
    offset: int = 0
    pending: bytes = field(default=b"")

    def read(self, limit: int = CHUNK) -> tuple[list[bytes], bool]:
        """(the new whole lines, whether more bytes wait beyond ``limit``)."""
        try:
            with self.path.open("rb") as file:
                size = file.seek(0, 2)
                if size < self.offset:
                    self.offset, self.pending = 0, b""
                data = _read_at(file, self.offset, min(limit, size - self.offset))
        except FileNotFoundError:
            return [], False
        self.offset += len(data)
        more = self.offset < size
        if not data:
            return [], more
        lines = split_lines(self.pending + data)
        self.pending = b""
        if lines and not lines[-1].endswith(b"\n") and len(lines[-1]) < MAX_PENDING:
            self.pending = lines.pop()
        return lines, more

    def flush(self) -> list[bytes]:
        """The unfinished last line, if any (the writer has stopped)."""
        pending, self.pending = self.pending, b""
        return [pending] if pending else []
