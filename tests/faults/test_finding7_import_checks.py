"""Finding 7 (issue 9): import admits nothing validate rejects: row axes that disagree with the
blobs' shapes, a tensor under another key, a report of an unknown format, a report whose
metrics were edited (cross-checked with each other and with the expected output's bytes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fault_helpers import (ROWS, blob_of, header_dict, join, make_validated, read_jsonl, recommit, rewrite,
                           tree_digest)

import ikdata
from ikdata.core.errors import ProblemsFound
from ikdata.importing.apply import import_dataset

REPORT = "reports/replay.json"


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_validated(tmp_path / "src", rows=2)


@pytest.fixture
def dst(tmp_path: Path) -> Path:
    return make_validated(tmp_path / "dst", rows=1, seed=11, w_seed=11)


def _refused(src: Path, dst: Path, *needles: str) -> str:
    before = tree_digest(dst)
    with pytest.raises(ProblemsFound) as caught:
        import_dataset(src, dst, trust_reports=True)  # hand-written reports; these checks hold even so
    assert tree_digest(dst) == before
    for needle in needles:
        assert needle in str(caught.value), str(caught.value)
    return str(caught.value)


def _problems(root: Path) -> list[str]:
    return [str(p) for p in ikdata.validate(ikdata.open(root)).problems]


def _edit_report(root: Path, edit) -> None:
    report = json.loads((root / REPORT).read_text())
    edit(report)
    (root / REPORT).write_text(json.dumps(report))
    recommit(root)


def test_row_axes_that_disagree_with_the_blob_shapes_are_refused(src, dst):
    rows = read_jsonl(src / ROWS)
    rows[0]["workload"]["axes"]["M"] += 1  # A is [1, 8]; the row now says M = 2
    (src / ROWS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    recommit(src)
    assert any("shape" in p for p in _problems(src))  # validate rejects it ...
    _refused(src, dst, "the workload's axes say 2", "disagree")  # ... and so does import


def test_a_tensor_under_another_key_is_refused(src, dst):
    def rekey(header, data):
        doc = header_dict(header)
        doc["other"] = doc.pop("tensor")
        return join(json.dumps(doc, separators=(",", ":")), data)

    rewrite(blob_of(src), rekey)
    recommit(src)
    assert any("no tensor 'tensor'" in p for p in _problems(src))
    _refused(src, dst, "holds tensor 'other'")


def test_a_report_of_unknown_format_is_refused(src, dst):
    _edit_report(src, lambda r: r.update(format="someone-else/9"))
    assert any("format 'someone-else/9'" in p for p in _problems(src))  # validate rejects it ...
    _refused(src, dst, "format 'someone-else/9'")  # ... and so does import


def test_an_edited_max_abs_error_is_refused(src, dst):
    _edit_report(src, lambda r: r["cases"][0]["metrics"]["C"].update(max_abs_error=1e-5))
    _refused(src, dst, "max_abs_error")


def test_metrics_that_disagree_with_the_expected_bytes_are_refused(src, dst):
    def edit(report):  # consistent with each other, impossible for this expected output
        report["cases"][0]["metrics"]["C"].update(max_abs_error=1e-5, max_rel_error=1e-3, relative_rms=0.5,
                                                   max_error_ratio=0.1, cosine_similarity=0.99)

    _edit_report(src, edit)
    _refused(src, dst, "relative_rms", "cannot all be true")


def test_an_untouched_dataset_still_imports(src, dst, tmp_path):
    from foundation_helpers import gemm_definition_record, write_definition

    write_definition(tmp_path / "defs", gemm_definition_record())  # trusted: its reference re-judges the report
    result = import_dataset(src, dst, definitions=[tmp_path / "defs"])
    assert len(result.added) == 2
    report = ikdata.validate(ikdata.open(dst), deep=True)
    assert report.ok, [str(p) for p in report.problems]
