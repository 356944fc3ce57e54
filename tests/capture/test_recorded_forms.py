"""Calls recorded in the form they ran (issue 44): attention under ``torch.autocast`` in the dtype its kernel ran,
a convolution with ``padding="valid"``, backward GEMMs marked as backward; real programs under ``ikdata capture``."""

from __future__ import annotations

from capture_helpers import read_jsonl
from selection_programs import TINY_LLAMA, ikdata, ikdata_capture

AUTOCAST = TINY_LLAMA + """
ids = torch.randint(3, 128, (1, 9), generator=torch.Generator().manual_seed(1))
with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
    model(ids)
"""

CONV_VALID = """
import torch

torch.manual_seed(0)
patches = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4, padding="valid")   # SigLIP's patch embedding
same = torch.nn.Conv2d(3, 8, kernel_size=3, padding="same")
with torch.inference_mode():
    x = torch.randn(1, 3, 16, 16)
    patches(x)
    same(x)
"""

TRAINING_STEP = """
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
model(torch.randn(4, 16)).square().mean().backward()
"""


def test_attention_under_autocast_is_recorded_in_the_dtype_its_kernel_ran(tmp_path):
    done, dataset = ikdata_capture(tmp_path, "autocast.py", AUTOCAST, "--only", "attention")
    assert done.returncode == 0, done.stderr
    names = {r["definition"] for r in read_jsonl(dataset / "receipts.jsonl")}
    assert names == {"sdpa_causal_bf16_h4_kv2_d16"}, names
    replayed = ikdata(tmp_path, "replay", str(dataset), "--no-reuse")
    assert replayed.returncode == 0, replayed.stdout[-2000:]


def test_a_convolution_with_any_padding_form_is_recorded(tmp_path):
    done, dataset = ikdata_capture(tmp_path, "conv.py", CONV_VALID)
    assert done.returncode == 0, done.stderr
    variants = {(r["definition"], r["variant"]) for r in read_jsonl(dataset / "receipts.jsonl")}
    assert ("conv2d_bias_f32_o8_i3_k4x4", "n1_16x16_s4x4_p0x0_d1x1_g1") in variants, variants
    assert ("conv2d_bias_f32_o8_i3_k3x3", "n1_16x16_s1x1_p1x1_d1x1_g1") in variants, variants


def test_backward_gemms_are_marked_backward(tmp_path):
    done, dataset = ikdata_capture(tmp_path, "train.py", TRAINING_STEP, "--only", "gemm")
    assert done.returncode == 0, done.stderr
    receipts = read_jsonl(dataset / "receipts.jsonl")
    forward = [r for r in receipts if not r["variant"].endswith(".backward")]
    backward = [r for r in receipts if r["variant"].endswith(".backward")]
    assert {r["definition"] for r in forward} == {"dense_gemm_bias_f32_nt_n32_k16", "dense_gemm_bias_f32_nt_n8_k32"}
    assert len(backward) >= 3  # the weight gradients of both layers and the input gradient of the second
