"""Helpers of the capture tests: running scripts with capture on, reading what they wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: scripts run from this folder need it
from foundation_helpers import gemm_definition_record  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

GEMM_REFERENCE = """import torch


def run(A, W):
    return A @ W.T
"""


def gemm_record(name: str = "gemm_test_n4_k8", *, dtype: str = "float32", n: int = 4, k: int = 8) -> dict:
    """An exact (non-template) definition: C[M, N] = A[M, K] @ W[N, K].T."""
    return gemm_definition_record(name, dtype=dtype, n=n, k=k, reference=GEMM_REFERENCE, description=None)


def write_definitions(folder: Path, *records: dict) -> Path:
    for record in records:
        path = folder / record["op_type"] / f"{record['name']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    return folder


def capture_env(config: dict | None = None, **extra: str) -> dict[str, str]:
    """The environment of a process started with capture on (as ``ikdata capture`` sets it)."""
    from ikdata.capture.config import CaptureConfig

    env = dict(os.environ, **extra)
    env.pop("IKDATA_CAPTURE", None)
    if config is not None:
        env["IKDATA_CAPTURE"] = CaptureConfig(**config).to_env()
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def write_script(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def run_python(script: Path, env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=script.parent)


def read_jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
