"""The default selection (issue 44): each distinct call once per run, a sampled generate() after a greedy one kept
and judged, a forward loop bounded unless more is asked for; real programs under ``ikdata capture``."""

from __future__ import annotations

import json
from collections import Counter

from capture_helpers import read_jsonl
from selection_programs import FORWARD_LOOP, TWO_GENERATES, ikdata, ikdata_capture


def _sampler_receipts(dataset):
    return [r for r in read_jsonl(dataset / "receipts.jsonl") if r["definition"].startswith("sampling_logits")]


def test_a_sampled_generate_after_a_greedy_one_is_kept(tmp_path):
    done, dataset = ikdata_capture(tmp_path, "two_generates.py", TWO_GENERATES, "--only", "sampling")
    assert done.returncode == 0, done.stderr
    receipts = _sampler_receipts(dataset)
    settings = Counter(r["variant"].split(".")[0] for r in receipts)
    assert len(settings) == 2, f"expected the greedy and the sampled call, got {settings}"
    assert sorted(settings.values()) == [8, 8]  # each call's 8 steps
    assert "selection (default), sampler" in done.stderr + done.stdout


def test_replay_judges_the_sampled_call_too(tmp_path):
    """A top-k bug only sampling shows: kept, replay fails it (it used to be dropped as a repeat and pass)."""
    done, dataset = ikdata_capture(tmp_path, "two_generates.py", TWO_GENERATES, "--only", "sampling",
                                   args=("--bug",))
    assert done.returncode == 0, done.stderr
    replayed = ikdata(tmp_path, "replay", str(dataset), "--no-reuse", "--json")
    assert replayed.returncode == 1, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    report = json.loads((dataset / "reports" / "replay.json").read_text())
    by_uuid = {c["uuid"]: c["status"] for c in report["cases"]}
    variants = {r["uuid"]: r["variant"].split(".")[0] for r in _sampler_receipts(dataset)}
    failed = {variants[u] for u, status in by_uuid.items() if status == "failed"}
    passed = {variants[u] for u, status in by_uuid.items() if status == "passed"}
    assert len(failed) == 1 and len(passed) == 1 and failed != passed, (failed, passed)


def test_a_forward_loop_keeps_one_workload_per_key_and_every_step_when_asked(tmp_path):
    done, dataset = ikdata_capture(tmp_path, "loop.py", FORWARD_LOOP, args=("40",))
    assert done.returncode == 0, done.stderr
    counts = Counter(r["definition"] for r in read_jsonl(dataset / "receipts.jsonl"))
    assert counts and set(counts.values()) == {1}, counts
    text = done.stdout + done.stderr
    assert "looked at 8 of the 40 steps" in text and "--per-step" in text

    done, per_step = ikdata_capture(tmp_path, "loop.py", FORWARD_LOOP, "--per-step", args=("40",), into="per-step")
    assert done.returncode == 0, done.stderr
    counts = Counter(r["definition"] for r in read_jsonl(per_step / "receipts.jsonl"))
    assert set(counts.values()) == {40}, counts
    assert sorted({r["step"] for r in read_jsonl(per_step / "receipts.jsonl")}) == list(range(40))


def test_steps_zero_records_only_the_first_step_of_the_sampler(tmp_path):
    done, dataset = ikdata_capture(tmp_path, "two_generates.py", TWO_GENERATES, "--only", "sampling",
                                   "--steps", "0")
    assert done.returncode == 0, done.stderr
    receipts = _sampler_receipts(dataset)
    assert {r["step"] for r in receipts} == {0} and len(receipts) == 2
