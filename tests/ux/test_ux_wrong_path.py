"""Issue 51 finding 9: a path inside a dataset is named as such. ``ikdata ls ds/workloads/gemm`` advised
``ikdata init ds/workloads/gemm`` (a dataset inside a dataset), and ``validate ds/ikdata.json`` said "no such
dataset folder" for a file that exists. Both now say what the path is and name the dataset's folder."""

from __future__ import annotations

import pytest

from cli_helpers import run_cli


@pytest.mark.parametrize("command", ["ls", "validate", "stats"])
def test_a_folder_inside_a_dataset_names_the_dataset_and_advises_no_init(small_dataset, command):
    inner = small_dataset / "workloads" / "gemm"
    assert inner.is_dir()
    done = run_cli(command, str(inner))
    assert done.returncode != 0
    assert f"{inner}: a folder inside the dataset {small_dataset}, not a dataset itself" in done.stderr, done.stderr
    assert f"name the dataset's folder: {small_dataset}" in done.stderr
    assert "ikdata init" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["ls", "validate"])
def test_a_file_of_a_dataset_is_called_a_file_and_its_folder_named(small_dataset, command):
    manifest = small_dataset / "ikdata.json"
    done = run_cli(command, str(manifest))
    assert done.returncode == 2, done.stderr
    assert f"{manifest}: a file of the dataset {small_dataset}, not a dataset folder" in done.stderr, done.stderr
    assert f"name the dataset's folder: {small_dataset}" in done.stderr
    assert "no such dataset folder" not in done.stderr


def test_a_file_elsewhere_and_a_missing_path_say_what_they_are(tmp_path):
    note = tmp_path / "notes.txt"
    note.write_text("x\n")
    assert f"{note}: a file, not a dataset folder" in run_cli("ls", str(note)).stderr
    missing = run_cli("ls", str(tmp_path / "absent"))
    assert missing.returncode == 2 and f"{tmp_path / 'absent'}: no such dataset folder" in missing.stderr


def test_an_empty_folder_outside_any_dataset_still_advises_init(not_a_dataset):
    done = run_cli("ls", str(not_a_dataset))
    assert f"'ikdata init {not_a_dataset}'" in done.stderr, done.stderr
