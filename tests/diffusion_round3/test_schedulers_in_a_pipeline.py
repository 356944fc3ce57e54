"""Schedulers honest inside a real pipeline (issue 47 item 4): Stable Diffusion's loop calls ``scale_model_input``
before every denoiser call (KDPM2's second stage scales by the interpolated sigma), and replay feeds the same;
SASolver's predictor-corrector state is recorded; and an error of ikdata's own replay of a scheduler step is an
error named as ikdata's, never the engine's wrong step."""

from __future__ import annotations

import json

import pipeline_judging as pj
import pipes_tiny
import pytest

# the ones that failed honestly in a pipeline (KDPM2's second stage, SASolver's state); Heun, Euler ancestral, KDPM2
# ancestral, LCM, TCD and DPM-Solver single-step were also run this way and pass (docs/diffusion.md "Schedulers")
SCHEDULERS = ["KDPM2DiscreteScheduler", "SASolverScheduler"]


def _build(name):
    import diffusers

    cls = getattr(diffusers, name)
    return lambda: pipes_tiny.sd(scheduler=cls.from_config({"num_train_timesteps": 100, "steps_offset": 1}))


@pytest.mark.parametrize("name", SCHEDULERS)
def test_an_honest_scheduler_in_a_pipeline_passes(name, tmp_path):
    pipes_tiny.BUILDERS[f"sd-{name}"] = _build(name)
    report = pj.replay(pj.capture(tmp_path / "ds", f"sd-{name}"), tmp_path / "report.json")
    case = pj.trajectory_case(report)
    assert case["status"] == "passed", case.get("reason")
    m = case["trajectory"]
    assert not [n for n in m["notes"] if "not fed the step's x" in n], m["notes"]
    assert all(s["chain"] == 0.0 for s in m["steps"])


def test_ikdatas_own_replay_error_is_named_as_ikdatas(tmp_path):
    from ikdata.diffusion.trajectories import trajectory_id

    pipes_tiny.BUILDERS["sd-SASolverScheduler"] = _build("SASolverScheduler")
    root = pj.capture(tmp_path / "ds", "sd-SASolverScheduler")
    [path] = (root / "trajectories").glob("*.jsonl")
    record = json.loads(path.read_text())
    del record["steps"][1]["state"]["last_noise"]  # state ikdata's replay needs but (here) did not record
    record["trajectory"] = trajectory_id(record)
    path.write_text(json.dumps(record) + "\n")
    case = pj.trajectory_case(pj.replay(root, tmp_path / "report.json"))
    assert case["status"] == "error"
    assert "ikdata could not run the reference SASolverScheduler.step" in case["reason"]
    assert "not the engine's step" in case["reason"] and "last_noise" in case["reason"]
