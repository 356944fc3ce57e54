"""The one dataset writer under faults: rows before receipts, nothing half-kept, and capture says what it lost.

Issue 9 item 8 (a capture under a file-size limit) and issue 10 (one writer, in the crash-safe order).
"""

from __future__ import annotations

import errno
import os
import sys

import pytest
import torch
from typer.testing import CliRunner

from capture_helpers import gemm_record, read_jsonl, write_script
from ikdata.cli import app
from ikdata.core import faults
from ikdata.core.definitions import USER, Definition
from ikdata.core.writer import DatasetWriter

PROGRAM_UNDER_A_SIZE_LIMIT = """
import resource, sys
import torch, torch.nn.functional as F
import ikdata.capture

limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # like 'ulimit -f', for this process only
for n in range(1, 19):  # 18 workloads, one definition each, written one at a time
    F.linear(torch.randn(2, 8), torch.randn(n, 8))
    ikdata.capture.flush()
print("done")
"""


def _definition() -> Definition:
    return Definition.from_dict(gemm_record(), origin=USER, source="test")


def _add(writer: DatasetWriter, request: str):
    a, w = torch.randn(2, 8), torch.randn(4, 8)
    return writer.add(_definition(), {"A": a, "W": w}, {"C": a @ w.T}, {"request_id": request})


def _lines(path) -> int:
    return len(read_jsonl(path)) if path.exists() else 0


def test_capture_under_a_file_size_limit_says_what_it_lost_and_stays_consistent(tmp_path):
    script = write_script(tmp_path, "program.py", PROGRAM_UNDER_A_SIZE_LIMIT)
    into = tmp_path / "ds"
    done = CliRunner().invoke(app, ["capture", "--into", str(into), "--", sys.executable, str(script), "6000"])
    text = " ".join((done.output + (getattr(done, "stderr", "") or "")).split())
    assert done.exit_code == 1, text
    rows = [r for path in (into / "workloads").rglob("*.jsonl") for r in read_jsonl(path)]
    receipts = read_jsonl(into / "receipts.jsonl") if (into / "receipts.jsonl").exists() else []
    assert {r["workload"]["uuid"] for r in rows} == {r["uuid"] for r in receipts}  # no row without its receipt
    lost = 18 - len(rows)
    assert 0 < lost < 18
    assert f"error: {lost} captured workload(s) could not be written" in text
    assert "Traceback" not in text
    check = CliRunner().invoke(app, ["validate", "--deep", str(into)])
    assert check.exit_code == 0, check.output


def test_a_receipt_that_cannot_be_written_takes_its_row_back(tmp_path):
    writer = DatasetWriter(tmp_path / "ds")
    _add(writer, "kept")

    def receipts_fail(name: str) -> None:
        if name == "rows-appended":
            raise OSError(errno.EFBIG, "File too large", str(tmp_path / "ds" / "receipts.jsonl"))

    with faults.observe(receipts_fail), pytest.raises(OSError) as failed:
        _add(writer, "lost")
    assert failed.value.errno == errno.EFBIG
    [row_file] = (tmp_path / "ds" / "workloads").rglob("*.jsonl")
    rows, receipts = read_jsonl(row_file), read_jsonl(tmp_path / "ds" / "receipts.jsonl")
    assert [r["workload"]["uuid"] for r in rows] == [r["uuid"] for r in receipts]
    assert [r["request_id"] for r in receipts] == ["kept"]
    assert row_file.read_bytes().endswith(b"\n")


def test_a_row_another_writer_appended_behind_is_left_and_named(tmp_path):
    writer = DatasetWriter(tmp_path / "ds")
    other = DatasetWriter(tmp_path / "ds")

    busy = []

    def another_writer_then_fail(name: str) -> None:
        if name != "rows-appended" or busy:
            return
        busy.append(True)  # the other writer's own checkpoint passes through
        try:
            _add(other, "other")
        finally:
            busy.clear()
        raise OSError(errno.ENOSPC, "No space left on device")

    with faults.observe(another_writer_then_fail), pytest.raises(OSError) as failed:
        _add(writer, "mine")
    assert "rows were left without receipts" in " ".join(getattr(failed.value, "__notes__", []))
    [row_file] = (tmp_path / "ds" / "workloads").rglob("*.jsonl")
    assert len(read_jsonl(row_file)) == 2 and len(read_jsonl(tmp_path / "ds" / "receipts.jsonl")) == 1


KILLED_BETWEEN = """
import sys, torch
from ikdata.core.definitions import USER, Definition
from ikdata.core.writer import DatasetWriter
sys.path.insert(0, sys.argv[2])
from capture_helpers import gemm_record
a, w = torch.randn(2, 8), torch.randn(4, 8)
DatasetWriter(sys.argv[1]).add(Definition.from_dict(gemm_record(), origin=USER, source="t"),
                               {"A": a, "W": w}, {"C": a @ w.T}, {"request_id": "killed"})
"""


def test_a_writer_killed_between_row_and_receipt_leaves_what_import_accepts(tmp_path):
    """Rows first: a kill leaves an inputs-only row (importable), never a receipt naming no row."""
    import subprocess

    from ikdata.importing.apply import import_dataset

    src = tmp_path / "src"
    script = write_script(tmp_path, "add.py", KILLED_BETWEEN)
    env = dict(os.environ, **{faults.CRASH_ENV: "rows-appended"})
    done = subprocess.run([sys.executable, str(script), str(src), os.path.dirname(__file__)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    assert _lines(src / "receipts.jsonl") == 0
    assert sum(_lines(p) for p in (src / "workloads").rglob("*.jsonl")) == 1
    DatasetWriter(src).commit()
    check = CliRunner().invoke(app, ["validate", "--deep", str(src)])
    assert check.exit_code == 0, check.output
    result = import_dataset(src, tmp_path / "dst")
    assert len(result.added) == 1


def test_capture_writes_through_the_one_dataset_writer(tmp_path, monkeypatch):
    """CaptureWriter hands its workloads to DatasetWriter.add_many: the same order and the same undo."""
    from ikdata.capture.writer import CaptureWriter, Job

    calls = []
    original = DatasetWriter.add_many

    def spy(self, workloads):
        calls.append(len(workloads))
        return original(self, workloads)

    monkeypatch.setattr(DatasetWriter, "add_many", spy)
    writer = CaptureWriter(tmp_path / "ds")
    a, w = torch.randn(2, 8), torch.randn(4, 8)
    writer.write(Job(_definition(), {"M": 2}, {"A": a, "W": w}, {"C": a @ w.T}, {"request_id": "r"}, 0))
    assert calls == [1]
    assert _lines(tmp_path / "ds" / "receipts.jsonl") == 1
