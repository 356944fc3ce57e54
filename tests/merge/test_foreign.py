"""Importing foreign layouts: the seed capture layout and FlashInfer Trace datasets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.core.errors import ProblemsFound
from ikdata.importing.apply import import_dataset
from merge_helpers import GEMM_NAME, gemm_definition_record, read_jsonl, rows_by_uuid, tree_digest, write_definition

runner = CliRunner()
SEED_TOLERANCES = {"bfloat16": {"rtol": 0.016, "atol": 0.005}, "float32": {"rtol": 1e-4, "atol": 2e-5},
                   "integer": "exact"}


def seed_report(root: Path, *, fail: int | None = None, tolerances: dict | None = None, skip: int | None = None):
    """results/replay.json as the seed's replay() writes it: max_absolute_errors, no metrics, no digests."""
    cases = []
    for i, receipt in enumerate(read_jsonl(root / "results/captures.jsonl")):
        if i == skip:
            continue
        case = {"definition": receipt["definition"], "uuid": receipt["uuid"], "axes": receipt["axes"],
                "max_absolute_errors": [0.0], "status": "passed", "seconds": 0.1}
        if i == fail:
            case.update(status="failed", error="Traceback ...\nAssertionError: Tensor-likes are not close!")
            del case["max_absolute_errors"]
        cases.append(case)
    report = {"torch": "2.9.0+cu128", "device": "cuda", "comparison": "all output elements",
              "tolerances": tolerances or SEED_TOLERANCES, "cases": cases}
    (root / "results/replay.json").write_text(json.dumps(report, indent=2) + "\n")


def deep_problems(root: Path) -> list[str]:
    from ikdata import open as open_ds
    from ikdata import validate

    return [str(p) for p in validate(open_ds(root), deep=True).problems]


class TestSeed:
    def test_seed_capture_with_its_report_imports_with_definitions(self, seed_dataset, tmp_path):
        root, definitions = seed_dataset
        seed_report(root)
        before = tree_digest(root)
        dst = tmp_path / "dst"
        result = import_dataset(root, dst, definitions=[definitions])
        assert len(result.added) == 3 and result.blobs_copied == 1 + 3 * 2 and result.blobs_linked == 0
        assert tree_digest(root) == before  # SRC is read-only for import
        assert deep_problems(dst) == []
        seed_rows = rows_by_uuid(root)
        for uuid, row in rows_by_uuid(dst).items():
            seed_inputs = seed_rows[uuid]["workload"]["inputs"]
            for name, descriptor in row["workload"]["inputs"].items():
                # Same tensor digest, now at its ikdata blob path.
                assert Path(descriptor["path"]).name == Path(seed_inputs[name]["path"]).name
                assert descriptor["path"].startswith("blob/sha256/")
        receipt = read_jsonl(dst / "receipts.jsonl")[0]
        assert receipt["validation"]["basis"].startswith("seed report")
        assert receipt["validation"]["metrics"] == {"max_absolute_errors": [0.0]}
        from ikdata.core.verdicts import expand_validation  # the report's context, stored once (issue 15)

        assert expand_validation(dst, receipt["validation"])["device"] == "cuda" and receipt["engine"] == "sglang"
        assert list(receipt["expected_output"]) == ["C"]

    def test_seed_without_definitions_is_refused(self, seed_dataset, tmp_path):
        root, _ = seed_dataset
        seed_report(root)
        result = runner.invoke(app, ["import", str(root), str(tmp_path / "dst")])
        assert result.exit_code == 1
        assert "a seed-layout capture keeps its definitions outside the dataset; name them with --definitions DIR" \
            in result.output

    @pytest.mark.parametrize("change, reason", [
        ({"fail": 1}, "status is 'failed'"),
        ({"skip": 2}, "the replay report has no case for it"),
        ({"tolerances": {**SEED_TOLERANCES, "bfloat16": {"rtol": 0.05, "atol": 0.005}}},
         "the report's bfloat16 tolerance {'rtol': 0.05, 'atol': 0.005} is looser than the seed default"),
    ])
    def test_seed_report_that_is_not_complete_or_too_loose_is_refused(self, seed_dataset, tmp_path, change, reason):
        root, definitions = seed_dataset
        seed_report(root, **change)
        with pytest.raises(ProblemsFound) as info:
            import_dataset(root, tmp_path / "dst", definitions=[definitions])
        assert reason in str(info.value)
        assert not (tmp_path / "dst" / "receipts.jsonl").exists()


def flashinfer_dataset(root: Path) -> dict[str, dict[str, np.ndarray]]:
    """A FlashInfer Trace dataset: one multi-tensor safetensors file per workload, and one random row."""
    from safetensors.numpy import save_file

    record = gemm_definition_record()
    write_definition(root / "definitions", record)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    rows, tensors = [], {}
    for i in range(2):
        uuid = f"fi-{i}"
        a = rng.standard_normal((i + 2, 8)).astype(np.float32)
        rel = f"blob/workloads/gemm/{GEMM_NAME}/{GEMM_NAME}_{uuid}.safetensors"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        save_file({"A": a, "W": w}, str(root / rel))
        tensors[uuid] = {"A": a, "W": w}
        rows.append({"definition": GEMM_NAME, "solution": None, "evaluation": None,
                     "workload": {"uuid": uuid, "axes": {"M": i + 2},
                                  "inputs": {"A": {"type": "safetensors", "path": rel, "tensor_key": "A"},
                                             "W": {"type": "safetensors", "path": rel, "tensor_key": "W"}}}})
    rows.append({"definition": GEMM_NAME, "workload": {"uuid": "fi-random", "axes": {"M": 16},
                                                       "inputs": {"A": {"type": "random"}, "W": {"type": "random"}}}})
    path = root / f"workloads/gemm/{GEMM_NAME}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tensors


class TestFlashInfer:
    def test_multi_tensor_files_split_into_blobs_and_random_rows_left_out(self, tmp_path):
        from ikdata.core.digest import tensor_digest

        src = tmp_path / "fi"
        tensors = flashinfer_dataset(src)
        dst = tmp_path / "dst"
        result = runner.invoke(app, ["import", str(src), str(dst), "--json"])
        assert result.exit_code == 0, result.output
        document = json.loads(result.output)
        assert sorted(document["added"]) == ["fi-0", "fi-1"]
        assert document["left_out"] == [{"uuid": "fi-random", "definition": GEMM_NAME, "reason":
                                         "random inputs ['A', 'W'] have no data (pass --keep-random to import it "
                                         "without expected output)"}]
        assert document["blobs_copied"] == 3  # A of each row, W once
        rows = rows_by_uuid(dst)
        for uuid, values in tensors.items():
            for name, value in values.items():
                descriptor = rows[uuid]["workload"]["inputs"][name]
                assert descriptor["tensor_key"] == "tensor"
                assert Path(descriptor["path"]).stem == tensor_digest("torch.float32", value.shape, value.tobytes())
        receipts = {r["uuid"]: r for r in read_jsonl(dst / "receipts.jsonl")}
        assert receipts["fi-0"]["origin"] == "flashinfer-trace" and receipts["fi-0"]["expected_output"] == {}
        assert deep_problems(dst) == []
        from flashinfer_bench.data import TraceSet

        assert len(TraceSet.from_path(str(dst)).workloads[GEMM_NAME]) == 2

    def test_keep_random_keeps_them_marked_without_expected_output(self, tmp_path):
        src = tmp_path / "fi"
        flashinfer_dataset(src)
        dst = tmp_path / "dst"
        result = import_dataset(src, dst, keep_random=True)
        assert sorted(result.added) == ["fi-0", "fi-1", "fi-random"] and result.left_out == ()
        receipt = {r["uuid"]: r for r in read_jsonl(dst / "receipts.jsonl")}["fi-random"]
        assert receipt["random_inputs"] == ["A", "W"] and receipt["expected_output"] == {}
        assert deep_problems(dst) == []

    def test_missing_tensor_key_is_reported_and_nothing_imported(self, tmp_path):
        src = tmp_path / "fi"
        flashinfer_dataset(src)
        path = src / f"workloads/gemm/{GEMM_NAME}.jsonl"
        path.write_text(path.read_text().replace('"tensor_key": "W"', '"tensor_key": "B"', 1))
        with pytest.raises(ProblemsFound) as info:
            import_dataset(src, tmp_path / "dst")
        assert f"{GEMM_NAME}_fi-0.safetensors has no tensor 'B'; it holds ['A', 'W']" in str(info.value)
        assert not (tmp_path / "dst").exists() or not (tmp_path / "dst" / "receipts.jsonl").exists()
