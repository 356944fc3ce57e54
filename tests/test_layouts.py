"""Reading what others wrote: the seed capture script's layout and a FlashInfer Trace dataset
(flashinfer-bench 0.1.2: blobs named by uuid, several tensors per file, random inputs allowed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foundation_helpers import GEMM_NAME, gemm_definition_record, tree_digest, write_seed_dataset
from ikdata.cli import app
import ikdata

runner = CliRunner()


def _flip_last_byte(path: Path) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


# -- seed layout -------------------------------------------------------------------------------


def test_seed_layout_is_detected_and_read(seed_dataset):
    import torch

    root, definitions = seed_dataset
    ds = ikdata.open(root, definitions=[definitions])
    assert ds.layout == "seed"
    assert ds.report_path == root / "results" / "replay.json"
    assert [f.name for f in ds.receipt_files()] == ["captures.jsonl"]
    rows = list(ds.workloads())
    assert [r.axes for r in rows] == [{"M": 1}, {"M": 2}, {"M": 3}]
    receipts = list(ds.receipts())
    assert len(receipts) == 3
    # the seed wrote a bare descriptor: it becomes the definition's single output
    assert list(receipts[0].expected_output) == ["C"]
    assert receipts[0].provenance["engine"] == "sglang"
    inputs = ds.load_inputs(rows[2])
    assert list(inputs) == ["A", "W"]
    assert inputs["A"].dtype == torch.bfloat16 and inputs["A"].shape == (3, 8)
    expected = ds.load_expected(next(r for r in receipts if r.uuid == rows[2].uuid))
    assert torch.equal(expected["C"], (inputs["A"].float() @ inputs["W"].float().T).to(torch.bfloat16))
    # a folder the user names is trusted
    assert GEMM_NAME in ds.trusted_definitions
    assert ds.definitions[GEMM_NAME].origin == "user"


def test_seed_receipts_at_the_root_are_found(tmp_path):
    root = write_seed_dataset(tmp_path / "seed", tmp_path / "defs")
    (root / "results" / "captures.jsonl").rename(root / "captures.jsonl")
    (root / "results").rmdir()
    ds = ikdata.open(root, definitions=[tmp_path / "defs"])
    assert ds.layout == "seed"
    assert len(list(ds.receipts())) == 3
    result = runner.invoke(app, ["validate", str(root), "--deep", "--definitions", str(tmp_path / "defs")])
    assert result.exit_code == 0, result.output


def test_seed_dataset_passes_validate_deep_with_definitions(seed_dataset):
    root, definitions = seed_dataset
    before = tree_digest(root)
    result = runner.invoke(app, ["validate", str(root), "--deep", "--definitions", str(definitions)])
    assert result.exit_code == 0, result.output
    assert "clean — 1 definitions, 3 workloads, 3 receipts, 7 blobs checked, 7 rehashed" in result.output
    assert tree_digest(root) == before


def test_seed_dataset_without_definitions_says_what_to_pass(seed_dataset):
    root, _ = seed_dataset
    result = runner.invoke(app, ["validate", str(root)])
    assert result.exit_code == 1
    assert (f"workloads/gemm/{GEMM_NAME}.jsonl:1: /definition unknown definition '{GEMM_NAME}'; expected one "
            "of definitions/**/*.json or a folder passed with --definitions") in result.output


def _seed_blobs(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / "blob").rglob("*.safetensors"))


@pytest.mark.parametrize("index", range(7))
def test_flipping_one_byte_in_any_seed_blob_is_caught_by_deep(seed_dataset, index):
    root, definitions = seed_dataset
    blobs = _seed_blobs(root)
    assert len(blobs) == 7  # 3 activations, 1 shared weight, 3 outputs
    _flip_last_byte(root / blobs[index])
    shallow = runner.invoke(app, ["validate", str(root), "--definitions", str(definitions)])
    assert shallow.exit_code == 0, shallow.output
    deep = runner.invoke(app, ["validate", str(root), "--deep", "--definitions", str(definitions)])
    assert deep.exit_code == 1
    assert f"{blobs[index]}: content digest is" in deep.output
    assert "1 problem(s)" in deep.output


def test_random_input_in_a_seed_capture_is_a_problem(seed_dataset):
    root, definitions = seed_dataset
    rows_path = root / "workloads" / "gemm" / f"{GEMM_NAME}.jsonl"
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    rows[1]["workload"]["inputs"]["W"] = {"type": "random"}
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["validate", str(root), "--definitions", str(definitions)])
    assert result.exit_code == 1
    assert (f"workloads/gemm/{GEMM_NAME}.jsonl:2: /workload/inputs/W a 'random' input in a captured dataset"
            in result.output)


def test_seed_stats_and_ls(seed_dataset):
    root, definitions = seed_dataset
    result = runner.invoke(app, ["stats", str(root), "--definitions", str(definitions), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["layout"] == "seed"
    assert stats["workloads_per_definition"] == {GEMM_NAME: 3}
    assert (stats["definitions"], stats["workloads"], stats["receipts"], stats["unique_blobs"]) == (1, 3, 3, 7)
    stored = sum(p.stat().st_size for p in (root / "blob").rglob("*.safetensors"))
    assert stats["stored_bytes"] == stored
    # W is used by 3 rows but stored once
    assert stats["referenced_bytes"] > stats["stored_bytes"]
    ls = runner.invoke(app, ["ls", str(root), "--definitions", str(definitions), "--json"])
    assert [r["axes"] for r in json.loads(ls.stdout)] == [{"M": 1}, {"M": 2}, {"M": 3}]


# -- FlashInfer Trace layout -----------------------------------------------------------------------


def write_flashinfer_dataset(root: Path) -> Path:
    """A FlashInfer Trace dataset written through flashinfer-bench's own API."""
    import torch
    from flashinfer_bench.data import (Definition, RandomInput, SafetensorsInput, ScalarInput, Trace, TraceSet,
                                       Workload, save_json_file)

    record = gemm_definition_record(dtype="bfloat16")
    record["inputs"]["alpha"] = {"shape": None, "dtype": "float32"}
    record["reference"] = "import torch\n\ndef run(A, W, alpha):\n    return alpha * torch.matmul(A, W.T)\n"
    definition = Definition(**record)
    save_json_file(definition, root / "definitions" / "gemm" / f"{GEMM_NAME}.json")
    trace_set = TraceSet.from_path(str(root))
    assert GEMM_NAME in trace_set.definitions
    traces = []
    for i, m in enumerate((2, 5)):
        uuid = f"00000000-0000-0000-0000-00000000000{i}"
        a = torch.randn(m, 8).to(torch.bfloat16)
        w = torch.randn(4, 8).to(torch.bfloat16)
        path = trace_set.add_workload_blob_tensor(GEMM_NAME, uuid, {"A": a, "W": w})  # two tensors, one file
        traces.append(Trace(definition=GEMM_NAME, workload=Workload(
            uuid=uuid, axes={"M": m},
            inputs={"A": SafetensorsInput(path=path, tensor_key="A"), "W": SafetensorsInput(path=path, tensor_key="W"),
                    "alpha": ScalarInput(value=0.5)})))
    traces.append(Trace(definition=GEMM_NAME, workload=Workload(
        uuid="00000000-0000-0000-0000-000000000009", axes={"M": 16},
        inputs={"A": RandomInput(), "W": RandomInput(), "alpha": ScalarInput(value=1.0)})))
    trace_set.add_workload_traces(traces)
    return root


@pytest.fixture
def flashinfer_dataset(tmp_path) -> Path:
    return write_flashinfer_dataset(tmp_path / "fib")


def test_flashinfer_layout_is_read(flashinfer_dataset):
    root = flashinfer_dataset
    blobs = sorted((root / "blob").rglob("*.safetensors"))
    assert [p.name for p in blobs] == [f"{GEMM_NAME}_00000000-0000-0000-0000-00000000000{i}.safetensors"
                                       for i in range(2)]
    ds = ikdata.open(root)
    assert ds.layout == "flashinfer" and not ds.is_captured
    rows = list(ds.workloads())
    assert [r.axes["M"] for r in rows] == [2, 5, 16]
    inputs = ds.load_inputs(rows[1])
    assert inputs["A"].shape == (5, 8) and inputs["W"].shape == (4, 8) and inputs["alpha"] == 0.5
    from ikdata.core.errors import RecordError

    with pytest.raises(RecordError, match="a 'random' input has no data"):
        ds.load_inputs(rows[2])


def test_flashinfer_dataset_validates_with_random_inputs_allowed(flashinfer_dataset):
    before = tree_digest(flashinfer_dataset)
    result = runner.invoke(app, ["validate", str(flashinfer_dataset), "--deep", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["workloads"], document["receipts"], document["blobs_checked"]) == (3, 0, 2)
    assert tree_digest(flashinfer_dataset) == before


def test_flashinfer_multi_tensor_file_checks_keys_dtype_and_shape(flashinfer_dataset):
    root = flashinfer_dataset
    rows_path = root / "workloads" / "gemm" / f"{GEMM_NAME}.jsonl"
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    rows[0]["workload"]["inputs"]["W"]["tensor_key"] = "B"
    rows[1]["workload"]["axes"]["M"] = 6
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["validate", str(root)])
    assert result.exit_code == 1
    path0 = rows[0]["workload"]["inputs"]["A"]["path"]
    assert (f"workloads/gemm/{GEMM_NAME}.jsonl:1: /workload/inputs/W/tensor_key blob {path0} has no tensor 'B'; "
            "it holds ['A', 'W']") in result.output
    assert f"workloads/gemm/{GEMM_NAME}.jsonl:2: /workload/inputs/A" in result.output
    assert "has shape [5, 8], expected [6, 8]" in result.output


def test_flashinfer_stats(flashinfer_dataset):
    result = runner.invoke(app, ["stats", str(flashinfer_dataset), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["layout"] == "flashinfer"
    assert stats["workloads_per_definition"] == {GEMM_NAME: 3}
    assert stats["unique_blobs"] == 2
    stored = sum(p.stat().st_size for p in (flashinfer_dataset / "blob").rglob("*.safetensors"))
    assert stats["stored_bytes"] == stored
