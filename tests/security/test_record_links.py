"""Finding 9 of issue 9: record files must be regular files inside the dataset.

A ``workloads/*.jsonl``, a ``definitions/*.json``, ``receipts.jsonl`` or the whole ``workloads/``
folder linked outside the dataset is refused by validate (an unsafe-path problem naming it) and by
import (nothing is copied in); a link that stays inside the dataset is fine.
"""

from __future__ import annotations

import shutil

import pytest

import ikdata
from ikdata.core.errors import ProblemsFound
from ikdata.importing.apply import import_dataset
from ikdata.ops.validate import validate
from security_helpers import rows


def _link_out(root, rel, tmp_path):
    outside = tmp_path / "outside" / rel
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(root / rel, outside)
    (root / rel).symlink_to(outside)
    return rel


def _one(root, pattern):
    return next(root.glob(pattern)).relative_to(root).as_posix()


CASES = {"workloads-file": lambda root: _one(root, "workloads/*/*.jsonl"),
         "definition-file": lambda root: _one(root, "definitions/*/*.json"),
         "receipts": lambda root: "receipts.jsonl",
         "workloads-folder": lambda root: "workloads"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_refuses_a_record_file_linked_outside(case, make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    rel = _link_out(root, CASES[case](root), tmp_path)
    report = validate(ikdata.open(root))
    unsafe = [p for p in report.problems if p.code == "unsafe-path"]
    assert [p.path for p in unsafe] == [rel], report.problems
    assert "is a link that leaves the dataset" in unsafe[0].message


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_refuses_a_record_file_linked_outside(case, make_ikdata_dataset, tmp_path):
    src = make_ikdata_dataset(2)
    rel = _link_out(src, CASES[case](src), tmp_path)
    dst = tmp_path / "dst"
    with pytest.raises(ProblemsFound) as caught:
        import_dataset(src, dst)
    assert any(p.code == "unsafe-path" and p.path == rel for p in caught.value.problems), caught.value.problems
    assert not dst.exists() or rows(dst) == []


def test_a_link_inside_the_dataset_is_followed(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    rel = _one(root, "workloads/*/*.jsonl")
    moved = root / "workloads" / "kept.jsonl.real"
    (root / rel).rename(moved)
    (root / rel).symlink_to(moved)
    report = validate(ikdata.open(root))
    assert not [p for p in report.problems if p.code == "unsafe-path"]
    assert report.workloads == 2


def test_gc_refuses_while_a_record_file_is_a_link_out(make_ikdata_dataset, tmp_path):
    from ikdata.ops.gc import collect_garbage

    root = make_ikdata_dataset(2)
    rel = _link_out(root, _one(root, "workloads/*/*.jsonl"), tmp_path)
    blobs = sorted(p for p in (root / "blob").rglob("*.safetensors"))
    with pytest.raises(ProblemsFound, match="record file\\(s\\) are links that leave the dataset") as caught:
        collect_garbage(root, grace_minutes=0)
    assert [p.path for p in caught.value.problems] == [rel]
    assert sorted(p for p in (root / "blob").rglob("*.safetensors")) == blobs


def test_a_linked_folder_under_workloads_that_leaves_is_reported(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    outside = tmp_path / "more-rows"
    outside.mkdir()
    (outside / "extra.jsonl").write_text("")
    (root / "workloads" / "extra").symlink_to(outside)
    report = validate(ikdata.open(root))
    assert [(p.path, p.code) for p in report.problems] == [("workloads/extra", "unsafe-path")]
