"""A wrong sigma in the scheduler's table is blamed on the steps that used it (issue 47 item 3): the trajectory is
not stopped at step 0, the denoiser is judged at every step (and passes, the model being right), and only the
scheduler steps that read the wrong sigma fail, with the reason naming the step."""

from __future__ import annotations

import pipeline_judging as pj
import round3_pipes as r3


def test_a_wrong_sigma_at_step_2_fails_only_the_steps_that_read_it(tmp_path):
    root = pj.capture(tmp_path / "ds", "sd3", perturb=lambda pipe: r3.wrong_sigma_in_table(pipe, index=2))
    report = pj.replay(root, tmp_path / "report.json")
    case = pj.trajectory_case(report)
    m = case["trajectory"]
    assert case["status"] == "failed"
    assert not m["schedule"]["stopped"]
    assert [x["step"] for x in m["schedule"]["mismatches"]] == [1, 2]  # step 1's sigma_next, step 2's sigma
    assert len(m["steps"]) == 4 and m["steps_total"] == 4  # every step measured
    assert m["first_failure"] == {"step": 1, "streams": ["image"], "check": "chain"}
    assert "step 1 (image): sigma_next" in case["reason"] and "schedule mismatch" in case["reason"]
    by_index = {s["index"]: s for s in m["steps"]}
    assert all(by_index[i]["e"] <= by_index[i]["bound"] for i in range(4))  # the denoiser judged, right, everywhere
    assert [i for i in range(4) if not by_index[i]["passed"]] == [1, 2]
    assert pj.step_statuses(report, "denoiser") == {i: {"passed"} for i in range(4)}
    steps = pj.step_statuses(report, "scheduler_step")
    assert steps[1] == {"failed"} and steps[2] == {"failed"} and steps[0] == {"passed"} and steps[3] == {"passed"}
