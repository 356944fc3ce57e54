"""A trajectory verdict is reused only under the same judging code (issue 50): its reuse key covers the code of the
family that judges it (``ikdata.replay.reuse.judging_code_digest``, as an operator case's key does), not only
ikdata's version, so a diffusion family whose hooks point into other code judges the trajectory again."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "diffusion"))  # tiny.py: the tiny LTX-2 pipeline
sys.path.insert(0, str(HERE.parent / "diffusion_judge"))  # judge_helpers.py: its capture

pytest.importorskip("diffusers")
pytest.importorskip("av")


def _trajectory(report) -> dict:
    [case] = [c for c in report["cases"] if c["definition"].startswith("trajectory:")]
    return case


@pytest.mark.slow  # a tiny LTX-2 capture and three replays of it
def test_a_trajectory_judged_by_other_family_code_is_not_answered_by_the_old_verdict(monkeypatch, tmp_path):
    import ikdata
    from ikdata.core import features
    from ikdata.replay.runner import replay
    from judge_helpers import capture

    root = capture(tmp_path / "ds")
    cache = tmp_path / "cache.jsonl"

    def run(name: str) -> dict:
        return _trajectory(replay(ikdata.open(root), report_path=tmp_path / name, cache_path=cache).report)

    assert not run("a.json").get("reused") and run("b.json")["reused"] is True  # same code: reused
    with features.unregistered("diffusion") as diffusion:
        module = types.ModuleType("ikdata_test_other_regroup")  # the same function, reached through other code
        module.regroup = diffusion.family.hook("regroup")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        other = dataclasses.replace(diffusion, family=dataclasses.replace(
            diffusion.family, regroup="ikdata_test_other_regroup:regroup"))
        with features.registered(other):
            again = run("c.json")
    assert not again.get("reused") and again["status"] == "passed"  # judged again, by the code now declared
