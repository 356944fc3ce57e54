"""End to end with capture: a small model captured in-process replays clean, trusted through shipped templates."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ikdata
from ikdata.replay import recheck
from ikdata.replay.runner import replay

capture = pytest.importorskip("ikdata.capture")


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16, bias=False)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        h = self.norm(x)
        q = k = v = h.reshape(1, h.shape[0], 2, 8).transpose(1, 2)  # [B, H, L, D]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(h.shape)
        return self.down(F.gelu(self.up(a)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_captured_model_replays_clean_without_any_trust_flag(tmp_path, dtype):
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    torch.manual_seed(0)
    model = Tiny().to(dtype)
    boot.install(CaptureConfig(into=str(tmp_path / "ds"), strict=True))
    try:
        with capture.request("req-1"), torch.no_grad():
            model(torch.randn(5, 16).to(dtype))
        capture.flush()
    finally:
        boot.uninstall()
    result = replay(ikdata.open(tmp_path / "ds"))
    report = result.report
    assert result.refused == ()
    assert {c["definition"].split("_")[0] for c in report["cases"]} >= {"dense", "layernorm", "sdpa"}
    not_passed = [(c["definition"], c.get("reason")) for c in report["cases"] if c["status"] != "passed"]
    assert not_passed == []
    assert result.exit_code == 0
    assert all(recheck(c, report) == [] for c in report["cases"])
