"""One rule for a uuid seen twice (ikdata.core.repeats): validate, replay, import and repair agree.

The same capture twice is one workload (the writer writes it once; two writers' copies read as one);
two different outputs for one uuid are a finding every path names, with both receipts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import ikdata
from ikdata.core.definitions import USER, Definition
from ikdata.core.errors import ProblemsFound
from ikdata.core.writer import DatasetWriter
from ikdata.importing.apply import import_dataset
from ikdata.replay.runner import replay

from foundation_helpers import gemm_definition_record


def _definition(tmp_path: Path) -> tuple[Definition, Path]:
    record = gemm_definition_record()
    folder = tmp_path / "defs"
    path = folder / record["op_type"] / f"{record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return Definition.from_dict(record, origin=USER, source=str(path)), folder


def _capture(root: Path, definition: Definition, *, second_output_offset: float | None, same_writer: bool) -> None:
    """Write one GEMM call, then the same call again (its output shifted by ``second_output_offset``)."""
    a, w = torch.ones(2, 8), torch.arange(32, dtype=torch.float32).reshape(4, 8)
    writer = DatasetWriter(root)
    provenance = {"engine": "test", "request_id": "r0", "step": 0}
    first = writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, provenance)
    if not same_writer:
        writer = DatasetWriter(root)  # another process capturing into the same folder
    second = writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T + (second_output_offset or 0.0)}, provenance)
    assert first.row.uuid == second.row.uuid
    writer.commit()


def _receipt_lines(root: Path) -> int:
    return sum(1 for line in (root / "receipts.jsonl").read_text().splitlines() if line.strip())


def test_the_same_call_twice_through_one_writer_is_written_once(tmp_path):
    definition, _ = _definition(tmp_path)
    _capture(tmp_path / "ds", definition, second_output_offset=None, same_writer=True)
    assert _receipt_lines(tmp_path / "ds") == 1
    rows = (tmp_path / "ds" / "workloads").rglob("*.jsonl")
    assert sum(len(p.read_text().splitlines()) for p in rows) == 1


def test_the_same_call_from_two_writers_is_one_workload_on_every_path(tmp_path):
    definition, folder = _definition(tmp_path)
    root = tmp_path / "ds"
    _capture(root, definition, second_output_offset=None, same_writer=False)
    assert _receipt_lines(root) == 2  # two processes: each wrote its copy
    assert not ikdata.validate(ikdata.open(root, definitions=[folder]), deep=True).problems
    result = replay(ikdata.open(root, definitions=[folder]), reuse=False)
    assert [c["status"] for c in result.report["cases"]] == ["passed"]
    from ikdata.core import manifest

    manifest.write(root)
    imported = import_dataset(root, tmp_path / "shared", definitions=[folder])
    assert len(imported.added) == 1
    assert _receipt_lines(tmp_path / "shared") == 1


def test_two_outputs_for_one_uuid_is_a_finding_on_every_path_and_repair_sets_one_aside(tmp_path):
    from ikdata.core.layout import repair_dataset

    definition, folder = _definition(tmp_path)
    root = tmp_path / "ds"
    _capture(root, definition, second_output_offset=1.0, same_writer=True)
    assert _receipt_lines(root) == 2  # the second answer is evidence: written, not dropped

    problems = ikdata.validate(ikdata.open(root, definitions=[folder]), deep=True).problems
    [finding] = [p for p in problems if p.code == "nondeterministic"]
    assert "receipts.jsonl:1 and receipts.jsonl:2" in finding.message

    result = replay(ikdata.open(root, definitions=[folder]), reuse=False)
    [case] = result.report["cases"]
    assert case["status"] == "failed" and "receipts.jsonl:1 and receipts.jsonl:2" in case["reason"]
    assert result.exit_code == 1

    with pytest.raises(ProblemsFound) as refused:
        import_dataset(root, tmp_path / "shared", definitions=[folder])
    assert "receipts.jsonl:1 and receipts.jsonl:2" in str(refused.value)

    report = repair_dataset(root)
    assert report.disagreeing_set_aside == 1
    assert (root / "receipts.jsonl.rejected").is_file()
    assert not ikdata.validate(ikdata.open(root, definitions=[folder]), deep=True).problems
    again = replay(ikdata.open(root, definitions=[folder]), reuse=False)
    assert [c["status"] for c in again.report["cases"]] == ["passed"]  # the first capture stays
