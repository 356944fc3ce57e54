"""A mixed-precision stepper judged in the precision it runs (issue 47 item 4): Mochi in bfloat16 draws its noise in
float32 and casts it to bf16, steps its scheduler in float32 on the latents cast up and casts the result back. The
honest run passes validate and replay (the cast recorded between steps and checked value by value, the noise as
cast); latents changed between steps beyond that rounding still break continuity at that step."""

from __future__ import annotations

import contextlib
import json

import pipeline_judging as pj
import pipes_tiny
import round3_pipes as r3

pipes_tiny.BUILDERS.setdefault("mochi-bf16", r3.mochi)


@contextlib.contextmanager
def _latents_scaled_after(pipe, step, factor=1.01):
    cls = type(pipe.scheduler)
    patched = cls.__dict__["step"]
    index = [0]

    def step_(self, *args, **kwargs):
        result = patched(self, *args, **kwargs)
        index[0] += 1
        if index[0] - 1 == step and self is pipe.scheduler:
            return (result[0] * factor,) + tuple(result[1:])
        return result

    cls.step = step_
    try:
        yield
    finally:
        cls.step = patched


def test_mochi_in_bf16_passes_honestly(tmp_path):
    import ikdata

    root = pj.capture(tmp_path / "ds", "mochi-bf16")
    checked = ikdata.validate(root, deep=True)
    assert checked.ok, [str(p) for p in checked.problems]
    record = json.loads(next((root / "trajectories").glob("*.jsonl")).read_text())
    assert record["noise"]["check"] == {"video": True}
    assert {e["by"] for e in record["edits"]} == {"cast"} and {e["dtype"] for e in record["edits"]} == {"torch.bfloat16"}
    case = pj.trajectory_case(pj.replay(root, tmp_path / "report.json"))
    assert case["status"] == "passed", case.get("reason")
    m = case["trajectory"]
    assert m["noise"]["video"]["equal"] is True and "cast to torch.bfloat16" in m["noise"]["video"]["method"]
    assert [c.get("cast") for c in m["continuity"][:2]] == ["torch.bfloat16", "torch.bfloat16"]


def test_latents_changed_between_steps_beyond_the_cast_break_continuity(tmp_path):
    root = pj.capture(tmp_path / "ds", "mochi-bf16", perturb=lambda pipe: _latents_scaled_after(pipe, 1))
    case = pj.trajectory_case(pj.replay(root, tmp_path / "report.json"))
    assert case["status"] == "failed"
    assert "continuity broken at step 1 of stream 'video'" in case["reason"]
    assert "continuity broken at step 0" not in case["reason"]
