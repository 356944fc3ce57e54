"""Finding 11 (issue 9), the smaller ones: a definition named unlike its file is reported naming
the file; a stale blob set says what is stale and what to run; a dataset without ikdata.json is a
problem with a hint; a plain ``ikdata replay`` leaves a dataset that validates; ``ikdata validate
FOLDER_REMOTE`` reads a folder remote as ``file://`` does."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from fault_helpers import GEMM_NAME, capture, make_validated

import ikdata
from ikdata.cli import app

runner = CliRunner()
DEFINITION = f"definitions/gemm/{GEMM_NAME}.json"


def _problems(root: Path) -> list[str]:
    return [str(p) for p in ikdata.validate(ikdata.open(root)).problems]


def test_a_definition_named_unlike_its_file_is_reported_naming_the_file(tmp_path):
    root = make_validated(tmp_path / "ds", rows=2)
    record = json.loads((root / DEFINITION).read_text())
    record["name"] = "renamed_gemm"
    (root / DEFINITION).write_text(json.dumps(record))
    found = _problems(root)
    assert any(p.startswith(DEFINITION) and "'renamed_gemm'" in p and f"{GEMM_NAME}.json" in p for p in found), found
    assert any(f"unknown definition '{GEMM_NAME}'" in p and DEFINITION in p for p in found), found


def test_a_stale_blob_set_says_what_is_stale_and_what_to_run(tmp_path):
    root = make_validated(tmp_path / "ds", rows=2)
    ikdata.BlobStore(root).put(np.arange(5, dtype=np.float32))  # a blob the manifest does not know
    found = [p for p in _problems(root) if "blob set" in p]
    assert len(found) == 1, found
    assert "1 blob(s) more than recorded" in found[0], found
    assert f"ikdata manifest {shlex.quote(str(root))}" in found[0], found


def test_a_dataset_without_its_manifest_is_a_problem_with_a_hint(tmp_path):
    root = make_validated(tmp_path / "ds", rows=2)
    (root / "ikdata.json").unlink()
    found = [p for p in _problems(root) if p.startswith("ikdata.json")]
    assert found and "missing" in found[0] and ("ikdata repair" in found[0] or "ikdata manifest" in found[0]), found


def test_validate_is_clean_after_a_plain_replay(tmp_path):
    from merge_helpers import gemm_definition_record, write_definition

    root = capture(tmp_path / "ds", rows=2)
    definitions = write_definition(tmp_path / "defs", gemm_definition_record()).parent.parent
    done = runner.invoke(app, ["replay", str(root), "--definitions", str(definitions)])
    assert done.exit_code == 0, done.output
    assert (root / "reports" / "replay.json").is_file()
    report = ikdata.validate(ikdata.open(root), deep=True)
    assert report.ok, [str(p) for p in report.problems]


def test_validate_reads_a_folder_remote_as_file_url_does(tmp_path):
    root = make_validated(tmp_path / "ds", rows=2)
    remote = tmp_path / "remote"
    assert runner.invoke(app, ["push", str(root), str(remote)]).exit_code == 0
    by_url = runner.invoke(app, ["validate", remote.as_uri(), "--json"])
    by_folder = runner.invoke(app, ["validate", str(remote), "--json"])
    assert by_url.exit_code == 0 and by_folder.exit_code == 0, by_folder.output
    assert json.loads(by_folder.stdout) == json.loads(by_url.stdout)
    assert json.loads(by_folder.stdout)["workloads"] == 2
