"""The node-side command line of the dataset cache (what the Slurm backend's jobs run on a
node): fill, check and evict, each answering in a report file."""

from __future__ import annotations

import json
from pathlib import Path

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
