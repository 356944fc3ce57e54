"""typical-p, epsilon and eta judged by the statistical tests, not only by the outside check (issue 36, finding 4).

HF generate on the tiny Llama, 2,048 positions (256 rows x 8 tokens), typical-p 0.8: an honest run is judged
(a verdict with power, not "not judged") and passes; typical-p computed on the logits instead of the
log-probabilities fails.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_runs import build_model, capture_run, patched, replay_dir, typical_on_logits  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return build_model()


@pytest.mark.parametrize("bug", [False, True])
def test_typical_p_is_judged_by_the_statistical_tests(model, tmp_path, bug):
    import contextlib

    from transformers.generation import logits_process as lp

    inject = patched(lp.TypicalLogitsWarper, "__call__", typical_on_logits) if bug else contextlib.nullcontext()
    with inject:
        capture_run(model, tmp_path / "ds", rows=256, typical_p=0.8, top_k=0, top_p=1.0, min_p=None)
    result = replay_dir(tmp_path / "ds")
    group = result.report["sampling"][0]
    assert "not_judged" not in group, group.get("not_judged")
    assert group["verdict"] == ("failed" if bug else "passed"), [t.get("p_value") for t in group["tests"]]
    assert result.exit_code == int(bug)


@pytest.mark.parametrize("setting", [{"epsilon_cutoff": 0.02}, {"eta_cutoff": 0.02}])
def test_honest_epsilon_and_eta_are_judged_and_pass(model, tmp_path, setting):
    capture_run(model, tmp_path / "ds", rows=64, top_k=0, top_p=1.0, min_p=None, **setting)
    result = replay_dir(tmp_path / "ds")
    group = result.report["sampling"][0]
    assert group["verdict"] == "passed" and "not_judged" not in group, group
