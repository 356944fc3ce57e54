"""FlashInfer's own sampling APIs, run on CPU under its own recorder, import as sampling (issue 48 items 1 and 2).

The calls are FlashInfer's: ``flashinfer.sampling.<api>`` itself (its argument handling, nested API
calls and recorder), with a CPU twin of its kernel module (tools/flashinfer_samplers.py). Honest
calls of every sampling API (min-p, top-k, top-p, top-k-top-p from probs and logits, renorm and mask,
with and without indices, with and without a generator) import and replay passing; wrong kernels
fail; calls too few to judge even pooled are left out, named, and the rest import.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:
    pytest.skip("flashinfer-python is not installed (make setup installs it)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import flashinfer_samplers  # noqa: E402


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "HOME": str(tmp_path / "home"),
            "XDG_CACHE_HOME": str(tmp_path / "cache")}


def _ikdata(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-m", "ikdata", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=1200, env=_env(tmp_path))


def _definitions(dst: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (dst / "definitions").rglob("*.json")}


def test_every_sampling_api_s_honest_calls_import_as_sampling_and_replay_passing(tmp_path):
    dumps = flashinfer_samplers.record(tmp_path / "rec", "every", seed=0)
    dst = tmp_path / "ds"
    out = _ikdata(tmp_path, "import", str(dumps), str(dst))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "left out 0" in out.stdout, out.stdout
    found = _definitions(dst)
    samplers = {"sampling_from_probs_v32", "sampling_from_probs_v32__without_indices",
                "sampling_from_logits_v32", "sampling_from_logits_v32__without_indices",
                "top_k_sampling_v32", "top_p_sampling_v32", "min_p_sampling_v32",
                "min_p_sampling_v32__without_indices", "top_k_top_p_sampling_v32",
                "top_k_top_p_sampling_from_logits_v32", "top_k_top_p_sampling_from_logits_v32__without_indices"}
    operators = {"top_k_renorm_probs_v32", "top_p_renorm_probs_v32", "top_k_mask_logits_v32"}
    assert samplers | operators <= set(found), sorted(found)
    for name in samplers:
        assert found[name]["judge"]["name"] == "sampling", name
        for setting in ("top_k", "top_p", "min_p"):  # a scalar or a per-row tensor: one definition
            if setting in found[name]["inputs"]:
                assert found[name]["inputs"][setting]["shape"] == ["batch_size"], (name, setting)
    for name in operators:
        assert "judge" not in found[name], name
    replay = _ikdata(tmp_path, "replay", "--no-reuse", "--json", str(dst))
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]
    cases = json.loads((dst / "reports" / "replay.json").read_text())["cases"]
    assert cases and {c["status"] for c in cases} == {"passed"}
    assert {c["definition"] for c in cases} >= samplers | operators


def test_min_p_without_indices_imports_given_a_scalar_or_a_per_row_tensor_and_a_generator(tmp_path):
    dumps = flashinfer_samplers.record(tmp_path / "rec", "min_p", seed=1)
    dst = tmp_path / "ds"
    out = _ikdata(tmp_path, "import", str(dumps), str(dst))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "added 6 workload(s)" in out.stdout and "left out 0" in out.stdout, out.stdout
    assert sorted(_definitions(dst)) == ["min_p_sampling_v32__without_indices"]


@pytest.mark.parametrize("wrong, failing", [
    ("greedy", {"sampling_from_probs_v32__without_indices", "top_k_sampling_v32",
                "min_p_sampling_v32__without_indices", "top_k_top_p_sampling_v32"}),
    ("ignore-top-k", {"top_k_sampling_v32", "top_k_top_p_sampling_v32"}),
])
def test_a_wrong_sampling_kernel_fails(tmp_path, wrong, failing):
    dumps = flashinfer_samplers.record(tmp_path / "rec", "wrong", wrong=wrong, seed=2)
    out = _ikdata(tmp_path, "import", "--only-passed", "--json", str(dumps), str(tmp_path / "ds"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    left_out = {item["definition"] for item in json.loads(out.stdout)["left_out"]}
    assert left_out >= failing, left_out
    receipts = tmp_path / "ds" / "receipts.jsonl"
    imported = {json.loads(line)["definition"] for line in receipts.read_text().splitlines()} \
        if receipts.is_file() else set()
    assert not imported & failing, imported


def test_calls_too_few_to_judge_even_pooled_are_left_out_and_named_and_the_rest_import(tmp_path):
    dumps = flashinfer_samplers.record(tmp_path / "rec", "mixed", seed=3)
    small = sorted(p.name for p in dumps.iterdir() if "top_k_sampling" in p.name)[:2]
    dst = tmp_path / "ds"
    out = _ikdata(tmp_path, "import", str(dumps), str(dst))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "added 6 workload(s)" in out.stdout and "left out 2" in out.stdout, out.stdout
    for folder in small:
        line = next(line for line in out.stdout.splitlines() if folder in line)
        assert "not judged (top_k_sampling_v40)" in line and "too few draws" in line, line
    assert sorted(_definitions(dst)) == ["sampling_from_probs_v32__without_indices", "top_k_sampling_v32"]
    again = _ikdata(tmp_path, "import", "--only-passed", "--dry-run", str(dumps), str(tmp_path / "ds2"))
    assert again.returncode == 0 and "would add 6 workload(s)" in again.stdout and "left out 2" in again.stdout, \
        again.stdout + again.stderr


def test_per_row_settings_are_read_at_the_row_each_draw_comes_from():
    import numpy as np

    from ikdata.flashinfer.sampling import sampler_inputs

    probs = np.full((3, 4), 0.25)
    read = sampler_inputs({"probs": probs, "indices": np.array([2, 0]), "top_k": np.array([1, 2, 3], np.int32),
                           "min_p": 0.5})
    assert read["logits"].shape == (2, 4)
    assert read["top_k"].tolist() == [3, 1]  # FlashInfer's kernels read top_k_arr[indices[i]]
    assert read["min_p"].tolist() == [0.5, 0.5]
