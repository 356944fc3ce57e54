"""Pipelines that start part-way through their schedule: img2img (Stable Diffusion, Euler) and inpainting (a 9-channel
UNet: latents, mask and masked image's latents concatenated; DDIM) at strength 0.3, 0.6 and 1.0.

The trajectory records where the schedule starts (``request.start``) and the latents the scheduler's add_noise noised
into the first x (``init``); validate expects the steps from the start; replay checks the first x against
add_noise(init, the recipe's noise, timesteps[start]) and judges each step against the reference schedule at its
place, so an honest run passes and a 1% attention error fails at exactly its step.
"""

from __future__ import annotations

import json

import pytest

import partial_pipes
import pipeline_judging as pj
import pipes_tiny

STEPS = 5
STRENGTHS = (0.3, 0.6, 1.0)
TAKEN = {0.3: 1, 0.6: 3, 1.0: 5}  # int(5 * strength) steps, from index 5 - that


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    found: dict = {}

    def get(kind: str, strength: float, wrong: bool = False):
        key = (kind, strength, wrong)
        if key not in found:
            name = f"{kind}-{strength}-{wrong}"
            pipes_tiny.BUILDERS[name] = lambda **kw: getattr(partial_pipes, kind)(strength=strength, **kw)
            tmp = tmp_path_factory.mktemp(name)
            try:
                root = pj.capture(tmp / "ds", name, steps=STEPS,
                                  perturb=(lambda pipe: pj.perturbed(pipe, attention=1)) if wrong else None)
            finally:
                del pipes_tiny.BUILDERS[name]
            found[key] = (pj.replay(root, tmp / "r.json"), root)
        return found[key]

    return get


def _line(root):
    [line] = [json.loads(p.read_text()) for p in (root / "trajectories").glob("*.jsonl")]
    return line


@pytest.mark.parametrize("strength", STRENGTHS)
@pytest.mark.parametrize("kind", ["img2img", "inpaint"])
def test_an_honest_partial_run_passes_validate_and_replay_from_its_start(kind, strength, runs):
    from ikdata.core.dataset import Dataset
    from ikdata.ops.validate import validate

    report, root = runs(kind, strength)
    checked = validate(Dataset.open(root), deep=True)
    assert checked.ok, [str(p) for p in checked.problems]
    line = _line(root)
    taken = TAKEN[strength]
    assert line["request"]["steps"] == taken and line["request"].get("start", 0) == STEPS - taken
    assert [s["index"] for s in line["steps"]] == list(range(taken)) and line["noise"]["check"] == {"image": True}
    noised = kind == "img2img" or strength < 1  # inpainting at full strength starts from the noise itself
    assert ("init" in line) == noised
    case = pj.trajectory_case(report)
    assert case["status"] == "passed", case.get("reason")
    m = case["trajectory"]
    assert m["steps_passed"] == m["steps_total"] == taken and m["start"] == STEPS - taken
    assert m["noise"]["image"]["equal"] is True
    assert m["noise"]["image"]["method"] == ("add_noise(init, noise, timesteps[start])" if noised else "sorted values")
    assert m["schedule"]["reference_steps"] == STEPS and not m["schedule"]["stopped"]


@pytest.mark.parametrize("kind", ["img2img", "inpaint"])
def test_a_one_percent_attention_error_fails_at_its_step_of_a_partial_run(kind, runs):
    report, _ = runs(kind, 0.6, wrong=True)
    case = pj.trajectory_case(report)
    assert case["status"] == "failed"
    assert [s["index"] for s in case["trajectory"]["steps"] if not s["passed"]] == [1]
    assert {i for i, s in pj.step_statuses(report, "denoiser").items() if "failed" in s} == {1}


def test_a_start_that_is_not_the_pipelines_stops_the_schedule_check(runs, tmp_path):
    import shutil

    from ikdata.diffusion.trajectories import trajectory_id

    _, source = runs("img2img", 0.6)
    root = tmp_path / "ds"
    shutil.copytree(source, root)
    [path] = (root / "trajectories").glob("*.jsonl")
    record = json.loads(path.read_text())
    record["request"]["start"] = 1  # the steps were taken from index 2
    record["request"]["steps"] = 4
    record["trajectory"] = trajectory_id(record)
    path.write_text(json.dumps(record) + "\n")
    case = pj.trajectory_case(pj.replay(root, tmp_path / "r.json"))
    assert case["status"] == "failed" and case["trajectory"]["schedule"]["stopped"]
    assert "step 0 (image, schedule index 1): sigma" in case["reason"]  # step 0 is not the reference's step 1


def test_noise_from_another_seed_fails_the_noised_start(runs, tmp_path):
    from ikdata.diffusion.settings import Settings
    from ikdata.replay.runner import replay as run

    import ikdata

    _, root = runs("inpaint", 0.6)
    report = run(ikdata.open(root), reuse=False, report_path=tmp_path / "r.json", diffusion=Settings(seed=22)).report
    case = pj.trajectory_case(report)
    noise = case["trajectory"]["noise"]["image"]
    assert case["status"] == "failed" and noise["equal"] is False and noise["rel"] > 0
    assert "initial noise of stream 'image' is not the recipe's for seed 22" in case["reason"]
