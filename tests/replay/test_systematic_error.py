"""The systematic-error test beside the per-element tolerance: a small scale error fails in every dtype, on
outputs of any magnitude; honest kernels (torch's own, against the shipped references) pass."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ikdata
from ikdata.core.definitions import Definition
from ikdata.core.tolerances import SYSTEMATIC, UNIT_ROUNDOFF, systematic_failures, table, tolerance_for
from ikdata.replay import recheck
from ikdata.replay.judges import judge_output, systematic_metrics
from ikdata.replay.runner import replay

from .replay_helpers import gemm_record

ROOT = Path(__file__).resolve().parents[2]
SHORT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def shipped(path: str):
    """The ``run`` of a shipped definition's reference."""
    record = json.loads((ROOT / "definitions" / path).read_text())
    definition = Definition.from_dict(record, origin="shipped", source=path)
    namespace: dict = {}
    exec(compile(definition.reference, path, "exec"), namespace)
    return namespace[definition.entry]


def gemm(dtype, *, m=64, k=512, n=64, std=1.0, seed=0):
    """(torch's F.linear in the dtype, the shipped dense_gemm reference) on the same inputs."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * std).to(dtype)
    w = (torch.randn(n, k, generator=g) * std).to(dtype)
    return F.linear(a, w), shipped(f"gemm/dense_gemm_{SHORT[dtype]}_nt.json")(a, w)


def scaled(engine, error):
    return (engine.float() * (1 + error)).to(engine.dtype)


def judge(engine, reference):
    return judge_output("C", reference, engine, tolerance_for(str(engine.dtype)))


class TestScaleErrors:
    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    @pytest.mark.parametrize("std", [1.0, 0.01])  # outputs of RMS ~23 and ~0.002 (atol dominates in bf16)
    def test_a_one_percent_scale_error_fails_where_every_element_is_within_tolerance(self, dtype, std):
        engine, reference = gemm(dtype, std=std)
        assert judge(engine, reference).passed  # the honest kernel
        verdict = judge(scaled(engine, 0.01), reference)
        assert not verdict.passed
        assert verdict.metrics["mismatched_fraction"] == 0.0 or dtype == torch.float16  # fp16: rtol is 2e-3
        assert "systematic error" in verdict.reason and "scale error +" in verdict.reason
        assert verdict.metrics["scale_error"] == pytest.approx(0.01, abs=0.002)
        assert verdict.metrics["detectable_scale_error"] < 0.01

    def test_the_issues_bf16_down_proj_five_percent_fails(self):
        # down_proj at the issue's init: outputs ~0.007; every |a - e| is under atol 0.005
        engine, reference = gemm(torch.bfloat16, m=32, k=1024, n=64, std=0.015)
        assert 0.003 < float(reference.float().pow(2).mean().sqrt()) < 0.02
        verdict = judge(scaled(engine, 0.05), reference)
        assert verdict.metrics["mismatched_fraction"] == 0.0
        assert not verdict.passed
        assert "relative RMS error" in verdict.reason and "scale error +" in verdict.reason

    def test_a_small_output_of_1024_elements_is_enough(self):
        engine, reference = gemm(torch.bfloat16, m=16, k=64, n=64, std=0.03)
        assert engine.numel() == 1024 and judge(engine, reference).passed
        assert not judge(scaled(engine, 0.01), reference).passed

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_a_wrong_offset_fails(self, dtype):
        engine, reference = gemm(dtype, std=0.05)
        rms = float(reference.float().pow(2).mean().sqrt())
        shifted = (engine.float() + 0.01 * rms).to(dtype)  # a dropped or added constant, 1% of the RMS
        verdict = judge(shifted, reference)
        assert not verdict.passed and "offset error +" in verdict.reason

    def test_float32_sees_a_scale_error_of_one_in_ten_thousand(self):
        engine, reference = gemm(torch.float32, std=0.01)
        assert judge(engine, reference).passed
        verdict = judge(engine * (1 + 1e-4), reference)
        assert not verdict.passed and "systematic error" in verdict.reason


class TestHonestKernelsPass:
    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("shape", [(16, 64, 64, 0.03), (128, 512, 256, 1.0), (64, 4096, 128, 0.01)])
    def test_gemm(self, dtype, shape):
        m, k, n, std = shape
        for seed in range(3):
            verdict = judge(*gemm(dtype, m=m, k=k, n=n, std=std, seed=seed))
            assert verdict.passed, verdict.reason
            assert abs(verdict.metrics["scale_error"]) <= UNIT_ROUNDOFF[str(dtype)[6:]]

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_attention_rmsnorm_and_eager_attention(self, dtype):
        g = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(2, 4, 128, 64, generator=g).to(dtype) for _ in range(3))
        scale = 1 / math.sqrt(64)
        reference = shipped(f"attention/sdpa_{SHORT[dtype]}.json")(q, k, v, scale)
        assert judge(F.scaled_dot_product_attention(q, k, v, scale=scale), reference).passed
        # probabilities rounded to the dtype (as flash kernels do): honest, and unbiased
        eager = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v
        assert "systematic error" not in (judge(eager, reference).reason or "")
        x, w = (torch.randn(64, 1024, generator=g) * 3).to(dtype), (1 + torch.randn(1024, generator=g) / 10).to(dtype)
        assert judge(F.rms_norm(x, (1024,), w, eps=1e-6), shipped(f"norm/rmsnorm_{SHORT[dtype]}.json")(x, w, 1e-6)).passed

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    def test_reduced_precision_split_k_is_not_a_systematic_error(self, dtype):
        g = torch.Generator().manual_seed(2)
        a, w = (torch.randn(128, 512, generator=g) / 4).to(dtype), (torch.randn(256, 512, generator=g) / 4).to(dtype)
        parts = [F.linear(x, y) for x, y in zip(a.chunk(4, dim=1), w.chunk(4, dim=1))]
        engine = parts[0] + parts[1] + parts[2] + parts[3]  # partial sums rounded to the dtype
        found = judge(engine, shipped(f"gemm/dense_gemm_{SHORT[dtype]}_nt.json")(a, w))
        assert "systematic error" not in (found.reason or "")
        assert abs(found.metrics["scale_error_t"]) < SYSTEMATIC["t"]


class TestRecorded:
    def test_metrics_and_table(self):
        verdict = judge(*gemm(torch.bfloat16))
        found = verdict.metrics
        assert found["systematic_floor"] == 2.0 ** -8 and found["systematic_t_bound"] == SYSTEMATIC["t"]
        assert found["relative_rms_bound"] == 0.016
        assert found["detectable_scale_error"] >= 2.0 ** -8
        for key in ("scale_error", "scale_error_t", "offset_error", "offset_error_t"):
            assert isinstance(found[key], float)
        assert table()["systematic"]["t"] == SYSTEMATIC["t"]
        assert table()["systematic"]["floor"]["float16"] == 2.0 ** -11

    def test_small_outputs_are_judged_per_element_only(self):
        verdict = judge(torch.ones(100, dtype=torch.bfloat16) * 1.0078125, torch.ones(100, dtype=torch.bfloat16))
        assert verdict.passed and "scale_error" not in verdict.metrics

    def test_integers_are_exact_only(self):
        values = torch.arange(1000, dtype=torch.int32)
        verdict = judge_output("C", values, values, tolerance_for("int32"))
        assert verdict.passed and "scale_error" not in verdict.metrics

    def test_the_jackknife_sees_a_per_row_error_once(self):
        g = torch.Generator().manual_seed(3)
        reference = torch.randn(64, 256, generator=g, dtype=torch.float64)
        rows = 1 + 1e-3 * torch.randn(64, 1, generator=g, dtype=torch.float64)  # a random scale per row, mean 1
        found = systematic_metrics(reference, reference * rows)
        assert abs(found["scale_error_t"]) < SYSTEMATIC["t"]

    def test_systematic_failures_is_the_rule_import_recomputes(self):
        passing = {"scale_error": 0.001, "scale_error_t": 50.0, "offset_error": 0.0, "offset_error_t": 0.0,
                   "relative_rms": 0.003, "relative_rms_bound": 0.016, "systematic_floor": 2.0 ** -8,
                   "systematic_t_bound": 6.0}
        assert systematic_failures("bfloat16", passing, 0.016) == []
        assert systematic_failures("bfloat16", {**passing, "scale_error": 0.01}, 0.016) == [
            "scale error +1% (engine vs reference; 50 standard errors; bound 0.391% and 6 standard errors)"]
        assert systematic_failures("bfloat16", {**passing, "systematic_t_bound": 60.0}, 0.016) == [
            "systematic_t_bound 60 is looser than the default 6"]
        assert systematic_failures("bfloat16", {"relative_rms": 0.5}, 0.016) == []  # recorded before the test


class TestReplay:
    def test_a_replayed_bf16_gemm_with_a_one_percent_scale_fails_and_says_why(self, build):
        record = gemm_record(dtype="bfloat16")

        def inputs(i, g):
            return {"A": (torch.randn(256, 8, generator=g) * 0.1).to(torch.bfloat16),
                    "W": (torch.randn(4, 8, generator=g) * 0.1).to(torch.bfloat16)}

        def outputs(i, given):
            exact = given["A"].float() @ given["W"].float().T
            return {"C": (exact * (1.01 if i == 1 else 1.0)).to(torch.bfloat16)}

        built = build(2, record=record, inputs=inputs, outputs=outputs)
        result = replay(ikdata.open(built.root, definitions=[built.definitions]))
        cases = {c["uuid"]: c for c in result.report["cases"]}
        honest, wrong = cases[built.uuids[0]], cases[built.uuids[1]]
        assert honest["status"] == "passed", honest.get("reason")
        assert wrong["status"] == "failed"
        assert wrong["metrics"]["C"]["mismatched_fraction"] == 0.0  # every element within atol + rtol |e|
        assert "systematic error" in wrong["reason"] and "scale error +" in wrong["reason"]
        assert result.report["tolerances"]["systematic"]["t"] == SYSTEMATIC["t"]
        # import's re-check recomputes the test from the recorded metrics: an edited "passed" is not trusted
        assert recheck(honest, result.report) == []
        edited = {**wrong, "status": "passed", "reason": None}
        assert any("scale error +" in reason for reason in recheck(edited, result.report))


def test_the_calibration_tool_counts_false_alarms_and_catches(monkeypatch):
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("judge_calibration", ROOT / "tools" / "judge_calibration.py")
    tool = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "judge_calibration", tool)  # its dataclasses look their module up
    spec.loader.exec_module(tool)
    row = tool.calibrate("gemm", "bfloat16", 3)
    assert row.runs == 3 and row.false_alarms == 0 and row.caught[0.01] == 3 and row.caught[0.05] == 3
    table = tool.table([row])
    assert "| gemm | bfloat16 | 3 | 1024-32768 | 0 (0) |" in table
