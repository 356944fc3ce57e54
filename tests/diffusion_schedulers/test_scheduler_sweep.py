"""Every scheduler judged exactly: an honest run passes with the chain recomputed bit for bit (noise drawn
inside the step and multistep state replayed), and a step with the wrong noise scale, a wrong sigma or a
wrong update fails at that step, blaming the scheduler step, not the denoiser."""

from __future__ import annotations

import pytest

import scheduler_sweep as sw

VARIANTS = sw.variants()
IDS = [v.label for v in VARIANTS]


def _case(sweep, variant, perturbation):
    if variant.label in sweep.left_out:
        pytest.skip(f"{variant.label}: {sweep.left_out[variant.label]}")
    key = (variant.label, perturbation)
    if key not in sweep.ids:
        pytest.skip(f"{variant.label}: its step draws no noise")
    return sweep.cases[sweep.ids[key]], sweep.ids[key]


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_an_honest_run_passes_with_every_step_recomputed_exactly(sweep, variant):
    case, trajectory = _case(sweep, variant, None)
    assert case["status"] == "passed", case.get("reason")
    steps = case["trajectory"]["steps"]
    assert len(steps) >= sw.STEPS
    assert all(s["e_same_dtype"] == 0 and s["chain"] == 0 for s in steps), [(s["index"], s["e_same_dtype"], s["chain"])
                                                                            for s in steps]
    assert case["trajectory"]["schedule_from"] == "set_timesteps(recorded arguments)"
    cases = sw.workload_cases(sweep, trajectory)
    assert cases["denoiser"] and all(c["status"] == "passed" for kind in cases.values() for c in kind)


@pytest.mark.parametrize("perturbation", sw.PERTURBATIONS)
@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_a_wrong_step_fails_at_that_step_and_blames_the_scheduler_step(sweep, variant, perturbation):
    case, trajectory = _case(sweep, variant, perturbation)
    at = sw.at(variant)
    m = case["trajectory"]
    assert case["status"] == "failed"
    assert m["first_failure"] == {"step": at, "streams": ["image"], "check": "chain"}, m["first_failure"]
    assert [s["index"] for s in m["steps"] if not s["passed"]] == [at]
    assert all(s["e_same_dtype"] == 0 for s in m["steps"])  # the denoiser is exact at every step
    assert f"scheduler step(s) wrong; first at step {at} (image: chain)" in case["reason"]
    assert "outside the floor" not in case["reason"] and "worst e/f" not in case["reason"]
    cases = sw.workload_cases(sweep, trajectory)
    assert all(c["status"] == "passed" for c in cases["denoiser"])  # exact denoiser workloads stay passed
    for c in cases.get("scheduler_step", []):  # the shipped step definitions (DDIM, flow Euler): blamed at `at`
        assert c["status"] == ("failed" if c["step"] == at else "passed"), (c["step"], c["status"])
        if c["step"] == at:
            assert f"step {at} of trajectory" in c["reason"] and "scheduler step(s) wrong" in c["reason"]


def test_stochastic_steps_record_their_noise_and_multistep_steps_their_state(sweep):
    def record(label):
        return sw.trajectory_record(sweep, sweep.ids[(label, None)])

    ddpm = record("DDPMScheduler")
    assert [len(s["noise"]) for s in ddpm["steps"]] == [1, 1, 0]  # DDPM adds no noise at t = 0
    assert all(n["source"] == "randn" and n["tensor"]["shape"] == [1, 2, sw.SIZE, sw.SIZE]
               for s in ddpm["steps"] for n in s["noise"])
    assert [len(s["noise"]) for s in record("EulerAncestralDiscreteScheduler")["steps"]] == [1, 1, 1]
    dpm = record("DPMSolverMultistepScheduler")
    histories = [s["state"]["model_outputs"]["list"] for s in dpm["steps"]]
    assert [sum(1 for h in history if h is not None) for history in histories] == [0, 1, 2]
    assert [s["state"]["lower_order_nums"] for s in dpm["steps"]] == [0, 1, 2]
    heun = record("HeunDiscreteScheduler")["steps"]
    assert [s["state"]["dt"] is None for s in heun] == [True, False, True, False, True]  # first / second stage
    assert record("DDIMScheduler(eta=0.5)")["steps"][0]["step_args"]["eta"] == 0.5


def test_noise_the_reference_step_draws_but_the_record_lacks_fails_with_that_reason(sweep, tmp_path):
    import json
    import shutil

    from ikdata.diffusion.trajectories import trajectory_id

    root = tmp_path / "ds"
    shutil.copytree(sweep.root, root)
    [path] = (root / "trajectories").glob("*.jsonl")
    keep = sweep.ids[("EulerAncestralDiscreteScheduler", None)]
    records = [json.loads(line) for line in path.read_text().splitlines()]
    [record] = [r for r in records if r["trajectory"] == keep]
    record["steps"][1]["noise"] = []  # the step reports no noise, but the scheduler draws some
    record["trajectory"] = trajectory_id(record)
    path.write_text(json.dumps(record) + "\n")
    case = sw.replay(sw.Sweep(root, {}), tmp_path / "r.json").cases[record["trajectory"]]
    assert case["status"] == "failed" and case["trajectory"]["first_failure"]["step"] == 1
    assert "the reference step draws noise of shape [1, 2, 8, 8], the engine's step drew 0 noise tensor(s)" \
        in case["reason"]


def test_non_finite_config_values_round_trip_and_validate_deep_passes(sweep):
    from ikdata.diffusion.trajectories import trajectory_id
    from ikdata.ops.validate import validate

    record = sw.trajectory_record(sweep, sweep.ids[("DPMSolverMultistepScheduler", None)])
    assert record["scheduler"]["config"]["lambda_min_clipped"] == "float:-inf"
    assert trajectory_id(record) == record["trajectory"]
    report = validate(sweep.root, deep=True)
    assert not [str(p) for p in report.problems if "edited" in str(p) or p.code == "trajectory-id"]
    assert report.ok, [str(p) for p in report.problems][:5]


def test_the_schedule_is_the_schedulers_own_with_the_pipelines_arguments(sweep):
    custom = sw.trajectory_record(sweep, sweep.ids[("FlowMatchEulerDiscreteScheduler(custom sigmas)", None)])
    arguments = custom["scheduler"]["set_timesteps"]["image"]
    assert arguments["sigmas"]["kind"] == "ndarray" and len(arguments["sigmas"]["values"]) == sw.STEPS
    shifted = sweep.cases[sweep.ids[("FlowMatchEulerDiscreteScheduler(shift=3, SD3 default schedule)", None)]]
    assert shifted["status"] == "passed" and not shifted["trajectory"]["schedule"]["stopped"]
    sigmas = shifted["trajectory"]["schedule"]["reference_sigmas"]
    assert sigmas[1] != pytest.approx(1 - 1 / sw.STEPS)  # not the linspace formula: the shifted default


def test_the_docs_table_is_the_sweeps_verdicts(sweep):
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "diffusion.md").read_text()
    assert "## Schedulers" in docs
    section = docs.split("## Schedulers", 1)[1]
    start = section.index(sw.TABLE_HEADER.splitlines()[0])
    written = section[start:].split("\n\n", 1)[0].strip()
    assert written == sw.table(sweep), "docs/diffusion.md's Schedulers table differs from the sweep; regenerate it " \
                                       "with scheduler_sweep.table()"
