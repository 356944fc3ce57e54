"""FlashInfer's sampling APIs judged by the sampling family (issue 37 items 2 and 3): an honest top-k sampler's
recorded calls import with no --only-passed (their draws tested against the distribution, not compared with
the reference's draws), a sampler ignoring top_k fails, and min_p sampling with indices=None imports."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:
    pytest.skip("flashinfer-python is not installed (make setup installs it)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import sys, torch
sys.path.insert(0, {root!r})
from ikdata.flashinfer import loader

api = loader.submodule("api_logging")
templates = loader.submodule("trace.templates.sampling")
wrong = sys.argv[1] == "wrong"


def top_k_sampling_from_probs(probs, top_k):
    kept = probs.clone()
    if not wrong:  # the wrong engine ignores top_k
        cut = torch.topk(probs, int(top_k[0]), dim=-1).values[:, -1:]
        kept = torch.where(probs >= cut, probs, torch.zeros_like(probs))
    return torch.multinomial(kept / kept.sum(-1, keepdim=True), 1).squeeze(-1)  # int64, as its template declares


def min_p_sampling_from_probs(probs, min_p, indices=None):
    keep = probs >= probs.max(-1, keepdim=True).values * min_p
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return torch.multinomial(kept / kept.sum(-1, keepdim=True), 1).squeeze(-1).to(torch.int32)


# named as FlashInfer's own APIs, so each call's template is the one its decorator names
for f, trace in ((top_k_sampling_from_probs, templates.top_k_sampling_trace),
                 (min_p_sampling_from_probs, templates.min_p_sampling_trace)):
    f.__module__ = "flashinfer.sampling"
    globals()[f.__name__] = api.flashinfer_api(trace=trace)(f)


gen = torch.Generator().manual_seed(7)
for call in range(6):
    logits = torch.randn(256, 48, generator=gen) * 2
    probs = torch.softmax(logits, -1)
    top_k_sampling_from_probs(probs, torch.full((256,), 8, dtype=torch.int32))
    if call < 2:
        min_p_sampling_from_probs(probs, 0.05)
"""


def _record(tmp_path: Path, kind: str) -> Path:
    program = tmp_path / f"sampler_{kind}.py"
    program.write_text(PROGRAM.format(root=str(ROOT)))
    dumps = tmp_path / f"{kind}-dumps"
    env = {**os.environ, "FLASHINFER_LOGLEVEL": "10", "FLASHINFER_DUMP_DIR": str(dumps),
           "FLASHINFER_LOGDEST": str(tmp_path / "log.txt"), "FLASHINFER_DUMP_SAFETENSORS": "1",
           "PYTHONWARNINGS": "ignore"}
    subprocess.run([sys.executable, str(program), kind], env=env, check=True, capture_output=True, timeout=600)
    return dumps


def _import(src: Path, dst: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-m", "ikdata", "import", str(src), str(dst)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_an_honest_sampler_imports_whole_and_is_judged_as_sampling(tmp_path):
    import json

    dst = tmp_path / "ds"
    out = _import(_record(tmp_path, "honest"), dst)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "added 8 workload(s)" in out.stdout, out.stdout
    names = sorted(p.stem for p in (dst / "definitions").rglob("*.json"))
    assert names == ["min_p_sampling_v48__without_indices", "top_k_sampling_v48"]  # indices=None: no block
    for name in names:
        record = json.loads(next((dst / "definitions").rglob(f"{name}.json")).read_text())
        assert record["judge"]["name"] == "sampling"


def test_a_sampler_ignoring_top_k_fails(tmp_path):
    out = _import(_record(tmp_path, "wrong"), tmp_path / "ds")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "top_k_sampling_v48" in out.stderr and "not validated" in out.stderr, out.stderr
    assert not (tmp_path / "ds").exists()
