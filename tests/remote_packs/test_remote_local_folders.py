"""Local folders where a remote is expected (issue 27, finding 4): ``clone DATASET_FOLDER COPY`` copies a
plain local dataset, verified; ``push`` into a non-empty folder that is not an ikdata remote is refused
and writes nothing there."""

from __future__ import annotations

import os

import ikdata
from ikdata.cli import app
from ikdata.core import manifest
from ikdata.core.packs import load_packs
from ikdata.ops.pack import pack_dataset
from ikdata.ops.validate import validate
from typer.testing import CliRunner


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_clone_of_a_plain_local_dataset_folder_copies_it_verified(make_dataset, tmp_path):
    root = make_dataset("src", rows=3)
    result = _run("clone", str(root), str(tmp_path / "copy"))
    assert result.exit_code == 0, result.output
    assert manifest.current_id(tmp_path / "copy") == manifest.current_id(root)
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok

    pack_dataset(root)  # a packed dataset clones packed
    copy = _run("clone", f"file://{root}", str(tmp_path / "packed-copy"))
    assert copy.exit_code == 0, copy.output
    assert len(load_packs(tmp_path / "packed-copy").blobs) == manifest.read(root)["blobs"]["count"]
    assert not os.path.exists(root / ".ikdata-remote")  # the source was only read


def test_clone_of_a_local_dataset_with_uncommitted_changes_says_so(make_dataset, tmp_path):
    root = make_dataset("src", rows=2)
    with (root / "receipts.jsonl").open("a") as stream:
        stream.write('{"extra": 1}\n')
    result = _run("clone", str(root), str(tmp_path / "copy"))
    assert result.exit_code == 2 and "the manifest does not describe the files" in result.output
    assert not (tmp_path / "copy").exists()


def test_push_into_an_unrelated_non_empty_folder_is_refused(make_dataset, tmp_path):
    root = make_dataset("src", rows=2)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    result = _run("push", str(root), str(folder))
    assert result.exit_code == 2, result.output
    assert "is not empty (notes.txt) and not an ikdata remote" in result.output
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]

    remote = tmp_path / "remote"  # an empty folder, or one push wrote, is fine
    assert _run("push", str(root), str(remote)).exit_code == 0
    assert _run("push", str(root), str(remote)).exit_code == 0
