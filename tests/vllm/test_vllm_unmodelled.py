"""Nothing judged that was not modelled: a user's logits processor (vLLM v1's ``LLM(logits_processors=[...])``)
and a logit bias change rows; those rows are left out at the sampler boundary and counted by name, the rest
are judged; and capture refuses vLLM's compiled mode loudly instead of recording it partly.

One engine run (tests/vllm/vllm_seeded_prog.py ``--mode processor``: 16 prompts x 9 tokens, every other request
boosted by tests/vllm/vllm_user_processors.py's ``BoostToken``, one in four with ``logit_bias``) and one engine
configuration that never starts (compiled).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ikdata.capture.spread import looks_at
from conftest import ENGINE_TIMEOUT, engine_env
from test_vllm_seeds import SAMPLER, SEEDED_PROGRAM, capture_seeded

PROMPTS, TOKENS = 16, 9


@pytest.fixture(scope="module")
def processor_run(vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    return capture_seeded(vllm_python, tmp_path_factory.mktemp("vllm-processor"), tiny_model, "processor",
                          prompts=PROMPTS, tokens=TOKENS)


def test_rows_a_users_logits_processor_or_a_logit_bias_changed_are_left_out_and_named(processor_run):
    run = processor_run
    requests = {r["request_id"]: r for r in run.outputs["requests"]}
    sampled = [r for r in run.receipts() if r["definition"] == SAMPLER]
    recorded = {r["request_id"] for r in sampled}
    # boosted (even ids) and biased (i % 4 == 1) requests are left out; the plain ones (i % 4 == 3) recorded
    # at the decode steps capture's default looks at (0-3, 4, 8)
    assert recorded == {i for i in requests if int(i) % 4 == 3}, sorted(recorded)
    assert len(sampled) == len(recorded) * len([i for i in range(TOKENS) if looks_at(i)])
    summary = run.capture.stdout + run.capture.stderr
    boosted = PROMPTS // 2 * TOKENS
    assert (f"sampler row changed by logits processor vllm_user_processors.BoostToken (not modelled by the sampling "
            f"judge): {boosted}") in summary, summary[-3000:]
    assert f"sampler row with logit_bias (not modelled by the sampling judge): {PROMPTS // 4 * TOKENS}" in summary
    assert run.replay.returncode == 0, run.replay.stdout[-3000:]
    assert not [c for c in run.report["cases"] if c["status"] == "failed"]


def test_capture_refuses_vllms_compiled_mode_with_a_clear_message(vllm_python: Path, tiny_model: Path,
                                                                  tmp_path: Path):
    out = tmp_path / "outputs.json"
    command = [str(vllm_python.parent / "ikdata"), "capture", "--into", str(tmp_path / "captured"), "--",
               str(vllm_python), str(SEEDED_PROGRAM), str(tiny_model), str(out), "--mode", "seed42",
               "--prompts", "2", "--tokens", "2", "--compiled"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=ENGINE_TIMEOUT,
                          env=engine_env(HOME=str(tmp_path)), cwd=tmp_path)
    assert done.returncode != 0 and not out.exists()
    assert "would run compiled" in done.stderr and "enforce_eager=True" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
