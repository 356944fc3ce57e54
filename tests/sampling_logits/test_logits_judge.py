"""Sampling judged from the model's raw logits and the declared settings (issue 24).

HF generate on the tiny Llama (128 rows x 8 tokens = 1,024 positions per run, T 0.7, top-k 20,
top-p 0.9, min-p 0.05, repetition penalty 1.3) with each bug injected inside HF's own warpers
or as an extra processor; a hand-written loop recording through the adapter API (vLLM order,
presence penalty); seed ignored; not-judged verdicts under --strict; false alarms over 200 seeds
at the statistics level.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from bugs import HF_BUGS, injected  # noqa: E402
from hf_runs import build_model, capture_run, patched, replay_dir  # noqa: E402

EFFECT = {"temperature twice": "pooled PIT test", "repetition penalty twice": "outside the kept set",
          "top-k off by one": "outside the kept set", "min-p ignored": "outside the kept set",
          "temperature on probabilities": "outside the kept set", "top-p before top-k": "outside the kept set"}


@pytest.fixture(scope="module")
def model():
    return build_model()


def _failed(result):
    return [c for c in result.report["cases"] if c["status"] == "failed"]


def test_honest_hf_generate_passes_with_every_setting_modelled(model, tmp_path):
    capture_run(model, tmp_path / "ds")
    result = replay_dir(tmp_path / "ds")
    assert result.exit_code == 0 and not _failed(result)
    group = result.report["sampling"][0]
    assert group["verdict"] == "passed" and group["tests"][0]["n"] > 900  # ~1,000 judged positions, hf order


@pytest.mark.parametrize("bug", HF_BUGS)
def test_each_hf_bug_is_caught_at_1024_positions(model, tmp_path, bug):
    with injected(bug) as extra:
        capture_run(model, tmp_path / "ds", processors=extra)
    result = replay_dir(tmp_path / "ds")
    failed = _failed(result)
    assert result.exit_code == 1 and failed, bug
    assert any(EFFECT[bug] in c["reason"] for c in failed), failed[0]["reason"]
    if bug == "temperature twice":  # an extra processor: named with its source digest in the reason
        assert all("Twice (source" in c["reason"] for c in failed)


@pytest.mark.parametrize("ignored", [False, True])
def test_typical_sampling_is_modelled(model, tmp_path, ignored):
    """typical_p keeps a set that is not a prefix by probability: judged by the PIT test and the outside check."""
    from transformers.generation import logits_process as lp

    import contextlib

    bug = patched(lp.TypicalLogitsWarper, "__call__", lambda self, ids, s: s) if ignored else contextlib.nullcontext()
    with bug:
        capture_run(model, tmp_path / "ds", rows=32, typical_p=0.8, top_k=0, top_p=1.0, min_p=None)
    result = replay_dir(tmp_path / "ds")
    assert result.exit_code == int(ignored)
    if ignored:
        assert any("outside the kept set" in c["reason"] for c in _failed(result))


def test_an_accepted_processor_is_not_checked_and_the_verdict_says_so(model, tmp_path):
    import json

    from ikdata.sampling.judge import verdict_lines

    with injected("temperature twice") as extra:
        capture_run(model, tmp_path / "ds", processors=extra, rows=16, new_tokens=2)
    definition = json.loads((tmp_path / "ds" / "definitions" / "sampling" / "sampling_logits_f32_v128.json").read_text())
    definition["judge"]["accept_processors"] = ["Twice"]
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "mine.json").write_text(json.dumps(definition))
    result = replay_dir(tmp_path / "ds", tmp_path / "defs")
    assert not _failed(result)
    assert all("not checked" in c["reason"] for c in result.report["cases"])
    assert any("not checked for that part" in line for line in verdict_lines(result.report["sampling"]))


def test_seed_ignored_fails(model, tmp_path):
    capture_run(model, tmp_path / "ds", rows=16, new_tokens=2, seed=5)
    original = torch.multinomial

    def unseeded(probs, num_samples, **kwargs):  # draws from a generator the seed never reaches
        return original(probs, num_samples, generator=torch.Generator().manual_seed(12345))

    with patched(torch, "multinomial", unseeded):
        capture_run(model, tmp_path / "ds", rows=16, new_tokens=2, seed=5)
    result = replay_dir(tmp_path / "ds")
    assert result.exit_code == 1 and any("seed ignored" in c["reason"] for c in _failed(result))


# -- a hand-written loop through the adapter API: vLLM order, presence penalty --------------------

V = 64


def _loop(cap, rng, positions: int, *, ignore_presence: bool, presence: float = 1.0) -> None:
    from ikdata.sampling.distribution import Settings, kept_distribution
    from ikdata.sampling.pipeline import Extras, process

    context = rng.integers(0, V, (positions, 6))
    logits = (rng.standard_normal((positions, V)) * 2).astype(np.float32)
    extras = Extras.of(positions, context=context, generated=3, presence_penalty=0.0 if ignore_presence else presence)
    probs = kept_distribution(process(logits, extras, "vllm"), Settings.of(positions, temperature=0.8, top_k=20),
                              order="vllm")
    drawn = (rng.random(positions)[:, None] > probs.cumsum(axis=1)).sum(axis=1).clip(0, V - 1)
    b = positions
    inputs = {"logits": torch.tensor(logits), "context": torch.tensor(context), "pad": torch.zeros(b, dtype=torch.int64),
              "generated": torch.full((b,), 3), "temperature": torch.full((b,), 0.8), "top_k": torch.full((b,), 20),
              "top_p": torch.ones(b), "min_p": torch.zeros(b), "typical_p": torch.ones(b), "epsilon": torch.zeros(b),
              "eta": torch.zeros(b), "repetition_penalty": torch.ones(b), "presence_penalty": torch.full((b,), presence),
              "frequency_penalty": torch.zeros(b), "no_repeat_ngram": torch.zeros(b, dtype=torch.int64),
              "min_new_tokens": torch.zeros(b, dtype=torch.int64), "min_length": torch.zeros(b, dtype=torch.int64),
              "eos": torch.tensor([-1]), "bad_words": torch.tensor([-1]), "seed": torch.arange(b)}
    cap.record("sampling_logits_f32", inputs, {"samples": torch.tensor(drawn, dtype=torch.int64)},
               operation="my_loop.sample", fills={"V": V}, provenance={"sampler": {"order": "vllm", "processors": []}})


def _loop_dataset(tmp_path, positions, *, ignore_presence, seed=4):
    import ikdata.capture
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    cap = boot.install(CaptureConfig(into=str(tmp_path / "ds"), only=("sampling",), strict=True))
    try:
        rng = np.random.default_rng(seed)
        for step in range(4):
            with ikdata.capture.request("loop"), ikdata.capture.step(step):
                _loop(cap, rng, positions // 4, ignore_presence=ignore_presence)
        boot.flush()
    finally:
        boot.uninstall()
    return tmp_path / "ds"


@pytest.mark.parametrize("ignore_presence", [False, True])
def test_presence_penalty_ignored_is_caught_in_a_hand_written_loop(tmp_path, ignore_presence):
    result = replay_dir(_loop_dataset(tmp_path, 1024, ignore_presence=ignore_presence))
    assert result.exit_code == int(ignore_presence)
    if ignore_presence:
        assert any("pooled PIT test" in c["reason"] or "outside" in c["reason"] for c in _failed(result))


def test_too_few_draws_are_not_judged_and_strict_replay_exits_1(tmp_path):
    from typer.testing import CliRunner

    from ikdata.cli import app

    root = _loop_dataset(tmp_path, 8, ignore_presence=False)
    plain = CliRunner().invoke(app, ["replay", str(root)])
    assert plain.exit_code == 0 and "not judged" in plain.output
    strict = CliRunner().invoke(app, ["replay", str(root), "--strict"])
    assert strict.exit_code == 1 and "not judged" in strict.output and "draws would" in strict.output


def test_honest_samplers_false_alarms_over_200_seeds_at_the_statistics_level():
    """200 honest runs (vLLM order: presence and repetition penalties, top-k, min-p; 128 positions each) at
    alpha 1e-3: the false-alarm count is Binomial(200, <= 1e-3), so more than 2 has probability <= 0.0012."""
    from ikdata.sampling.distribution import Settings, kept_distribution
    from ikdata.sampling.groups import decide
    from ikdata.sampling.pipeline import Extras, process
    from ikdata.sampling.records import record_logits

    rng = np.random.default_rng(24)
    failed = 0
    for run in range(200):
        n = 128
        context = rng.integers(0, 32, (n, 6))
        logits = (rng.standard_normal((n, 32)) * 2).astype(np.float32)
        extras = Extras.of(n, context=context, generated=3, presence_penalty=0.5, repetition_penalty=1.2)
        settings = Settings.of(n, temperature=0.8, top_k=12, min_p=0.02)
        probs = kept_distribution(process(logits, extras, "vllm"), settings, order="vllm")
        drawn = (rng.random(n)[:, None] > probs.cumsum(axis=1)).sum(axis=1).clip(0, 31)
        record = record_logits(logits, settings, drawn, np.arange(n) + 1000 * run, order="vllm", extras=extras,
                               seed=run)
        verdict = decide("d", [{"uuid": f"run-{run}", "definition": "d", "sampling": record}], alpha=1e-3)
        failed += verdict.statuses[f"run-{run}"][0] == "failed"
    assert failed <= 2, f"{failed} of 200 honest runs failed"


def _records_verdict(logits, settings, extras, drawn, order="hf"):
    from ikdata.sampling.groups import decide
    from ikdata.sampling.records import record_logits

    record = record_logits(logits, settings, drawn, np.arange(len(drawn)), order=order, extras=extras, seed=1)
    return decide("d", [{"uuid": "a", "definition": "d", "sampling": record}]).statuses["a"]


@pytest.mark.parametrize("honest", [True, False])
def test_bans_and_epsilon_are_modelled(honest):
    """No-repeat-ngram, bad words, min new tokens (EOS) and epsilon: an honest sampler passes, one that
    skips them draws banned tokens (outside) or a too-wide distribution (PIT)."""
    from ikdata.sampling.distribution import Settings, kept_distribution
    from ikdata.sampling.pipeline import Extras, process

    rng = np.random.default_rng(11 + honest)
    n, vocab = 1024, 32
    context = np.tile([5, 6, 7, 5, 6], (n, 1))  # ngram 3: (5, 6) -> 7 is banned; bad word (6, 9): 9 banned
    logits = (rng.standard_normal((n, vocab)) * 1.5).astype(np.float32)
    logits[:, [2, 7, 9]] += 3.0  # EOS (2) and the banned tokens are likely
    extras = Extras.of(n, context=context, generated=2, no_repeat_ngram=3, min_new_tokens=4, eos=[2],
                       bad_words=[[6, 9]], epsilon=0.02)
    settings = Settings.of(n, temperature=0.9)
    if honest:
        x = process(logits, extras, "hf")
        probs = kept_distribution(x, settings)
        probs = np.where(probs >= 0.02, probs, 0.0)
        probs /= probs.sum(axis=1, keepdims=True)
    else:
        probs = kept_distribution(logits, settings)
    drawn = (rng.random(n)[:, None] > probs.cumsum(axis=1)).sum(axis=1).clip(0, vocab - 1)
    status, reason, _ = _records_verdict(logits, settings, extras, drawn)
    assert (status == "passed") == honest, reason
    if not honest:
        assert "outside the kept set" in reason


def test_sampling_capture_could_not_record_is_named_as_lost(model, tmp_path):
    """A sampled beam search draws outside _sample: the failure is marked lost, so ikdata capture exits 1."""
    import ikdata.capture
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.capture.runner import CaptureResult

    cap = boot.install(CaptureConfig(into=str(tmp_path / "ds"), only=("sampling",)))
    try:
        prompt = torch.tensor([[1, 5, 7, 9, 3]])
        with torch.inference_mode(), ikdata.capture.request("beams"):
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=2, do_sample=True,
                           num_beams=2, pad_token_id=0)
        failures = list(cap.failures)
    finally:
        boot.uninstall()
    assert failures and all(f.get("lost") for f in failures)
    lost = CaptureResult(0, {}, failures=failures).lost_calls()
    assert lost and "beam search" in lost[0] and lost[0].startswith("sampling_logits_f32")
