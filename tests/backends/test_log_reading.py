"""Reading log files: the last lines read backwards from the end equal the file's last lines
for any content, count and block size; a follower hands out each appended line once, whole."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpuaas.backends.log_reading import LogFollower, split_lines, tail_file, tail_lines


def lines_of(content: bytes) -> list[bytes]:
    """The reference: every line with its newline, a last one without (not via split_lines)."""
    out, start = [], 0
    for i, byte in enumerate(content):
        if byte == ord("\n"):
            out.append(content[start : i + 1])
            start = i + 1
    if start < len(content):
        out.append(content[start:])
    return out


# Few distinct bytes, many newlines: empty lines, runs of newlines, lines longer than a block.
contents = st.binary(max_size=400) | st.lists(
    st.sampled_from([b"\n", b"a", b"bc", b"\xff", b"line\n", b"\n\n"]), max_size=120
).map(b"".join)


@given(contents, st.integers(0, 60), st.integers(1, 70))
def test_tail_is_the_last_lines_for_any_block_size(content: bytes, count: int, block: int) -> None:
    tail = tail_lines(io.BytesIO(content), count, block=block)
    want = lines_of(content)[-count:] if count else []
    assert tail.lines == want
    assert tail.end == len(content)
    assert content[tail.start : tail.end] == b"".join(want)


@given(contents, st.integers(1, 60), st.integers(1, 70), st.integers(0, 120))
@example(content=b"\n\n\x00", count=2, block=1, budget=2)  # a whole line just inside the budget
def test_a_byte_budget_keeps_whole_lines_within_it(
    content: bytes, count: int, block: int, budget: int
) -> None:
    """Under a budget: a suffix of the file, no longer than the budget, of whole lines (or the
    end of the one line that alone is longer than the budget); never more lines than asked."""
    tail = tail_lines(io.BytesIO(content), count, block=block, max_bytes=budget)
    text = b"".join(tail.lines)
    assert content.endswith(text) and content[tail.start :] == text
    assert len(text) <= budget and len(tail.lines) <= count
    want = lines_of(content)[-count:]
    if len(b"".join(want)) <= budget:
        assert tail.lines == want  # the budget did not bind
    elif len(tail.lines) > 1 or (tail.lines and tail.start > 0 and content[tail.start - 1] == 10):
        assert tail.lines == lines_of(content)[-len(tail.lines) :]


@given(contents, st.integers(0, 30))
def test_tail_up_to_an_offset(content: bytes, count: int) -> None:
    end = len(content) // 2
    assert tail_lines(io.BytesIO(content), count, end=end).lines == (
        lines_of(content[:end])[-count:] if count else []
    )


def test_split_lines_matches_the_reference() -> None:
    for content in (b"", b"\n", b"a", b"a\n", b"a\n\nb", b"\n\n\n"):
        assert split_lines(content) == lines_of(content)


def test_a_missing_file_has_no_tail(tmp_path: Path) -> None:
    assert tail_file(tmp_path / "nope.out", 5) is None


def test_a_block_of_zero_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="block"):
        tail_lines(io.BytesIO(b"a\n"), 1, block=0)


@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(1, 50))
def test_a_follower_hands_out_every_appended_line_once(writes: list[bytes], limit: int) -> None:
    """Whatever the writes and the read size: the lines read, then the flushed rest, are the
    file's lines; a line is handed out only once finished (or at the flush)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pod-0.out"
        follower = LogFollower(path)
        assert follower.read(limit) == ([], False)  # no file yet
        got: list[bytes] = []
        for chunk in writes:
            with path.open("ab") as f:
                f.write(chunk)
            more = True
            while more:
                lines, more = follower.read(limit)
                assert all(line.endswith(b"\n") for line in lines)
                got.extend(lines)
        got.extend(follower.flush())
    assert b"".join(got) == b"".join(writes)
    assert got == lines_of(b"".join(writes))


def test_a_replaced_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "pod-0.err"
    path.write_bytes(b"old line one\nold line two\n")
    follower = LogFollower(path)
    assert follower.read()[0] == [b"old line one\n", b"old line two\n"]
    path.write_bytes(b"new\n")
    assert follower.read() == ([b"new\n"], False)


def test_a_line_longer_than_the_pending_cap_is_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuaas.backends.log_reading as reading

    monkeypatch.setattr(reading, "MAX_PENDING", 8)
    path = tmp_path / "pod-0.out"
    path.write_bytes(b"0123456789abc")
    follower = LogFollower(path)
    assert follower.read() == ([b"0123456789abc"], False)
    assert follower.flush() == []
