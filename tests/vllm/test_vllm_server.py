"""vLLM's OpenAI server under ``ikdata capture`` on loopback: requests recorded under their ids, replay clean,
and a completions log collected from it judged in vLLM's order. One server start for the module."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, engine_env

SAMPLER = "sampling_logits_f32_v320"
NAMED = 6  # requests sent with a request id of their own
DRAWS = 160  # seeded one-token requests of one prompt, for the completions log
LOG_SETTINGS = {"temperature": 0.8, "top_k": 10, "top_p": 0.9}


@dataclass(frozen=True)
class Served:
    dataset: Path
    capture: subprocess.CompletedProcess
    replay: subprocess.CompletedProcess
    responses: list[dict]
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port: int, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                      headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


def _wait_ready(port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited ({process.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(2)
    raise AssertionError(f"the server was not ready after {timeout:.0f} s")


def _wait_recorded(dataset: Path, rows: int, timeout: float) -> None:
    """Wait until the worker's background writer has written the receipts of ``rows`` sampler rows (it runs
    behind the engine; vLLM kills its worker a few seconds into shutdown, so what is still queued then is
    lost: docs/vllm.md). Returns at the timeout either way; the test then counts what is there."""
    receipts = dataset / "receipts.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if receipts.exists() and receipts.read_text().count(f'"definition":"{SAMPLER}"') >= rows:
            return
        time.sleep(2)


def _log_line(model: Path, answers: list[tuple[int, dict]]) -> dict:
    """One completions-log line (docs/sampling.md) from seeded answers: the first token's raw top-20 and each draw."""
    first = answers[0][1]["choices"][0]["logprobs"]["top_logprobs"][0]
    draws = [{"seed": seed, "token": a["choices"][0]["logprobs"]["tokens"][0]} for seed, a in answers]
    return {"prompt": "the log prompt", "model": str(model), "position": 0, "vocab_size": 320, "engine": "vllm",
            "settings": dict(LOG_SETTINGS), "top_logprobs": first, "draws": draws}


@pytest.fixture(scope="session")
def served(vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Served:
    folder = tmp_path_factory.mktemp("vllm-server")
    dataset, port = folder / "captured", _free_port()
    # --steps 0-4: every sampler row of decode steps 0-4 (the default keeps a bounded spread of rows)
    command = [str(vllm_python.parent / "ikdata"), "capture", "--into", str(dataset), "--steps", "0-4", "--",
               str(vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model),
               "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--dtype", "float32",
               "--max-model-len", "256", "--max-logprobs", "20"]
    with open(folder / "server.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=engine_env(), cwd=folder)
        try:
            _wait_ready(port, process, 900)
            responses = [_post(port, {"model": str(tiny_model), "prompt": f"request {i} says", "max_tokens": 5,
                                      "ignore_eos": True, "temperature": 0.7, "seed": i,
                                      "request_id": f"ikdata-test-{i}"})
                         for i in range(NAMED)]
            answers = [(seed, _post(port, {"model": str(tiny_model), "prompt": "the log prompt", "max_tokens": 1,
                                           "seed": seed, "logprobs": 20, "return_tokens_as_token_ids": True,
                                           **LOG_SETTINGS}))
                       for seed in range(DRAWS)]
            _wait_recorded(dataset, NAMED * 5 + DRAWS, 300)
        finally:
            process.send_signal(signal.SIGTERM)  # ikdata capture passes it on; vLLM shuts down, capture commits
            try:
                process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    output = (folder / "server.log").read_text()
    captured = subprocess.CompletedProcess(command, process.returncode, output, "")
    replayed = subprocess.run([str(ROOT / ".venv" / "bin" / "ikdata"), "replay", str(dataset)], capture_output=True,
                              text=True, timeout=900)
    log_path = folder / "completions.jsonl"
    log_path.write_text(json.dumps(_log_line(tiny_model, answers)) + "\n")
    return Served(dataset, captured, replayed, responses, log_path)


def _receipts(dataset: Path) -> list[dict]:
    return [json.loads(line) for line in (dataset / "receipts.jsonl").read_text().splitlines() if line]


def test_server_requests_are_recorded_under_their_ids_and_replay_clean(served):
    assert (served.dataset / "ikdata.json").exists(), served.capture.stdout[-3000:]
    assert served.replay.returncode == 0, served.replay.stdout[-3000:]
    steps: dict[str, set[int]] = {}
    for receipt in _receipts(served.dataset):
        if receipt["definition"] == SAMPLER:
            steps.setdefault(receipt["request_id"], set()).add(receipt["step"])
    for i, response in enumerate(served.responses):
        # vLLM's id of prompt 0 of a completion is the response's id followed by -0
        assert response["id"] == f"cmpl-ikdata-test-{i}"
        assert steps[f"{response['id']}-0"] == set(range(5)), steps.get(f"{response['id']}-0")
    assert len(steps) == NAMED + DRAWS


def test_a_completions_log_from_the_server_is_judged_in_vllms_order(served, tmp_path):
    ikdata = str(ROOT / ".venv" / "bin" / "ikdata")
    into = tmp_path / "from-log"
    imported = subprocess.run([ikdata, "import", str(served.log), str(into)], capture_output=True, text=True,
                              timeout=300)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    replayed = subprocess.run([ikdata, "replay", str(into)], capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 0, replayed.stdout[-3000:]
    report = json.loads((into / "reports" / "replay.json").read_text())
    (case,) = report["cases"]
    assert case["definition"] == "sampling_top_logprobs_vllm"
    assert case["tolerance"]["samples"]["order"] == "vllm"
    assert case["sampling"]["judged"] == DRAWS and case["sampling"]["excluded"] == {}, case["sampling"]
    (verdict,) = report["sampling"]
    assert verdict["verdict"] == "passed", verdict
