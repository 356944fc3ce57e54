"""The parts of vLLM support that need no engine: engine detection, request ids, the shipped references against
torch's own kernels, and completions logs that name their engine (judged in its order). No vLLM needed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ikdata.core.definitions import SHIPPED, load_reference, read_folder, shipped_folder
from ikdata.core.errors import ProblemsFound, UsageError
from ikdata.core.features import source
from ikdata.engines import detect, order_of
from ikdata.engines.vllm import external_id
from ikdata.sampling.completions import import_completions, read_completions


@pytest.fixture(scope="module")
def shipped():
    found, problems = read_folder(shipped_folder(), origin=SHIPPED)
    assert problems == []
    return found


def _run(shipped, name):
    return load_reference(shipped[name])


def test_engines_are_declared_once_with_their_sampler_order():
    assert order_of("vllm") == "vllm" and order_of(" SGLang ") == "sglang" and order_of("torch") is None
    assert source("vllm").hooks == "ikdata.engines.vllm"
    assert detect() is None  # nothing of either engine is imported in the test process


def test_request_ids_are_the_ones_the_user_sees(monkeypatch):
    monkeypatch.delenv("VLLM_DISABLE_REQUEST_ID_RANDOMIZATION", raising=False)
    assert external_id("cmpl-abc-0-1f2e3d4c") == "cmpl-abc-0"
    assert external_id("7-0123abcd") == "7"
    assert external_id("no-suffix") == "no-suffix"  # the last part is not vLLM's 8 random characters
    monkeypatch.setenv("VLLM_DISABLE_REQUEST_ID_RANDOMIZATION", "1")
    assert external_id("cmpl-abc-0-1f2e3d4c") == "cmpl-abc-0-1f2e3d4c"


def test_varlen_attention_reference_is_causal_sdpa_per_sequence_with_queries_at_the_end(shipped):
    run = _run(shipped, "attention_varlen_causal_f32")
    torch.manual_seed(0)
    lengths, queries = [7, 3], [7, 1]  # a prefill and a decode step of another sequence
    k = torch.randn(sum(lengths), 1, 32)
    v = torch.randn(sum(lengths), 1, 32)
    q = torch.randn(sum(queries), 2, 32)
    out = run(q, k, v, torch.tensor([0, 7, 8]), torch.tensor([0, 7, 10]), 1 / math.sqrt(32))
    prefill = F.scaled_dot_product_attention(q[:7].transpose(0, 1), k[:7].expand(7, 2, 32).transpose(0, 1),
                                             v[:7].expand(7, 2, 32).transpose(0, 1), is_causal=True).transpose(0, 1)
    decode = F.scaled_dot_product_attention(q[7:].transpose(0, 1), k[7:].expand(3, 2, 32).transpose(0, 1),
                                            v[7:].expand(3, 2, 32).transpose(0, 1)).transpose(0, 1)
    assert torch.allclose(out[:7], prefill, atol=1e-5) and torch.allclose(out[7:], decode, atol=1e-5)


def test_rotary_reference_rotates_halves_and_keeps_norms(shipped):
    run = _run(shipped, "rotary_neox_f32")
    positions = torch.tensor([0, 5])
    inv = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
    freqs = torch.outer(torch.arange(16).float(), inv)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    q, k = torch.randn(2, 128), torch.randn(2, 64)
    q_out, k_out = run(positions, q, k, cache, 64)
    assert torch.equal(q_out[0], q[0])  # position 0 rotates by nothing
    heads = q_out.view(2, 2, 64)
    assert torch.allclose(heads.norm(dim=-1), q.view(2, 2, 64).norm(dim=-1), atol=1e-5)
    assert not torch.allclose(q_out[1], q[1])


def test_fused_add_rmsnorm_and_silu_and_mul_references(shipped):
    x, r, w = torch.randn(3, 16), torch.randn(3, 16), torch.randn(16)
    y, r_out = _run(shipped, "fused_add_rmsnorm_f32")(x, r, w, 1e-5)
    assert torch.equal(r_out, x + r)
    assert torch.allclose(y, F.rms_norm(x + r, (16,), w, 1e-5), atol=1e-5)
    z = torch.randn(4, 8)
    assert torch.allclose(_run(shipped, "silu_and_mul_f32")(z), F.silu(z[:, :4]) * z[:, 4:])


def _line(**extra) -> dict:
    return {"prompt": "p", "position": 0, "vocab_size": 50, "settings": {"temperature": 0.8, "top_k": 2, "top_p": 0.9},
            "top_logprobs": [{"token": "token_id:3", "logprob": -0.5}, {"token": "token_id:4", "logprob": -1.2}],
            "draws": [{"seed": 0, "token": "token_id:3"}], **extra}


def test_a_completions_log_that_names_its_engine_is_judged_in_that_order(tmp_path: Path):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(_line(engine="vllm")) + "\n" + json.dumps(_line()) + "\n")
    import_completions(log, tmp_path / "d")
    rows = [json.loads(x) for p in (tmp_path / "d" / "workloads").rglob("*.jsonl") for x in p.read_text().splitlines()]
    assert sorted(r["definition"] for r in rows) == ["sampling_top_logprobs", "sampling_top_logprobs_vllm"]
    import_completions(log, tmp_path / "e", engine="sglang")  # a line's own engine wins over the option
    rows = [json.loads(x) for p in (tmp_path / "e" / "workloads").rglob("*.jsonl") for x in p.read_text().splitlines()]
    assert sorted(r["definition"] for r in rows) == ["sampling_top_logprobs_sglang", "sampling_top_logprobs_vllm"]
    assert json.loads((shipped_folder() / "sampling" / "sampling_top_logprobs_vllm.json").read_text())["judge"][
        "order"] == "vllm"


def test_an_unknown_engine_is_refused_by_line_and_pointer_or_as_a_usage_error(tmp_path: Path):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(_line()) + "\n" + json.dumps(_line(engine="tgi")) + "\n")
    with pytest.raises(ProblemsFound) as caught:
        read_completions(log)
    (problem,) = caught.value.problems
    assert (problem.line, problem.pointer) == (2, "/engine")
    assert "engine must be one of sglang, vllm" in problem.message and "'tgi'" in problem.message
    with pytest.raises(UsageError, match="expected one of sglang, vllm"):
        import_completions(tmp_path / "missing.jsonl", tmp_path / "d", engine="tgi")


def test_ikdata_import_engine_option_names_the_order_of_a_log_and_is_refused_elsewhere(tmp_path: Path):
    from typer.testing import CliRunner

    from ikdata.cli import app

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(_line()) + "\n")
    done = CliRunner().invoke(app, ["import", str(log), str(tmp_path / "d"), "--engine", "vllm"])
    assert done.exit_code == 0, done.output
    (rows,) = [p.read_text() for p in (tmp_path / "d" / "workloads").rglob("*.jsonl")]
    assert json.loads(rows.splitlines()[0])["definition"] == "sampling_top_logprobs_vllm"
    wrong = CliRunner().invoke(app, ["import", str(log), str(tmp_path / "e"), "--engine", "tgi"])
    assert wrong.exit_code == 2 and "expected one of sglang, vllm" in wrong.output
    folder = CliRunner().invoke(app, ["import", str(tmp_path / "d"), str(tmp_path / "f"), "--engine", "vllm"])
    assert folder.exit_code == 2 and "only a completions .jsonl names its engine" in folder.output
