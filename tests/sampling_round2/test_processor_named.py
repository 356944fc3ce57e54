"""Every verdict names each undeclared processor and what it did; accepted ones say so (issue 36, finding 7)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_runs import build_model, capture_run, replay_dir  # noqa: E402

SUPPRESSED = list(range(3, 40))  # begin_suppress_tokens: a large share of the first position's mass


@pytest.fixture(scope="module")
def model():
    return build_model()


def _lines(result):
    from ikdata.sampling.judge import verdict_lines

    return verdict_lines(result.report["sampling"])


def test_an_undeclared_processor_is_named_with_the_mass_it_removed(model, tmp_path):
    capture_run(model, tmp_path / "ds", rows=64, new_tokens=2, begin_suppress_tokens=SUPPRESSED)
    result = replay_dir(tmp_path / "ds")
    group = result.report["sampling"][0]
    named = [line for line in group.get("processors") or () if "SuppressTokensAtBeginLogitsProcessor" in line]
    assert named and "removed" in named[0] and "not accepted" in named[0], group.get("processors")
    removed = float(named[0].split("removed ")[1].split("%")[0])
    assert 1.0 < removed < 100.0  # about the first position's mass of tokens 3..39, over both positions
    assert any("SuppressTokensAtBeginLogitsProcessor" in line for line in _lines(result))


def test_an_honest_run_names_no_processor(model, tmp_path):
    capture_run(model, tmp_path / "ds", rows=16, new_tokens=2)
    group = replay_dir(tmp_path / "ds").report["sampling"][0]
    assert "processors" not in group


def test_an_accepted_processor_is_named_as_accepted_not_as_too_few_draws(model, tmp_path):
    from ikdata.replay.summary import not_judged

    capture_run(model, tmp_path / "ds", rows=16, new_tokens=2, begin_suppress_tokens=SUPPRESSED)
    path = tmp_path / "ds" / "definitions" / "sampling" / "sampling_logits_f32_v128.json"
    definition = json.loads(path.read_text())
    definition["judge"]["accept_processors"] = ["SuppressTokensAtBeginLogitsProcessor"]
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "mine.json").write_text(json.dumps(definition))
    result = replay_dir(tmp_path / "ds", tmp_path / "defs")
    lines = _lines(result)
    assert any("SuppressTokensAtBeginLogitsProcessor" in line and "accepted by the definition" in line
               for line in lines), lines
    whys = not_judged(result.report)
    assert whys and all("accepted" in why and "too few draws" not in why for why in whys), whys
