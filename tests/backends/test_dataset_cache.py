"""The node-side command line of the dataset cache (what the Slurm backend's jobs run on a
node): fill, check and evict, each answering in a report file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuaas.backends.dataset_cache import NodeCaches, main


def test_fill_check_and_evict_answer_in_their_report(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "d").mkdir(parents=True)
    (source / "d" / "x.bin").write_bytes(b"1234")
    root, report = tmp_path / "cache", tmp_path / "reports" / "%N.json"
    common = ["--root", str(root), "--node", "n7", "--tenant", "acme", "--dataset", "ds"]
    answer = tmp_path / "reports" / "n7.json"

    assert main(["check", *common, "--uri", str(source), "--report", str(report)]) == 0
    assert json.loads(answer.read_text())["ok"] is False  # nothing there yet

    assert main(["fill", *common, "--uri", f"file://{source}", "--report", str(report)]) == 0
    assert json.loads(answer.read_text()) == {
        "node": "n7", "op": "fill", "ok": True, "bytes": 4, "error": ""
    }  # fmt: skip
    assert NodeCaches(root).held("n7", "acme", "ds", str(source)) == 4

    (source / "d" / "y.bin").write_bytes(b"5")  # the source changed: not warm any more
    main(["check", *common, "--uri", str(source), "--report", str(report)])
    assert json.loads(answer.read_text())["ok"] is False

    main(["evict", *common, "--report", str(report)])
    assert not (root / "n7" / "acme" / "ds").exists()


def test_a_fill_that_cannot_copy_exits_1_with_the_reason(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    argv = ["fill", "--root", str(tmp_path), "--node", "n1", "--tenant", "acme",
            "--dataset", "ds", "--uri", "s3://bucket/x", "--report", str(report)]  # fmt: skip
    assert main(argv) == 1
    answer = json.loads(report.read_text())
    assert answer["ok"] is False and "no local path" in answer["error"]


def test_a_fill_that_loses_the_race_to_another_takes_the_finished_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's fill step and a preload on one node at once: the later rename finds the
    earlier copy in place; that copy, checked, is the answer (not an error)."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "x").write_bytes(b"abc")
    caches = NodeCaches(tmp_path / "cache")
    caches.fill("n1", "acme", "ds", str(source))  # the other fill, finished
    real_held, calls = NodeCaches.held, []

    def held_after_the_first_look(self: NodeCaches, *args: str) -> int | None:
        calls.append(args)
        return None if len(calls) == 1 else real_held(self, *args)  # looked before it finished

    real_rmtree = shutil.rmtree
    monkeypatch.setattr(NodeCaches, "held", held_after_the_first_look)
    monkeypatch.setattr(  # the other fill renames its copy in between: ours cannot replace it
        shutil, "rmtree", lambda p, **kw: None if Path(p) == caches.place("n1", "acme", "ds")
        else real_rmtree(p, **kw),
    )  # fmt: skip
    assert caches.fill("n1", "acme", "ds", str(source)) == 3
    assert len(calls) == 2
    assert real_held(caches, "n1", "acme", "ds", str(source)) == 3
    assert not list((tmp_path / "cache" / "n1" / "acme").glob(".ds.*"))  # no temporary left
