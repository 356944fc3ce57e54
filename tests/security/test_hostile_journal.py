"""Finding 1, the other half: an import journal is confined to the dataset whatever wrote it.

Journal targets (create, append, blob) that are absolute, have '..', or lead through a link out
of the dataset, and staged files outside ``.ikdata-import/``, are refused whole with a clear
error by every command that rolls journals forward (repair, gc, import); nothing is applied.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ikdata.core.errors import RecordError
from ikdata.core.layout import repair_dataset
from ikdata.importing.apply import import_dataset
from ikdata.ops.gc import collect_garbage

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def _write_journal(root: Path, kind: str, target: str, *, staged: str = ".ikdata-import/evil.part") -> None:
    staging = root / ".ikdata-import"
    staging.mkdir(exist_ok=True)
    if staged.startswith(".ikdata-import/"):
        (root / staged).parent.mkdir(parents=True, exist_ok=True)
        (root / staged).write_bytes(b"hostile bytes\n")
    step = {"kind": kind, "staged": staged, "target": target}
    if kind == "append":
        step.update(base_size=0, base_digest=EMPTY_SHA256)
    journal = {"format": "ikdata-import-journal/1", "parent": {"id": "0" * 64, "at": 0.0}, "steps": [step]}
    (staging / "journal.json").write_text(json.dumps(journal))


def _targets(tmp_path: Path) -> dict[str, tuple[str, Path]]:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    return {"absolute": (str(outside / "evil.jsonl"), outside / "evil.jsonl"),
            "dotdot": ("../outside/evil.jsonl", outside / "evil.jsonl")}


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
@pytest.mark.parametrize("kind", ["create", "append", "blob"])
def test_repair_refuses_a_journal_reaching_outside(kind, how, make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    target, outside = _targets(tmp_path)[how]
    existing = outside.with_name("existing.jsonl")
    existing.write_bytes(b"")
    if kind == "append":  # base_size 0 appends to any existing file
        target, outside = target.replace("evil.jsonl", "existing.jsonl"), existing
    _write_journal(root, kind, target)
    with pytest.raises(RecordError, match="so none of it was applied") as caught:
        repair_dataset(root)
    assert ".ikdata-import/journal.json: /steps/0" in str(caught.value)
    assert not outside.exists() or outside.read_bytes() == b""
    assert (root / ".ikdata-import" / "evil.part").exists()  # left for the user to read


def test_a_target_through_a_link_out_of_the_dataset_is_refused(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "definitions" / "gemm-link").symlink_to(outside)
    _write_journal(root, "create", "definitions/gemm-link/evil.json")
    with pytest.raises(RecordError, match="is a link that leaves the dataset"):
        repair_dataset(root)
    assert list(outside.iterdir()) == []


def test_a_staged_file_outside_the_staging_folder_is_refused(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    _write_journal(root, "create", "definitions/gemm/stolen.json", staged=os.path.relpath(secret, root))
    with pytest.raises(RecordError, match="contains '..'"):
        repair_dataset(root)
    assert not (root / "definitions" / "gemm" / "stolen.json").exists()


@pytest.mark.parametrize("target", ["ikdata.json", "blob/sha256/00/not-a-digest.safetensors", "workloads/x.json",
                                    ".ikdata-import/journal.json"])
def test_a_target_that_is_not_the_kind_of_file_the_step_writes_is_refused(target, make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    before = (root / "ikdata.json").read_bytes()
    _write_journal(root, "blob" if target.startswith("blob") else "append", target)
    with pytest.raises(RecordError, match="none of it was applied"):
        repair_dataset(root)
    assert (root / "ikdata.json").read_bytes() == before


def test_gc_and_import_refuse_a_hostile_journal_as_repair_does(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    target, outside = _targets(tmp_path)["dotdot"]
    _write_journal(root, "create", target)
    with pytest.raises(RecordError, match="none of it was applied"):
        collect_garbage(root, grace_minutes=0)
    with pytest.raises(RecordError, match="none of it was applied"):
        import_dataset(make_ikdata_dataset(1, seed=3), root)
    assert not outside.exists()


def test_a_journal_that_is_not_json_is_refused_with_a_message(make_ikdata_dataset):
    root = make_ikdata_dataset(1)
    (root / ".ikdata-import").mkdir()
    (root / ".ikdata-import" / "journal.json").write_text("[1, 2")
    with pytest.raises(RecordError, match="malformed JSON"):
        repair_dataset(root)
