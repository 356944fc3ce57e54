"""The judges at the edges: bf16 rounding, inf and NaN, integers, matched ratio, metric judges."""

from __future__ import annotations

import math

import pytest
import torch

from ikdata.replay.judges import judge_output
from ikdata.core.tolerances import (DEFAULT_TOLERANCES, JudgeSpec, Tolerance, judge_for, table,
                                      tolerance_for)

INF, NAN = math.inf, math.nan


def judge(actual, expected, dtype=None, **override):
    expected = torch.as_tensor(expected, dtype=dtype) if not isinstance(expected, torch.Tensor) else expected
    actual = torch.as_tensor(actual, dtype=expected.dtype) if not isinstance(actual, torch.Tensor) else actual
    return judge_output("C", actual, expected, tolerance_for(str(expected.dtype), override or None))


class TestTable:
    def test_seed_values_and_added_dtypes(self):
        assert DEFAULT_TOLERANCES["bfloat16"] == {"rtol": 0.016, "atol": 0.005}
        assert DEFAULT_TOLERANCES["float32"] == {"rtol": 1e-4, "atol": 2e-5}
        for dtype in ("float16", "float8_e4m3fn", "float8_e5m2", "float64"):
            assert dtype in DEFAULT_TOLERANCES
        recorded = table()
        assert recorded["integer"] == "exact" and recorded["bool"] == "exact"
        assert recorded["gdn_chunk_state"]["relative_rms"] == 0.01

    def test_override_and_matched_ratio(self):
        rule = tolerance_for("bfloat16", {"bfloat16": {"rtol": 0.1, "atol": 0.0}, "matched_ratio": 0.9})
        assert rule == Tolerance("bfloat16", 0.1, 0.0, 0.9)
        assert tolerance_for("int32", {"int32": {"rtol": 1, "atol": 1}}) == Tolerance("int32", 0.0, 0.0, 1.0)
        assert tolerance_for("float4_e2m1") is None


class TestElementwise:
    def test_bf16_within_and_beyond_the_allclose_bound(self):
        expected = torch.tensor([1.0, 100.0], dtype=torch.bfloat16)
        # 100 * 0.016 + 0.005 = 1.605: 101.0 passes, 102.0 does not.
        assert judge(torch.tensor([1.0, 101.0], dtype=torch.bfloat16), expected).passed
        failed = judge(torch.tensor([1.0, 102.0], dtype=torch.bfloat16), expected)
        assert not failed.passed
        assert failed.metrics["mismatched_fraction"] == 0.5
        assert failed.reason == ("output 'C': 1 of 2 elements (50.000%) fail |a - e| <= 0.005 + 0.016 * |e| "
                                 "(bfloat16); max abs error 2")

    def test_metrics_on_a_known_example(self):
        found = judge([3.0, 4.0], [3.0, 4.5], torch.float32).metrics
        assert found["max_abs_error"] == 0.5
        assert found["max_rel_error"] == pytest.approx(0.5 / 4.5)
        assert found["relative_rms"] == pytest.approx(0.5 / math.hypot(3.0, 4.5))
        assert found["cosine_similarity"] == pytest.approx((9 + 18) / (5 * math.hypot(3.0, 4.5)))
        assert found["mismatched_fraction"] == 0.5

    def test_inf_must_meet_inf_of_the_same_sign(self):
        assert judge([INF, -INF, 1.0], [INF, -INF, 1.0], torch.float32).passed
        opposite = judge([-INF, 1.0], [INF, 1.0], torch.float32)
        assert not opposite.passed and opposite.metrics["max_abs_error"] == "inf"
        finite = judge([1e30, 1.0], [INF, 1.0], torch.float32)
        assert not finite.passed and finite.metrics["mismatched_fraction"] == 0.5

    def test_inf_against_a_finite_expected_value(self):
        verdict = judge([INF, 1.0], [2.0, 1.0], torch.bfloat16)
        assert not verdict.passed
        assert verdict.metrics["max_abs_error"] == "inf"
        assert verdict.metrics["cosine_similarity"] == "nan"

    def test_nan_passes_only_against_nan_at_the_same_place(self):
        assert judge([NAN, 1.0], [NAN, 1.0], torch.float32).passed
        verdict = judge([NAN, 1.0], [0.5, 1.0], torch.float32)
        assert not verdict.passed and verdict.metrics["max_abs_error"] == "nan"
        assert not judge([1.0, 1.0], [NAN, 1.0], torch.float32).passed

    def test_matched_ratio_allows_that_fraction_to_miss(self):
        expected = torch.zeros(10)
        actual = expected.clone()
        actual[0] = 1.0
        assert not judge(actual, expected).passed
        assert judge(actual, expected, matched_ratio=0.9).passed
        actual[1] = 1.0
        verdict = judge(actual, expected, matched_ratio=0.9)
        assert not verdict.passed and verdict.reason.endswith("at most 1 may (matched_ratio 0.9)")

    @pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"])
    def test_low_precision_floats_pass_two_roundings_apart(self, dtype):
        torch_dtype = getattr(torch, dtype)
        bits = torch.int16 if torch_dtype.itemsize == 2 else torch.int8
        expected = torch.linspace(-3, 3, 65).to(torch_dtype)
        for ulps in (1, 2):  # the next representable values, away from zero
            apart = (expected.view(bits) + ulps).view(torch_dtype)
            assert judge(apart, expected).passed, ulps
        assert not judge((expected.float() * 2.5).to(torch_dtype), expected).passed

    def test_integers_and_bools_are_exact(self):
        assert judge([1, 2, 3], [1, 2, 3], torch.int32).passed
        verdict = judge([1, 2, 4], [1, 2, 3], torch.int32)
        assert not verdict.passed and verdict.metrics["max_abs_error"] == 1.0
        assert "must be equal (int32)" in verdict.reason
        assert not judge([True, False], [True, True], torch.bool).passed
        assert judge([True, False], [True, False], torch.bool).passed

    def test_dtype_and_shape_must_match_exactly(self):
        expected = torch.ones(2, 3)
        verdict = judge_output("C", torch.ones(2, 3, dtype=torch.float64), expected, Tolerance("float32", 1, 1))
        assert not verdict.passed
        assert verdict.reason == "output 'C' has dtype torch.float64, the captured output has torch.float32"
        verdict = judge_output("C", torch.ones(3, 2), expected, Tolerance("float32", 1, 1))
        assert verdict.reason == "output 'C' has shape [3, 2], the captured output has [2, 3]"
        verdict = judge_output("C", 1.0, expected, Tolerance("float32", 1, 1))
        assert verdict.reason == "output 'C' is a float, expected a tensor"

    @pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn", "int32", "bool"])
    def test_fast_path_agrees_with_the_general_one(self, dtype):
        from ikdata.replay.judges import _base_metrics, _compare, _finite_metrics

        generator = torch.Generator().manual_seed(3)
        e = torch.randn(64, generator=generator) * 4
        a = e * (1 + 0.02 * torch.randn(64, generator=generator))
        e[:3], a[:3] = 0.0, torch.tensor([0.0, 1e-3, 0.5])
        a, e = a.to(getattr(torch, dtype)), e.to(getattr(torch, dtype))
        rule, exact = tolerance_for(dtype), dtype in ("int32", "bool")
        fast, fast_count = _finite_metrics(a.double(), e.double(), a, e, rule, exact)
        general, count = _base_metrics(_compare(a, e), rule, exact, a, e)
        assert fast_count == count
        assert fast == pytest.approx(general, rel=1e-9, abs=1e-12)

    def test_empty_tensors_pass(self):
        verdict = judge(torch.ones(0, 4), torch.ones(0, 4))
        assert verdict.passed and verdict.metrics["mismatched_fraction"] == 0.0


class TestGdnChunkStateJudge:
    def state(self):
        return torch.randn(2, 8, 16, 16, generator=torch.Generator().manual_seed(0))

    def test_bf16_sized_errors_pass(self):
        expected = self.state()
        actual = expected * (1 + 0.004 * torch.randn(expected.shape, generator=torch.Generator().manual_seed(1)))
        rule = judge_for("float32", "state", {"name": "gdn_chunk_state"})
        verdict = judge_output("state", actual, expected, rule)
        assert verdict.passed, verdict.reason
        assert set(verdict.metrics) >= {"relative_rms", "relative_max", "max_head_relative_rms",
                                        "max_abs_error", "cosine_similarity", "mismatched_fraction"}
        assert verdict.rule == {"dtype": "float32", "judge": "gdn_chunk_state",
                                "bounds": {"relative_rms": 0.01, "relative_max": 0.015, "max_head_relative_rms": 0.02}}

    def test_one_bad_head_fails_on_the_worst_head_bound(self):
        expected = self.state()
        actual = expected.clone()
        actual[1, 2] *= 1.03  # one head 3% off: whole-tensor RMS stays under 1%, the head does not
        verdict = judge_output("state", actual, expected, JudgeSpec("float32", "gdn_chunk_state",
                                                                    {"relative_rms": 0.01, "relative_max": 0.1,
                                                                     "max_head_relative_rms": 0.02}))
        assert not verdict.passed
        assert verdict.metrics["relative_rms"] < 0.01
        assert verdict.reason.startswith("output 'state': judge 'gdn_chunk_state': max_head_relative_rms = 0.03 > 0.02")

    def test_nan_fails_every_bound(self):
        expected = self.state()
        actual = expected.clone()
        actual[0, 0, 0, 0] = NAN
        verdict = judge_output("state", actual, expected, judge_for("float32", "state", {"name": "gdn_chunk_state"}))
        assert not verdict.passed and verdict.metrics["relative_rms"] == "nan"

    def test_judge_applies_only_to_the_outputs_it_names(self):
        spec = {"name": "gdn_chunk_state", "outputs": ["state"]}
        assert judge_for("float32", "output", spec) is None
        assert judge_for("float32", "state", spec).name == "gdn_chunk_state"
        assert judge_for("int32", "state", {"name": "gdn_chunk_state"}) is None
