"""``ikdata repair`` finishes every writer: the states a killed capture, gc or replay leaves, made by hand.

The randomised kills in ``test_kill.py`` reach these states by chance; here each is made
on purpose, so that each rule of :mod:`ikdata.core.layout` has a test that fails without it.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "merge"))
from merge_helpers import capture, read_jsonl, replay_by_hand, rows_by_uuid

from ikdata.cli import app
from ikdata.core.layout import GC_MARKER, mark_gc, pending_repair, repair_dataset
from ikdata.core.manifest import current_id
from ikdata.core.manifest import read as read_manifest

runner = CliRunner()


def problems(root: Path) -> list[str]:
    from ikdata import open as open_dataset
    from ikdata import validate

    return [str(p) for p in validate(open_dataset(root), deep=True).problems]


def hint(root: Path) -> str:
    return f"run 'ikdata repair {shlex.quote(str(root))}' to finish it"


@pytest.fixture
def committed(tmp_path) -> Path:
    return capture(tmp_path / "ds", rows=3, seed=1)


def test_a_capture_whose_commit_never_ran_is_rolled_forward(committed):
    capture(committed, rows=2, seed=2, start=3, commit=False)  # rows, receipts, blobs; no manifest update
    found = problems(committed)
    assert any("counts are" in p for p in found)
    assert any(hint(committed) in p and "does not yet list what a capture" in p for p in found), found
    result = runner.invoke(app, ["repair", str(committed)])
    assert result.exit_code == 0, result.output
    assert "brought ikdata.json up to date" in result.output
    assert problems(committed) == []
    assert read_manifest(committed)["counts"]["workloads"] == 5


def test_no_manifest_at_all_is_written(tmp_path):
    root = capture(tmp_path / "ds", rows=2, commit=False)  # capture on without the committing runner
    assert pending_repair(root) == ["the dataset has no ikdata.json (a DatasetWriter writes it on commit())"]
    report = repair_dataset(root)
    assert report.manifest == "written" and problems(root) == []


def test_a_receipt_whose_row_never_landed_is_set_aside(committed):
    receipts = committed / "receipts.jsonl"
    orphan = dict(read_jsonl(receipts)[0], uuid="00000000-0000-0000-0000-000000000001")
    with open(receipts, "a") as stream:
        stream.write(json.dumps(orphan) + "\n")
    assert any("which no workload row holds" in p for p in problems(committed))
    report = repair_dataset(committed)
    assert report.receipts_set_aside == 1 and report.manifest == "rolled-forward"
    assert [json.loads(line) for line in (committed / "receipts.jsonl.rejected").read_text().splitlines()] == [orphan]
    assert problems(committed) == []


def test_a_gc_killed_mid_deletion_is_finished_and_spares_what_is_referenced_again(committed):
    from ikdata.core.store import BlobStore
    from ikdata.core.writer import DatasetWriter

    store = BlobStore(committed)
    garbage = [store.put(np.full((3, 8), i, dtype=np.float32)).ref.path for i in range(4)]
    DatasetWriter(committed).commit()
    mark_gc(committed, garbage)
    (committed / garbage[0]).unlink()  # killed after the first unlink
    # ...and before repair runs, a capture stores a row naming a blob gc had chosen
    rows = committed / "workloads" / "gemm" / "gemm_test_n4_k8.jsonl"
    row = read_jsonl(rows)[0]
    row["workload"]["uuid"] = "00000000-0000-0000-0000-000000000002"
    row["workload"]["inputs"]["A"]["path"] = garbage[1]
    row["workload"]["axes"]["M"] = 3
    with open(rows, "a") as stream:
        stream.write(json.dumps(row) + "\n")
    assert "a gc was killed mid-deletion" in pending_repair(committed)
    assert any("a gc was killed mid-deletion" in p and hint(committed) in p for p in problems(committed))
    report = repair_dataset(committed)
    assert report.gc_deleted == 2 and not (committed / GC_MARKER).exists()
    assert (committed / garbage[1]).exists() and not (committed / garbage[2]).exists()
    assert problems(committed) == []


def test_a_replay_report_missing_from_the_manifest_is_added(committed):
    replay_by_hand(committed)  # a replay writes reports/replay.json; it does not commit
    assert any("does not list reports/replay.json" in p for p in problems(committed))
    report = repair_dataset(committed)
    assert report.manifest == "rolled-forward"
    assert "reports/replay.json" in read_manifest(committed)["files"]
    assert problems(committed) == []


def test_a_torn_line_after_a_commit_that_included_it_is_set_aside_and_committed(committed):
    rows = committed / "workloads" / "gemm" / "gemm_test_n4_k8.jsonl"
    with open(rows, "ab") as stream:
        stream.write(b'{"definition": "gemm_te')
    from ikdata.core.writer import DatasetWriter

    DatasetWriter(committed).commit()  # the runner commits after its child was killed mid-append
    capture(committed, rows=1, seed=3, start=7, commit=False)  # a later capture appends after the torn bytes
    report = repair_dataset(committed)
    assert report.manifest == "rolled-forward" and [len(r.removed_lines) for r in report.lines] == [1]
    assert len(rows_by_uuid(committed)) == 4 and problems(committed) == []


def test_a_file_changed_by_hand_is_not_blessed(committed):
    rows = committed / "workloads" / "gemm" / "gemm_test_n4_k8.jsonl"
    lines = rows.read_text().splitlines()
    rows.write_text("\n".join(reversed(lines)) + "\n")  # rewritten, not appended to
    before = current_id(committed)
    found = problems(committed)
    assert any("run 'ikdata manifest DIR'" in p or "digest of workloads" in p for p in found)
    assert not any("ikdata repair" in p for p in found)
    result = runner.invoke(app, ["repair", str(committed)])
    assert result.exit_code == 1
    assert "left ikdata.json as it is: workloads/gemm/gemm_test_n4_k8.jsonl was changed, not only appended to" \
        in result.output
    assert current_id(committed) == before


def test_a_clean_dataset_needs_nothing(committed):
    assert pending_repair(committed) == []
    result = runner.invoke(app, ["repair", str(committed), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["changed"] is False and document["ok"] is True and document["notes"] == []
