"""Diffusion judged in the dtype the pipeline runs in: float32, bfloat16 and float16, on a UNet (Stable Diffusion,
Euler), a DiT (PixArt-Sigma, DDIM) and a flow-matching transformer (SD3).

In every dtype the honest run passes, its initial noise checked in the pipeline's dtype (the recipe drawn as the
pipeline draws it: the float32 numbers rounded), and e and f are measured against the reference one precision
higher (float64 for float32, float32 for bf16/fp16), so the floor is the dtype's rounding and never zero. The
guidance dropped at a step fails in every dtype. A 1% attention error fails where its effect on the output (its
e in the float32 run, where the floor is ~1e-7) exceeds what the dtype's floor lets a step detect, and passes
where it does not, with the report saying how small an error each step could have seen.
"""

from __future__ import annotations

import json

import pytest

import dtype_sweep as sweep
import pipeline_judging as pj

FAMILIES = ("sd", "pixart-sigma", "sd3")
DTYPES = ("float32", "bfloat16", "float16")
HIGHER = {"float32": "torch.float64", "bfloat16": "torch.float32", "float16": "torch.float32"}
# (family, dtype, kind) whose attention x1.01 at step 1 is caught: every float32 cell; in float16 without guidance
# on the UNet and the DiT (e/f 2.5 and 2.7); never in bfloat16 (its floor, 0.5% to 5%, is above the error's effect)
CAUGHT = {(f, "float32", k) for f in FAMILIES for k in ("guided", "unguided")} | \
    {("sd", "float16", "unguided"), ("pixart-sigma", "float16", "unguided")}


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """(family, dtype, kind) -> (report, dataset), each captured and replayed once."""
    found: dict = {}

    def get(family: str, dtype: str, kind: str):
        key = (family, dtype, kind)
        if key not in found:
            found[key] = sweep.run(tmp_path_factory.mktemp(f"{family}-{dtype}-{kind}"), family, dtype, kind)
        return found[key]

    return get


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_an_honest_run_passes_in_its_dtype_with_the_noise_checked_in_that_dtype(family, dtype, cells):
    from ikdata.diffusion import noise as noise_mod

    report, root = cells(family, dtype, "honest")
    case = pj.trajectory_case(report)
    assert case["status"] == "passed", case.get("reason")
    m = case["trajectory"]
    assert m["steps_passed"] == m["steps_total"] == sweep.STEPS
    assert m["level"] == "step output"  # the guidance is rebuilt in bf16/fp16 too
    [check] = m["noise"].values()
    assert check["equal"] is True and check.get("dtype", "torch.float32") == f"torch.{dtype}"
    for s in m["steps"]:
        assert s["dtype"] == f"torch.{dtype}" and s["reference_dtype"] == HIGHER[dtype]
        assert s["f"] >= s["slack"] > 0 and not s["degenerate"]  # the floor is the dtype's rounding: never zero
        assert s["e"] <= s["bound"]
    [line] = [json.loads(p.read_text()) for p in (root / "trajectories").glob("*.jsonl")]
    noise = line["noise"]
    assert noise["check"] == {"image": True} and noise["dtype"] == f"torch.{dtype}"
    streams = [noise_mod.Stream(s["name"], tuple(s["shape"])) for s in noise["streams"]]
    assert noise["digest"] == noise_mod.recipe_digest(noise["seed"], streams)  # the float32 recipe it was cast from


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_guidance_dropped_at_a_step_fails_that_step_in_every_dtype(family, dtype, cells):
    report, _ = cells(family, dtype, "guided")
    case = pj.trajectory_case(report)
    assert case["status"] == "failed"
    assert sweep.step(report, 0)["passed"]  # the steps before any error stay within the floor
    dropped = sweep.step(report, 2)
    assert not dropped["passed"] and dropped["failed"] == ["e"] and dropped["e"] > dropped["bound"]
    assert {i for i, s in pj.step_statuses(report, "denoiser").items() if "failed" in s} >= {2}


@pytest.mark.parametrize("kind", ["guided", "unguided"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_one_percent_attention_error_fails_exactly_where_the_dtype_can_see_it(family, dtype, kind, cells):
    report, _ = cells(family, dtype, kind)
    fp32_report, _ = cells(family, "float32", kind)
    wrong, size = sweep.step(report, 1), sweep.step(fp32_report, 1)["e"]  # the error's effect, seen in float32
    caught = (family, dtype, kind) in CAUGHT
    assert (not wrong["passed"]) == caught, (wrong["e"], wrong["bound"], size)
    assert (size > wrong["detectable"]) == caught  # caught exactly when the error is above the step's resolution
    if kind == "unguided":
        assert sweep.step(report, 2)["passed"]  # only the wrong step fails
    if caught:
        assert {i for i, s in pj.step_statuses(report, "denoiser").items() if "failed" in s} >= {1}
    case = pj.trajectory_case(report)
    assert case["trajectory"]["detectable"]["max"] >= wrong["detectable"] > 0  # the report says what it could see
