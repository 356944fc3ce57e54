"""Guidance is judged or declared (issue 47 item 1), on real tiny pipelines captured in this process.

Lumina2 calls its transformer twice a step (conditional, then unconditional), normalizes the guided prediction to
the conditional's norm and negates it: that form is rebuilt, so dropping the guidance at step 2 fails step 2 and
an error in the second call fails its step. A form ikdata does not rebuild (adaptive projected guidance) is
declared "guidance not judged" in the case's reason and the report's notes, and every call of the step is still
judged at the denoiser's output."""

from __future__ import annotations

import functools

import pipeline_judging as pj
import pipes_tiny
import round3_pipes as r3

pipes_tiny.BUILDERS.setdefault("lumina2", r3.lumina2)


def _run(tmp_path, name, perturb=None):
    report = pj.replay(pj.capture(tmp_path / "ds", name, perturb=perturb), tmp_path / "report.json")
    return report, pj.trajectory_case(report)


def test_lumina2_guidance_is_rebuilt_and_judged(tmp_path):
    report, case = _run(tmp_path, "lumina2")
    m = case["trajectory"]
    assert case["status"] == "passed", case.get("reason")
    assert m["level"] == "step output"
    assert m["guidance"]["image"] == {"judged": True, "form": "cfg-2calls-normalized-negated", "steps_not_rebuilt": []}
    assert pj.step_statuses(report, "denoiser") == {i: {"passed"} for i in range(r3.STEPS)}


def test_lumina2_guidance_dropped_fails_its_step_only(tmp_path):
    dropped = functools.partial(r3.conditional_alone, negate=True)
    report, case = _run(tmp_path, "lumina2", lambda pipe: r3.guided_by(pipe, dropped, steps={2}))
    assert case["status"] == "failed"
    assert case["trajectory"]["first_failure"] == {"step": 2, "streams": ["image"], "check": "e"}
    assert case["trajectory"]["guidance"]["image"]["steps_not_rebuilt"] == [2]
    statuses = pj.step_statuses(report, "denoiser")
    assert statuses[2] == {"failed"} and all(statuses[i] == {"passed"} for i in (0, 1, 3))


def test_lumina2_second_call_wrong_is_not_passed(tmp_path):
    report, case = _run(tmp_path, "lumina2", lambda pipe: r3.wrong_call(pipe, step=1, call=1, scale=1.1))
    assert case["status"] == "failed"
    assert case["trajectory"]["first_failure"]["step"] == 1
    statuses = pj.step_statuses(report, "denoiser")
    assert statuses[1] == {"failed"} and all(statuses[i] == {"passed"} for i in (0, 2, 3))


def _apg(negate):
    return lambda pipe: r3.guided_by(pipe, functools.partial(r3.apg_like, g=4.0, negate=negate))


def test_guidance_ikdata_cannot_rebuild_is_declared_not_judged(tmp_path):
    from ikdata.diffusion import table

    report, case = _run(tmp_path, "sd", _apg(False))
    m = case["trajectory"]
    assert m["level"] == "denoiser output" and m["guidance"]["image"]["judged"] is False
    assert case["status"] == "passed"  # every denoiser call is right; the guidance is declared, not passed silently
    assert case["reason"].startswith("passed what was judged; guidance not judged (stream 'image')")
    notes = table.notes(report)
    assert any("guidance not judged (stream 'image')" in line for line in notes), notes
    from ikdata.replay.summary import exit_code, not_judged

    # counted with what replay could not judge, so replay --strict exits 1 on it
    assert any("guidance not judged (stream 'image')" in why for why in not_judged(report))
    assert exit_code(report) == 0 and exit_code(report, strict=True) == 1


def test_every_call_is_judged_when_guidance_is_not(tmp_path):
    def engine(pipe):
        import contextlib

        stack = contextlib.ExitStack()
        stack.enter_context(r3.guided_by(pipe, functools.partial(r3.apg_like, g=4.0, negate=True)))
        stack.enter_context(r3.wrong_call(pipe, step=1, call=1, scale=1.1))
        return stack

    report, case = _run(tmp_path, "lumina2", engine)
    m = case["trajectory"]
    assert m["guidance"]["image"]["judged"] is False
    assert case["status"] == "failed" and m["first_failure"] == {"step": 1, "streams": ["image"], "check": "e"}
    assert "guidance not judged" in case["reason"]
    statuses = pj.step_statuses(report, "denoiser")
    assert statuses[1] == {"failed"} and all(statuses[i] == {"passed"} for i in (0, 2, 3))


def test_kandinsky3_guidance_is_rebuilt_and_a_drop_fails_its_step(tmp_path):
    pipes_tiny.BUILDERS.setdefault("kandinsky3", r3.kandinsky3)
    report, case = _run(tmp_path, "kandinsky3", lambda pipe: r3.guided_by(pipe, r3.conditional_alone, steps={2}))
    m = case["trajectory"]
    assert m["guidance"]["image"] == {"judged": True, "form": "cfg-kandinsky3", "steps_not_rebuilt": [2]}
    assert case["status"] == "failed" and m["first_failure"] == {"step": 2, "streams": ["image"], "check": "e"}
    statuses = pj.step_statuses(report, "denoiser")
    assert statuses[2] == {"failed"} and all(statuses[i] == {"passed"} for i in (0, 1, 3))
