"""ikdata import: the validation gate, dedupe, conflicts, corrupt blobs, dry runs, receipts' validation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.core.errors import MergeConflict, ProblemsFound
from ikdata.core.verdicts import expand_validation
from ikdata.core.layout import init_dataset
from merge_helpers import import_trusting_reports as import_dataset  # hand-written reports: --trust-reports
from merge_helpers import (GEMM_NAME, capture, definitions_dir, gemm_definition_record, read_jsonl,  # noqa: F401
                           replay_by_hand, rows_by_uuid, tree_digest, validated, write_report)

runner = CliRunner()
ROWS = f"workloads/gemm/{GEMM_NAME}.jsonl"


def deep_ok(root: Path) -> None:
    from ikdata import open as open_ds
    from ikdata import validate

    report = validate(open_ds(root), deep=True)
    assert report.ok, [str(p) for p in report.problems]


def test_two_captures_merge_into_one_dataset_storing_each_tensor_once(validated, tmp_path):
    a = validated("host-a", rows=3, seed=1, host="host-a")
    b = validated("host-b", rows=4, seed=2, host="host-b")
    dst = tmp_path / "shared"
    first = import_dataset(a, dst)
    second = import_dataset(b, dst)
    assert len(first.added) == 3 and len(second.added) == 4
    # W is shared by every workload of both captures: stored once in DST.
    assert second.blobs_present == 1
    blobs = list((dst / "blob/sha256").rglob("*.safetensors"))
    assert len(blobs) == 1 + 7 * 2  # one W, and an A and a C per workload
    deep_ok(dst)
    from ikdata.core.manifest import current_id, read

    parents = read(dst)["parents"]
    assert [p["id"] for p in parents] == [first.parent_id, second.parent_id]
    assert parents[0]["id"] == current_id(a) and parents[1]["how"] == "import"
    assert second.dataset_id == current_id(dst)
    receipts = read_jsonl(dst / "receipts.jsonl")
    assert {r["host"] for r in receipts} == {"host-a", "host-b"}
    for receipt in receipts:
        assert receipt["validation"]["status"] == "passed"
        assert receipt["validation"]["metrics"]["C"]["mismatched_fraction"] == 0.0
        shared = expand_validation(dst, receipt["validation"])  # the report's context, stored once (issue 15)
        assert shared["device"] == "cpu" and shared["torch"] == "2.13.0+cpu"
        assert shared["tolerances"]["float32"] == {"rtol": 1e-4, "atol": 2e-5}
        assert receipt["imports"][-1]["from"] in (first.parent_id, second.parent_id)


def test_same_filesystem_blobs_are_hardlinked_and_rerun_is_a_noop(validated, tmp_path):
    src = validated(rows=2)
    dst = tmp_path / "dst"
    result = import_dataset(src, dst)
    assert result.blobs_linked == 5 and result.blobs_copied == 0
    linked = next((dst / "blob/sha256").rglob("*.safetensors"))
    assert linked.stat().st_nlink == 2
    before = tree_digest(dst)
    again = import_dataset(src, dst)
    assert again.added == () and len(again.skipped) == 2 and again.blobs_linked == 0
    assert tree_digest(dst) == before


def test_blob_dst_already_holds_is_neither_copied_nor_rehashed(validated, tmp_path, monkeypatch):
    src = validated(rows=2)
    dst = tmp_path / "dst"
    import_dataset(src, dst)
    more = validated("more", rows=3, seed=5)  # same W as src
    hashed = []
    import ikdata.importing.plan as plan_mod

    real = plan_mod.rehash_files
    monkeypatch.setattr(plan_mod, "rehash_files", lambda paths, **kw: real(hashed.extend(paths) or paths, **kw))
    result = import_dataset(more, dst)
    assert result.blobs_present == 1
    w_digest = json.loads((src / ROWS).read_text().splitlines()[0])["workload"]["inputs"]["W"]["path"]
    assert all(not str(p).endswith(Path(w_digest).name) for p in hashed)
    assert len(hashed) == 6


def test_unvalidated_src_is_refused_and_nothing_written(tmp_path):
    src = capture(tmp_path / "src", rows=2)
    dst = tmp_path / "dst"
    with pytest.raises(ProblemsFound) as info:
        import_dataset(src, dst)
    assert "2 workload(s) are not validated" in str(info.value)
    assert "SRC has no replay report" in str(info.value)
    assert not (dst / "receipts.jsonl").exists() and not any((dst / "blob/sha256").rglob("*.safetensors"))
    assert not dst.exists()  # the refused import made DST: it leaves no empty dataset behind


def test_refused_import_into_an_existing_empty_dataset_keeps_it(tmp_path):
    src = capture(tmp_path / "src", rows=2)
    dst = tmp_path / "dst"
    init_dataset(dst)
    before = (dst / "ikdata.json").read_bytes()
    with pytest.raises(ProblemsFound):
        import_dataset(src, dst)
    assert (dst / "ikdata.json").read_bytes() == before


def test_one_failing_case_refuses_the_whole_import(validated, tmp_path):
    src = capture(tmp_path / "src", rows=3)
    rows = rows_by_uuid(src)
    bad = sorted(rows)[1]
    replay_by_hand(src, fail={bad})
    dst = tmp_path / "dst"
    dst_before = None
    result = runner.invoke(app, ["import", "--trust-reports", str(src), str(dst)])
    assert result.exit_code == 1
    assert f"workload {bad} ({GEMM_NAME}) is not validated: status is 'failed'" in result.output
    assert "pass --only-passed" in result.output
    assert not (dst / "receipts.jsonl").exists()
    # --only-passed imports the rest and lists what it left out.
    passed = import_dataset(src, dst, only_passed=True)
    assert sorted(passed.added) == sorted(set(rows) - {bad})
    assert [x.uuid for x in passed.left_out] == [bad]
    assert bad not in rows_by_uuid(dst)
    deep_ok(dst)
    del dst_before


def test_report_that_does_not_cover_every_receipt_is_refused(tmp_path):
    src = capture(tmp_path / "src", rows=3)
    missing = sorted(rows_by_uuid(src))[0]
    replay_by_hand(src, skip={missing})
    with pytest.raises(ProblemsFound) as info:
        import_dataset(src, tmp_path / "dst")
    assert f"workload {missing} ({GEMM_NAME}) is not validated: the replay report has no case for it" in str(info.value)
    assert len(info.value.problems) == 1


def test_passing_case_about_other_bytes_is_refused(tmp_path):
    src = capture(tmp_path / "src", rows=2)
    rows = replay_by_hand(src)
    report = json.loads((src / "reports/replay.json").read_text())
    report["cases"][0]["input_digests"]["A"] = "0" * 64
    write_report(src, report["cases"])
    with pytest.raises(ProblemsFound, match="the case's input_digests .* do not name this workload's tensors"):
        import_dataset(src, tmp_path / "dst")
    assert rows


def test_loose_tolerance_claiming_pass_is_refused(tmp_path):
    src = capture(tmp_path / "src", rows=1)
    replay_by_hand(src)
    report = json.loads((src / "reports/replay.json").read_text())
    report["cases"][0]["tolerance"]["C"]["rtol"] = 0.5
    write_report(src, report["cases"])
    with pytest.raises(ProblemsFound, match="looser than the allowed float32 tolerance"):
        import_dataset(src, tmp_path / "dst")


def test_uuid_conflict_refuses_whole_import_naming_uuid_and_paths(validated, tmp_path):
    src = validated(rows=2)
    dst = tmp_path / "dst"
    other = validated("other", rows=3, seed=7)
    import_dataset(other, dst)
    # Give one SRC row the uuid of a different DST row.
    victim = sorted(rows_by_uuid(dst))[0]
    lines = (src / ROWS).read_text().splitlines()
    row = json.loads(lines[0])
    old_uuid = row["workload"]["uuid"]
    row["workload"]["uuid"] = victim
    lines[0] = json.dumps(row)
    (src / ROWS).write_text("\n".join(lines) + "\n")
    receipts = [json.loads(x) for x in (src / "receipts.jsonl").read_text().splitlines()]
    for r in receipts:
        if r["uuid"] == old_uuid:
            r["uuid"] = victim
    (src / "receipts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receipts))
    replay_by_hand(src)
    from ikdata.core.writer import DatasetWriter

    DatasetWriter(src).commit()
    before = tree_digest(dst)
    result = runner.invoke(app, ["import", "--trust-reports", str(src), str(dst)])
    assert result.exit_code == 1
    assert f"uuid {victim}: SRC {ROWS}:1 and DST {ROWS}:" in result.output
    assert "nothing was written" in result.output
    assert tree_digest(dst) == before


def test_definition_conflict_refuses_whole_import(validated, tmp_path):
    dst = tmp_path / "dst"
    import_dataset(validated("first", rows=1), dst)
    changed = gemm_definition_record(reference_note="  # a different reference")
    src = validated("second", rows=2, seed=3, definition_record=changed)
    before = tree_digest(dst)
    with pytest.raises(MergeConflict) as info:
        import_dataset(src, dst)
    assert f"definition {GEMM_NAME!r}: SRC definitions/gemm/{GEMM_NAME}.json differs from DST " \
           f"definitions/gemm/{GEMM_NAME}.json" in str(info.value)
    assert info.value.paths == [f"definitions/gemm/{GEMM_NAME}.json"]
    assert tree_digest(dst) == before


def test_corrupt_blob_in_src_is_detected_and_nothing_imported(validated, tmp_path):
    src = validated(rows=3)
    dst = tmp_path / "dst"
    import_dataset(validated("base", rows=1, seed=9), dst)
    before = tree_digest(dst)
    row = json.loads((src / ROWS).read_text().splitlines()[2])
    path = src / row["workload"]["inputs"]["A"]["path"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))
    with pytest.raises(ProblemsFound) as info:
        import_dataset(src, dst)
    assert "the blob is corrupt; restore it from its source" in str(info.value)
    assert "1 corrupt blob(s); nothing was imported" in str(info.value)
    assert tree_digest(dst) == before


def test_src_whose_manifest_disagrees_with_its_files_is_refused(validated, tmp_path):
    src = validated(rows=2)
    with open(src / "receipts.jsonl", "a") as stream:
        stream.write("\n")
    with pytest.raises(ProblemsFound, match="the manifest disagrees with the files"):
        import_dataset(src, tmp_path / "dst")


def test_dry_run_says_what_would_happen_and_writes_nothing(validated, tmp_path):
    dst = tmp_path / "dst"
    import_dataset(validated("base", rows=2), dst)
    src = capture(tmp_path / "src", rows=4, host="host-z")
    rows = rows_by_uuid(src)
    bad = sorted(rows)[0]
    replay_by_hand(src, fail={bad})
    from ikdata.core.writer import DatasetWriter

    DatasetWriter(src).commit()
    before, src_before = tree_digest(dst), tree_digest(src)
    result = runner.invoke(app, ["import", "--trust-reports", str(src), str(dst), "--dry-run", "--json"])
    assert result.exit_code == 1
    document = json.loads(result.output)
    assert document["dry_run"] is True
    assert [r["uuid"] for r in document["refused"]] == [bad]
    assert "status is 'failed'" in document["refused"][0]["reason"]
    assert len(document["added"]) == 3 and document["dataset_id"] is None
    assert tree_digest(dst) == before and tree_digest(src) == src_before
    fresh = tmp_path / "never-created"
    assert runner.invoke(app, ["import", "--trust-reports", str(src), str(fresh), "--dry-run", "--only-passed"]).exit_code == 0
    assert not fresh.exists()


def test_import_cli_reports_counts(validated, tmp_path):
    src = validated(rows=2)
    result = runner.invoke(app, ["import", "--trust-reports", str(src), str(tmp_path / "dst")])
    assert result.exit_code == 0, result.output
    assert "added 2 workload(s), skipped 0 already present, left out 0; blobs: 5 linked, 0 copied" in result.output


def test_import_chain_keeps_every_hop_and_revalidates_from_receipts(validated, tmp_path):
    """A merged dataset (no report of its own) imports onward: receipts' validation is rechecked."""
    mid, top = tmp_path / "mid", tmp_path / "top"
    first = import_dataset(validated(rows=2), mid)
    second = import_dataset(mid, top)
    assert len(second.added) == 2
    receipts = read_jsonl(top / "receipts.jsonl")
    assert [h["from"] for h in receipts[0]["imports"]] == [first.parent_id, second.parent_id]
    deep_ok(top)
    # Tampering with the carried validation is caught on the next hop.
    tampered = tmp_path / "tampered"
    import_dataset(validated("again", rows=1, seed=4), tampered)
    lines = read_jsonl(tampered / "receipts.jsonl")
    lines[0]["validation"]["metrics"]["C"]["mismatched_fraction"] = 0.5
    (tampered / "receipts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    from ikdata.core.writer import DatasetWriter

    DatasetWriter(tampered).commit()
    with pytest.raises(ProblemsFound, match="mismatched_fraction 0.5 exceeds"):
        import_dataset(tampered, tmp_path / "elsewhere")


def test_validate_reports_a_dst_manifest_that_disagrees_with_the_files(validated, tmp_path):
    dst = tmp_path / "dst"
    import_dataset(validated(rows=2), dst)
    assert runner.invoke(app, ["validate", str(dst)]).exit_code == 0
    lines = (dst / "receipts.jsonl").read_text().splitlines()
    (dst / "receipts.jsonl").write_text(lines[0] + "\n")  # a receipt lost behind the manifest's back
    result = runner.invoke(app, ["validate", str(dst)])
    assert result.exit_code == 1
    assert "ikdata.json: /files/receipts.jsonl digest of receipts.jsonl is" in result.output
    assert "'receipts': 1" in result.output and "manifest says" in result.output


def test_same_row_with_different_expected_output_is_a_conflict(validated, tmp_path):
    src = validated(rows=2)
    dst = tmp_path / "dst"
    import_dataset(src, dst)
    receipts = read_jsonl(src / "receipts.jsonl")
    receipts[0]["expected_output"]["C"] = receipts[1]["expected_output"]["C"]
    (src / "receipts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receipts))
    from ikdata.core.writer import DatasetWriter

    DatasetWriter(src).commit()
    before = tree_digest(dst)
    with pytest.raises(MergeConflict, match=f"uuid {receipts[0]['uuid']}: SRC and DST receipts name different "
                                            "expected outputs"):
        import_dataset(src, dst)
    assert tree_digest(dst) == before


def test_changed_definition_conflicts_even_when_every_row_is_already_there(validated, tmp_path):
    src = validated(rows=2)
    dst = tmp_path / "dst"
    import_dataset(src, dst)
    path = src / f"definitions/gemm/{GEMM_NAME}.json"
    record = json.loads(path.read_text())
    record["description"] = "edited after the first import"
    path.write_text(json.dumps(record))
    from ikdata.core.writer import DatasetWriter

    DatasetWriter(src).commit()
    with pytest.raises(MergeConflict, match=f"definition {GEMM_NAME!r}: SRC definitions/gemm/{GEMM_NAME}.json "
                                            "differs from DST"):
        import_dataset(src, dst)


def test_dst_that_is_another_layout_is_a_usage_error(validated, seed_dataset):
    seed_root, _ = seed_dataset
    result = runner.invoke(app, ["import", "--trust-reports", str(validated(rows=1)), str(seed_root)])
    assert result.exit_code == 2
    assert f"{seed_root}: DST is not an ikdata dataset; import into an ikdata dataset or a new folder" in result.output


def test_src_without_manifest_gets_an_id_computed_without_writing_into_it(tmp_path):
    from ikdata.core.manifest import build, dataset_id, read

    src = capture(tmp_path / "src", rows=2, commit=False)
    replay_by_hand(src)
    before = tree_digest(src)
    result = import_dataset(src, tmp_path / "dst", how="pull", source="s3://bucket/runs/a")
    assert tree_digest(src) == before and not (src / "ikdata.json").exists()
    assert result.parent_id == dataset_id(build(src))
    [parent] = read(tmp_path / "dst")["parents"]
    assert parent["id"] == result.parent_id and parent["how"] == "pull" and parent["source"] == "s3://bucket/runs/a"
    hop = read_jsonl(tmp_path / "dst" / "receipts.jsonl")[0]["imports"][0]
    assert hop["how"] == "pull" and hop["source"] == "s3://bucket/runs/a" and hop["at"] == parent["at"]


def test_dry_run_counts_the_blobs_it_would_bring_in_and_writes_nothing(validated, tmp_path):
    src = validated(rows=2)
    dst = tmp_path / "dst"
    dry = runner.invoke(app, ["import", "--trust-reports", str(src), str(dst), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would add 2 workload(s), skipped 0 already present, left out 0; blobs: 5 new, 0 already present" \
        in dry.output
    assert not dst.exists()
    real = runner.invoke(app, ["import", "--trust-reports", str(src), str(dst)])
    assert "blobs: 5 linked, 0 copied, 0 already present" in real.output
