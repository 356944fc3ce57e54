"""The dispatcher path on real models: every GEMM a model ran is a workload, whatever Python function ran it.

Each model (tiny random weights, built from a config) runs one forward under capture while a
TorchDispatchMode of the test's own counts every GEMM the dispatcher ran. What was recorded must
be exactly the GEMM shapes that ran: GPT-2's Conv1D (``torch.addmm``), T5's attention
(``torch.matmul`` on 4-D tensors, ``aten::bmm``), a conv net's head, Llama's projections and
rotary product. The census accounts for every GEMM call: recorded, or left by the selection rule.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import ikdata
import ikdata.capture as capture
from capture_helpers import read_jsonl
from ikdata.capture import census
from ikdata.core.writer import DatasetWriter

pytest.importorskip("transformers")

GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
SHORT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


class GemmCounter(TorchDispatchMode):
    """The test's own view of what ran: each GEMM call as (definition it is a workload of, axes)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter = Counter()
        self.expected: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in GEMMS:
            self.calls[name] += 1
            self.expected.add(_expected(name, args, kwargs))
        return func(*args, **kwargs)


def _expected(name, args, kwargs):
    s = SHORT[args[-1].dtype]
    if name == "aten::mm":
        (m, k), n = args[0].shape, args[1].shape[1]
        return f"dense_gemm_{s}_nt_n{n}_k{k}", (("M", m),)
    if name == "aten::addmm":
        assert args[0].dim() == 1, "a full addend has no definition: this model was not expected to run one"
        (m, k), n = args[1].shape, args[2].shape[1]
        return f"dense_gemm_bias_{s}_nt_n{n}_k{k}", (("M", m),)
    a, b = (args[0], args[1]) if name == "aten::bmm" else (args[1], args[2])
    assert name == "aten::bmm" or kwargs.get("beta", 1) == 0, "baddbmm with an addend: no definition"
    batch, m, k = a.shape
    return f"bmm_{s}_n{b.shape[2]}_k{k}", (("BATCH", batch), ("K", k), ("M", m), ("N", b.shape[2]))


def _recorded(root):
    found = set()
    for f in sorted((root / "workloads").rglob("*.jsonl")):
        for row in read_jsonl(f):
            d = row["definition"]
            if d.startswith(("dense_gemm", "bmm_")):
                axes = row["workload"]["axes"]
                found.add((d, tuple(sorted(axes.items())) if d.startswith("bmm_") else (("M", axes["M"]),)))
    return found


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=64, n_positions=32,
                                       bos_token_id=0, eos_token_id=0))
    return model.eval(), {"input_ids": torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])}


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration

    model = T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                                                num_decoder_layers=1, num_heads=2, decoder_start_token_id=0))
    return model.eval(), {"input_ids": torch.tensor([[1, 2, 3, 4]]), "decoder_input_ids": torch.tensor([[0, 5, 6]])}


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                                         bos_token_id=0, eos_token_id=0, pad_token_id=0))
    return model.eval(), {"input_ids": torch.tensor([[1, 2, 3, 4, 5, 6]])}


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(4 * 6 * 6, 10)
        self.proj = torch.nn.Linear(10, 5, bias=False)

    def forward(self, x):
        return self.proj(self.head(torch.relu(self.conv(x)).flatten(1)))


def _convnet():
    return ConvNet().eval(), {"x": torch.randn(2, 3, 8, 8)}


@pytest.mark.parametrize("build", [_gpt2, _t5, _convnet, _llama], ids=["gpt2", "t5", "convnet", "llama"])
def test_every_gemm_shape_a_model_ran_is_recorded(capture_into, tmp_path, build):
    torch.manual_seed(0)
    model, inputs = build()
    census.reset()
    capture_into()
    counter = GemmCounter()
    with torch.no_grad(), capture.request("r1"), counter:
        model(**inputs)
    capture.flush()
    root = tmp_path / "ds"
    assert counter.calls, "the model ran no GEMM: the test would prove nothing"
    assert _recorded(root) == counter.expected
    counts = {o.op: o for o in census.ops()}
    for op, calls in counter.calls.items():
        line = counts[op]
        assert line.calls == calls, f"{op}: the census counted {line.calls} calls, {calls} ran"
        reasons = {reason for reason, _, _ in line.skipped}
        assert reasons <= {"selection rule"}, f"{op} calls not recorded for {reasons}"
        assert sum(line.recorded.values()) + sum(n for _, _, n in line.skipped) == calls
    DatasetWriter(root).commit()
    assert ikdata.validate(ikdata.open(root), deep=True).problems == []


def test_gpt2_conv1d_gemms_replay_against_what_the_model_computed(capture_into, tmp_path):
    """GPT-2's Conv1D calls torch.addmm, which no patched function sees: its workloads replay and pass."""
    from ikdata.replay.runner import replay

    torch.manual_seed(0)
    model, inputs = _gpt2()
    capture_into()
    with torch.no_grad(), capture.request("r1"):
        model(**inputs)
    capture.flush()
    root = tmp_path / "ds"
    DatasetWriter(root).commit()
    receipts = read_jsonl(root / "receipts.jsonl")
    addmm = [r for r in receipts if r["operation"] == "aten::addmm"]
    assert {r["definition"] for r in addmm} == {"dense_gemm_bias_f32_nt_n48_k16", "dense_gemm_bias_f32_nt_n16_k16",
                                                 "dense_gemm_bias_f32_nt_n64_k16", "dense_gemm_bias_f32_nt_n16_k64"}
    assert all(r["module_path"].startswith("GPT2LMHeadModel.transformer.h.0.") for r in addmm)
    result = replay(ikdata.open(root), reuse=False)
    cases = result.report["cases"]
    assert {c["status"] for c in cases} == {"passed"} and len(cases) == len(receipts) and result.exit_code == 0


def test_only_naming_another_definition_interposes_nothing(capture_into):
    """--only that no dispatcher mapping can produce: no op kernel is replaced, so those calls cost nothing."""
    cap = capture_into(only=["rmsnorm"])
    assert cap.dispatch.builtins == {} and cap.dispatch.libraries == {} and not cap.dispatch.wanted


def test_selected_steps_only(capture_into, tmp_path):
    """--steps 1: the first forward (step 0) is not entered at all (it costs nothing); the second is recorded."""
    torch.manual_seed(0)
    model, inputs = _gpt2()
    census.reset()
    capture_into(steps=(1,))
    with torch.no_grad(), capture.request("r1"):
        model(**inputs)
        model(**inputs)
    capture.flush()
    steps = {r["step"] for r in read_jsonl(tmp_path / "ds" / "receipts.jsonl")}
    assert steps == {1}
    [addmm] = [o for o in census.ops() if o.op == "aten::addmm"]
    assert addmm.calls == 8 and sum(addmm.recorded.values()) == 4  # 4 shapes, each twice (2 layers) in step 1


@pytest.mark.parametrize("build, ops", [
    (_convnet, {"aten::conv2d": "conv2d_bias_f32_o4_i3_k3x3", "aten::relu": "relu_f32_h6"}),  # as called: inference_mode never reaches aten::convolution
    (_llama, {"aten::embedding": "embedding_f32_v64_h16", "aten::silu": "silu_f32_h32"}),
], ids=["convnet", "llama"])
def test_convolutions_embeddings_and_activations_are_recorded_and_replay(capture_into, tmp_path, build, ops):
    from ikdata.replay.runner import replay

    torch.manual_seed(0)
    model, inputs = build()
    census.reset()
    capture_into()
    with torch.no_grad(), capture.request("r1"):
        model(**inputs)
    capture.flush()
    counts = {o.op: o for o in census.ops()}
    for op, definition in ops.items():
        assert definition in counts[op].recorded, (op, counts[op])
    root = tmp_path / "ds"
    DatasetWriter(root).commit()
    result = replay(ikdata.open(root), reuse=False)
    statuses = {c["definition"]: c["status"] for c in result.report["cases"]}
    assert set(ops.values()) <= set(statuses) and set(statuses.values()) == {"passed"}, statuses
