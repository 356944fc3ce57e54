"""The step rule by dtype, torch-free: the bound adds the step's slack (one rounding to the engine's dtype), and
import's re-check refuses a slack larger than that dtype's unit roundoff."""

from __future__ import annotations

from ikdata.diffusion import verdicts


def _measures(slack: float, e: float, dtype: str = "torch.bfloat16") -> dict:
    return {"k": verdicts.DEFAULT_K, "eps": verdicts.DEFAULT_EPS, "fallback_tolerance": 1e-4, "scheduler": "S",
            "steps": [{"index": 0, "stream": "image", "dtype": dtype, "e": e, "f": 0.01, "slack": slack,
                       "chain": 0.0, "chain_bound": verdicts.chain_bound(dtype)}]}


def test_the_bound_is_k_f_plus_the_slack_and_says_what_it_can_detect():
    inside = _measures(0.002, 0.0219)
    verdict = verdicts.decide(inside)
    step = inside["steps"][0]
    assert verdict["status"] == "passed" and step["bound"] == 2 * 0.01 + 0.002
    assert abs(step["detectable"] - (0.022 ** 2 - 0.01 ** 2) ** 0.5) < 1e-12
    assert verdict["detectable"] == {"min": step["detectable"], "max": step["detectable"]}
    assert verdicts.decide(_measures(0.002, 0.0221))["status"] == "failed"


def test_recheck_refuses_a_slack_looser_than_one_rounding():
    case = {"status": "passed", "trajectory": _measures(0.002, 0.001)}
    assert verdicts.recheck(case) == []
    loose = {"status": "passed", "trajectory": _measures(0.01, 0.001)}  # above bf16's unit roundoff 2**-9
    assert any("slack 0.01 is not one rounding to torch.bfloat16" in p for p in verdicts.recheck(loose))
    fp32 = {"status": "passed", "trajectory": _measures(1e-6, 0.001, "torch.float32")}
    assert any("slack" in p for p in verdicts.recheck(fp32))  # float32's unit roundoff is 6e-8
