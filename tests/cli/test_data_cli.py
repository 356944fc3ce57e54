"""The dataset commands end to end: init, validate, ls, show, stats, repair, manifest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from foundation_helpers import GEMM_NAME, tree_digest
from ikdata.cli import app
import ikdata

runner = CliRunner()
ROWS = f"workloads/gemm/{GEMM_NAME}.jsonl"


def test_init_creates_an_empty_valid_dataset(tmp_path):
    root = tmp_path / "new"
    result = runner.invoke(app, ["init", str(root), "--name", "demo", "--description", "a test"])
    assert result.exit_code == 0, result.output
    assert f"initialised {root} (id " in result.output
    manifest = json.loads((root / "ikdata.json").read_text())
    assert manifest["name"] == "demo" and manifest["description"] == "a test"
    assert manifest["counts"] == {"definitions": 0, "workloads": 0, "receipts": 0, "blobs": 0}
    assert (root / "definitions").is_dir() and (root / "workloads").is_dir() and (root / "blob/sha256").is_dir()
    validate = runner.invoke(app, ["validate", str(root), "--deep"])
    assert validate.exit_code == 0, validate.output
    assert ikdata.open(root).layout == "ikdata"


def test_init_refuses_a_foreign_non_empty_folder(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["init", str(tmp_path / "busy")])
    assert result.exit_code == 2
    assert "folder exists and is not an ikdata dataset; choose an empty folder" in result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["notes.txt"]


def test_validate_human_output_and_exit_codes(ikdata_dataset):
    clean = runner.invoke(app, ["validate", str(ikdata_dataset), "--deep"])
    assert clean.exit_code == 0
    assert f"{ikdata_dataset}: clean — 1 definitions, 3 workloads, 3 receipts, 7 blobs checked, 7 rehashed" \
        in clean.output
    (ikdata_dataset / ROWS).write_bytes((ikdata_dataset / ROWS).read_bytes() + b"{oops\n")
    bad = runner.invoke(app, ["validate", str(ikdata_dataset)])
    assert bad.exit_code == 1
    assert f"{ROWS}:4: malformed JSON" in bad.output
    assert "✗" in bad.output


def test_ls_and_filters(ikdata_dataset):
    result = runner.invoke(app, ["ls", str(ikdata_dataset), "--json"])
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [r["axes"] for r in rows] == [{"M": 1}, {"M": 2}, {"M": 3}]
    assert all(r["definition"] == GEMM_NAME and r["source"] == ROWS for r in rows)
    none = runner.invoke(app, ["ls", str(ikdata_dataset), "--definition", "other", "--json"])
    assert none.exit_code == 1 and "no such definition" in none.output  # refused, not "0 workloads" (#27)
    human = runner.invoke(app, ["ls", str(ikdata_dataset)])
    assert "3 workloads" in human.output and rows[0]["uuid"] in human.output


def test_ls_reports_bad_lines_but_lists_the_rest(ikdata_dataset):
    with open(ikdata_dataset / ROWS, "ab") as stream:
        stream.write(b'{"torn')
    result = runner.invoke(app, ["ls", str(ikdata_dataset)])
    assert "3 workloads" in result.output
    assert f"{ROWS}:4: torn last line" in result.output


def test_show_by_prefix_and_json(ikdata_dataset):
    uuid = next(ikdata.open(ikdata_dataset).workloads()).uuid
    result = runner.invoke(app, ["show", str(ikdata_dataset), uuid[:10], "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["source"] == f"{ROWS}:1"
    assert document["row"]["workload"]["uuid"] == uuid
    assert document["inputs"]["A"]["dtype"] == "torch.float32" and document["inputs"]["A"]["shape"] == [1, 8]
    assert [r["request_id"] for r in document["receipts"]] == ["r0"]
    human = runner.invoke(app, ["show", str(ikdata_dataset), uuid])
    assert f"workload {uuid}  definition {GEMM_NAME}" in human.output


def test_show_unknown_or_ambiguous_uuid_is_a_usage_error(ikdata_dataset):
    result = runner.invoke(app, ["show", str(ikdata_dataset), "ffffffff-nope"])
    assert result.exit_code == 2
    assert "no workload with uuid 'ffffffff-nope'; list them with 'ikdata ls" in result.output
    assert f"trajectories: 'ikdata stats {ikdata_dataset}'" in " ".join(result.output.split())  # which lists those
    ambiguous = runner.invoke(app, ["show", str(ikdata_dataset), ""])
    assert ambiguous.exit_code == 2
    assert "matches 3 workloads; give more of the uuid" in ambiguous.output


def test_stats_counts_blobs_bytes_and_dedup(ikdata_dataset):
    result = runner.invoke(app, ["stats", str(ikdata_dataset), "--json"])
    assert result.exit_code == 0
    stats = json.loads(result.stdout)
    blobs = {p: p.stat().st_size for p in (ikdata_dataset / "blob").rglob("*.safetensors")}
    assert stats["unique_blobs"] == len(blobs) == 7  # 3 A, 1 shared W, 3 C
    assert stats["stored_bytes"] == sum(blobs.values())
    rows = [json.loads(l) for l in (ikdata_dataset / ROWS).read_text().splitlines()]
    receipts = [json.loads(l) for l in (ikdata_dataset / "receipts.jsonl").read_text().splitlines()]
    uses = [d["path"] for r in rows for d in r["workload"]["inputs"].values()]
    uses += [d["path"] for r in receipts for d in r["expected_output"].values()]
    referenced = sum((ikdata_dataset / p).stat().st_size for p in uses)
    assert stats["referenced_bytes"] == referenced
    assert stats["dedup_ratio"] == round(referenced / sum(blobs.values()), 4)
    assert (stats["definitions"], stats["workloads"], stats["receipts"]) == (1, 3, 3)
    assert stats["workloads_per_definition"] == {GEMM_NAME: 3}
    human = runner.invoke(app, ["stats", str(ikdata_dataset)])
    assert "unique blobs 7" in human.output and "dedup ×" in human.output


def test_stats_survives_rows_of_the_wrong_shape(ikdata_dataset):
    with open(ikdata_dataset / ROWS, "ab") as stream:
        stream.write(b'[1, 2]\n{"definition": ["x"], "workload": {"inputs": {"A": 3}}}\n{"workload": 1}\n{"torn')
    result = runner.invoke(app, ["stats", str(ikdata_dataset), "--json"])
    assert result.exit_code == 1, result.output  # issue 10: exit 1 whenever problems were found (was 0)
    stats = json.loads(result.stdout)
    assert stats["workloads"] == 4 and stats["problems"] == 1
    human = runner.invoke(app, ["stats", str(ikdata_dataset)])
    assert f"{ROWS}:7: torn last line" in human.output


def test_repair_sets_torn_line_aside_and_validate_is_clean_again(ikdata_dataset):
    torn = b'{"definition": "gemm_test_n4_k8", "workload": {"uu'
    with open(ikdata_dataset / ROWS, "ab") as stream:
        stream.write(torn)
    assert runner.invoke(app, ["validate", str(ikdata_dataset)]).exit_code == 1
    result = runner.invoke(app, ["repair", str(ikdata_dataset)])
    assert result.exit_code == 0, result.output
    assert f"moved line(s) 4 to {ikdata_dataset / ROWS}.rejected" in result.output
    assert (ikdata_dataset / (ROWS + ".rejected")).read_bytes() == torn + b"\n"
    after = runner.invoke(app, ["validate", str(ikdata_dataset), "--deep"])
    assert after.exit_code == 0, after.output  # manifest refreshed too
    again = runner.invoke(app, ["repair", str(ikdata_dataset)])
    assert "nothing to repair" in again.output


def test_repair_on_a_seed_dataset(seed_dataset):
    root, definitions = seed_dataset
    receipts = root / "results" / "captures.jsonl"
    with open(receipts, "ab") as stream:
        stream.write(b'{"uuid": "x"')
    result = runner.invoke(app, ["repair", str(root)])
    assert f"moved line(s) 4 to {receipts}.rejected" in result.output
    assert runner.invoke(app, ["validate", str(root), "--definitions", str(definitions)]).exit_code == 0
    assert not (root / "ikdata.json").exists()  # a foreign layout does not get a manifest


def test_manifest_command_rebuilds_after_hand_edits(ikdata_dataset):
    lines = (ikdata_dataset / "receipts.jsonl").read_text().splitlines()
    (ikdata_dataset / "receipts.jsonl").write_text("\n".join(lines[:2]) + "\n")
    bad = runner.invoke(app, ["validate", str(ikdata_dataset), "--json"])
    assert bad.exit_code == 1
    assert any(p["path"] == "ikdata.json" and p["pointer"] == "/files/receipts.jsonl"
               for p in json.loads(bad.stdout)["problems"])
    result = runner.invoke(app, ["manifest", str(ikdata_dataset), "--json"])
    assert result.exit_code == 0
    dataset_id = json.loads(result.stdout)["id"]
    from ikdata.core import manifest

    assert manifest.current_id(ikdata_dataset) == dataset_id
    assert runner.invoke(app, ["validate", str(ikdata_dataset)]).exit_code == 0
    missing = runner.invoke(app, ["manifest", str(ikdata_dataset / "nope")])
    assert missing.exit_code == 2


def test_real_subprocess_exit_codes_and_no_traceback(ikdata_dataset, tmp_path):
    cli = [str(Path(sys.executable).with_name("ikdata"))]
    clean = subprocess.run(cli + ["validate", str(ikdata_dataset)], capture_output=True, text=True)
    assert clean.returncode == 0
    (ikdata_dataset / ROWS).write_text("not json\n")
    before = tree_digest(ikdata_dataset)
    bad = subprocess.run(cli + ["validate", str(ikdata_dataset), "--deep"], capture_output=True, text=True)
    assert bad.returncode == 1
    assert f"{ROWS}:1: malformed JSON" in bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
    usage = subprocess.run(cli + ["validate", str(tmp_path / "none")], capture_output=True, text=True)
    assert usage.returncode == 2
    assert "error:" in usage.stderr and "no such dataset folder" in usage.stderr
    assert "Traceback" not in usage.stderr
    assert tree_digest(ikdata_dataset) == before
