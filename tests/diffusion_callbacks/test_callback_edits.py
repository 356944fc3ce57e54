"""A ``callback_on_step_end`` that edits the latents between steps: the trajectory records that a callback ran after
the step, validate accepts the x that follows it, and replay says "edited by callback_on_step_end at step s" and
judges every step from its recorded x; without the record (no callback ran), the same change is a broken chain."""

from __future__ import annotations

import json

import pytest

import pipeline_judging as pj
import pipes_tiny


def _halve_at_step_1(pipe, i, t, kwargs):
    return {"latents": kwargs["latents"] * 0.5} if i == 1 else {}


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    def build(**kw):
        pipe, kwargs = pipes_tiny.sd(**kw)
        kwargs["callback_on_step_end"] = _halve_at_step_1
        return pipe, kwargs

    pipes_tiny.BUILDERS["sd-callback"] = build
    tmp = tmp_path_factory.mktemp("callback")
    try:
        root = pj.capture(tmp / "ds", "sd-callback", steps=3)
    finally:
        del pipes_tiny.BUILDERS["sd-callback"]
    return root, pj.replay(root, tmp / "r.json")


def _line(root):
    [path] = (root / "trajectories").glob("*.jsonl")
    return path, json.loads(path.read_text())


def test_a_callback_edit_is_recorded_accepted_by_validate_and_named_by_replay(edited):
    from ikdata.core.dataset import Dataset
    from ikdata.ops.validate import validate

    root, report = edited
    _, line = _line(root)
    assert line["edits"] == [{"stream": "image", "step": 1, "by": "callback_on_step_end"}]
    assert line["steps"][1]["x_next"]["path"] != line["steps"][2]["x"]["path"]  # the latent did change
    checked = validate(Dataset.open(root), deep=True)
    assert checked.ok, [str(p) for p in checked.problems]
    case = pj.trajectory_case(report)
    assert case["status"] == "passed", case.get("reason")
    m = case["trajectory"]
    [item] = [c for c in m["continuity"] if not c["equal"]]
    assert item["step"] == 1 and item["edited"] == "edited by callback_on_step_end at step 1"
    assert abs(item["rel"] - 0.5) < 1e-6  # x of step 2 is half of x_next of step 1
    assert any("edited by callback_on_step_end at step 1 (image)" in n for n in m["notes"])
    assert m["steps_passed"] == m["steps_total"] == 3  # step 2 judged from the edited latent


def test_the_same_change_without_its_record_is_a_broken_chain(edited, tmp_path):
    import shutil

    from ikdata.core.dataset import Dataset
    from ikdata.diffusion.trajectories import trajectory_id
    from ikdata.ops.validate import validate

    source, _ = edited
    root = tmp_path / "ds"
    shutil.copytree(source, root)
    path, record = _line(root)
    del record["edits"]
    record["trajectory"] = trajectory_id(record)
    path.write_text(json.dumps(record) + "\n")
    problems = [str(p) for p in validate(Dataset.open(root), deep=True).problems]
    assert any("x is not the x_next of step 1 (continuity broken)" in p for p in problems), problems
    case = pj.trajectory_case(pj.replay(root, tmp_path / "r.json"))
    assert case["status"] == "failed" and "continuity broken at step 1 of stream 'image'" in case["reason"]
