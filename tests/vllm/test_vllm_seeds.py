"""Requests sharing a seed, judged as vLLM means seeds: each seeded request has its own generator, so requests
with the same seed draw the same noise. An honest engine passes (every draw replayed from its seed); a sampler
that ignores the seeds fails.

Two engine runs (tests/vllm/vllm_seeded_prog.py ``--mode seed42``: 32 prompts x 12 tokens, every request
``SamplingParams(seed=42)``, the last four with one prompt): honest, and with ``seed_ignored`` planted
(tests/vllm/vllm_faults.py: vLLM's CPU sampler drops the requests' generators).
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from ikdata.capture.spread import looks_at
from conftest import ENGINE_TIMEOUT, ROOT, Run, engine_env

SEEDED_PROGRAM = Path(__file__).parent / "vllm_seeded_prog.py"
SAMPLER = "sampling_logits_f32_v320"
PROMPTS, TOKENS = 32, 12


def capture_seeded(vllm_python: Path, folder: Path, model: Path, mode: str, *, faults: str = "",
                   prompts: int = PROMPTS, tokens: int = TOKENS) -> Run:
    """``ikdata capture`` of tests/vllm/vllm_seeded_prog.py in ``mode`` (faults planted), then ``ikdata replay``."""
    dataset, out = folder / "captured", folder / "outputs.json"
    command = [str(vllm_python.parent / "ikdata"), "capture", "--into", str(dataset), "--adapter", "vllm_faults",
               "--", str(vllm_python), str(SEEDED_PROGRAM), str(model), str(out), "--mode", mode,
               "--prompts", str(prompts), "--tokens", str(tokens)]
    captured = subprocess.run(command, capture_output=True, text=True, timeout=ENGINE_TIMEOUT,
                              env=engine_env(VLLM_FAULTS=faults, HOME=str(folder)), cwd=folder)
    if captured.returncode != 0 or not out.exists():
        raise AssertionError(f"capture failed ({captured.returncode}):\n{captured.stdout[-3000:]}\n"
                             f"{captured.stderr[-3000:]}")
    replayed = subprocess.run([str(ROOT / ".venv" / "bin" / "ikdata"), "replay", str(dataset)], capture_output=True,
                              text=True, timeout=900, cwd=folder, env={**engine_env(), "HOME": str(folder)})
    return Run(dataset, captured, replayed, json.loads(out.read_text()), [])


@pytest.fixture(scope="module")
def seeded_honest(vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return capture_seeded(vllm_python, tmp_path_factory.mktemp("vllm-seed42"), tiny_model, "seed42")


@pytest.fixture(scope="module")
def seeded_ignored(vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return capture_seeded(vllm_python, tmp_path_factory.mktemp("vllm-seed-ignored"), tiny_model, "seed42",
                          faults="seed_ignored")


def _verdict(run: Run) -> dict:
    return next(v for v in run.report["sampling"] if v["definition"] == SAMPLER)


def test_requests_sharing_a_seed_pass_on_an_honest_engine_each_draw_replayed_from_its_seed(seeded_honest):
    run = seeded_honest
    assert run.replay.returncode == 0, run.replay.stdout[-3000:]
    sampled = [r for r in run.receipts() if r["definition"] == SAMPLER]
    looked_at = [i for i in range(TOKENS) if looks_at(i)]  # capture's default: a spread of decode steps
    assert len(sampled) == PROMPTS * len(looked_at)
    # what the seed fixes, per row: the seed, its position (the decode step), the generator's state
    states: dict[int, set[str]] = defaultdict(set)
    for receipt in sampled:
        generator = receipt["sampler"]["generator"]
        assert generator["seed"] == 42 and generator["position"] == receipt["step"]
        assert generator["noise"] == "gumbel_splitmix64" and isinstance(generator["noise_seed"], int)
        states[receipt["step"]].add(generator["state"])
    # one seed, one generator per request: every request is at the same state at the same step
    assert sorted(states) == looked_at
    assert all(len(found) == 1 for found in states.values()) and len(set().union(*states.values())) == len(looked_at)
    # the four requests with one prompt and one seed got the same tokens, as vLLM promises
    same = [r["tokens"] for r in run.outputs["requests"][-4:]]
    assert all(tokens == same[0] for tokens in same)
    statuses = [c["status"] for c in run.report["cases"] if c["definition"] == SAMPLER]
    assert "failed" not in statuses and statuses.count("passed") >= len(sampled) - 8, statuses
    verdict = _verdict(run)
    assert verdict["verdict"] == "passed", verdict
    assert " 0 differ" in verdict["seeded"] and "replayed from their seed and matched" in verdict["seeded"]
    assert not any(t["test"] == "independence" for t in verdict["tests"])  # equal by design, never paired


def test_a_sampler_that_ignores_the_requests_seeds_fails_naming_the_replay(seeded_ignored):
    run = seeded_ignored
    assert run.replay.returncode == 1, run.replay.stdout[-3000:]
    verdict = _verdict(run)
    assert verdict["verdict"] == "failed", verdict
    failed = [c for c in run.report["cases"] if c["definition"] == SAMPLER and c["status"] == "failed"]
    assert len(failed) > PROMPTS * 3
    assert all("seed" in c["reason"] for c in failed), failed[0]["reason"]
    assert any("differs from its replay from the seed" in c["reason"] for c in failed)
