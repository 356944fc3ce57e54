"""The end-to-end census's honest engines pass where the cause was ours (issue 48 item 3).

- FlashInfer's sampling templates: the census called each template's reference, which draws twice
  (batch 2) or takes the argmax (``sampling_from_probs``), so 2 failed and 5 were skipped; they are now
  drawn by FlashInfer's own sampling API on the CPU kernel twin, 512 rows at a time, and work end to end.
- ``trtllm_batch_decode`` and its kin: the reference takes a ``workspace_buffer`` no input holds; ``run``
  passes None for it, and the call's own workspace tensor no longer stops its template fitting.
- the fp8 block-scale MoE templates: their CPU reference took minutes at DeepSeek's sizes; at small
  const sizes they run, import and replay, and a 1%-off engine fails.
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

import flashinfer_engines  # noqa: E402


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "HOME": str(tmp_path / "home"),
            "XDG_CACHE_HOME": str(tmp_path / "cache")}


def _census(tmp_path: Path, only: str) -> dict[str, dict]:
    out = tmp_path / "census"
    subprocess.run([sys.executable, str(ROOT / "tools" / "flashinfer_census.py"), str(out), "--only", only],
                   check=True, capture_output=True, text=True, cwd=ROOT, timeout=1500, env=_env(tmp_path))
    rows = json.loads((out / "census.json").read_text())["rows"]
    return {row["key"].split("trace.templates.")[-1]: row for row in rows}


def test_every_sampler_template_works_end_to_end_drawn_by_flashinfer_s_own_api(tmp_path):
    rows = _census(tmp_path, "sampling:")
    samplers = ["top_k_sampling_trace", "top_p_sampling_trace", "top_k_top_p_sampling_trace", "min_p_sampling_trace",
                "sampling_from_probs_trace", "sampling_from_logits_trace", "top_k_top_p_sampling_from_logits_trace"]
    for name in samplers:
        row = rows[f"sampling:{name}"]
        assert row["stage"] == "works", row
        assert row["api"].startswith("flashinfer.sampling."), row


def _import(tmp_path: Path, calls: list) -> subprocess.CompletedProcess:
    dumps = flashinfer_engines.record(tmp_path / "rec", calls, named_as_api=True)
    return subprocess.run([sys.executable, "-W", "ignore", "-m", "ikdata", "import", str(dumps), str(tmp_path / "ds")],
                          capture_output=True, text=True, cwd=ROOT, timeout=1200, env=_env(tmp_path))


def test_a_reference_s_workspace_buffer_does_not_stop_trtllm_batch_decode_importing(tmp_path):
    out = _import(tmp_path, [flashinfer_engines.EngineCall("attention", "trtllm_batch_decode_trace",
                                                           sizes={"batch_size": 2})])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "added 1 workload(s)" in out.stdout and "left out 0" in out.stdout, out.stdout
    (definition,) = (tmp_path / "ds" / "definitions").rglob("*.json")
    assert "workspace_buffer=None" in json.loads(definition.read_text())["reference"]


def test_fp8_block_scale_moe_at_small_sizes_passes_honest_and_fails_one_percent_off(tmp_path):
    sizes = flashinfer_engines.small_sizes("moe:trtllm_fp8_block_scale_moe_default_routing_trace")
    assert sizes["hidden_size"] == 256
    honest = flashinfer_engines.EngineCall("moe", "trtllm_fp8_block_scale_moe_default_routing_trace",
                                           replace={**sizes, "seq_len": 2})
    out = _import(tmp_path / "honest", [honest])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "added 1 workload(s)" in out.stdout, out.stdout
    wrong = flashinfer_engines.EngineCall("moe", "trtllm_fp8_block_scale_moe_default_routing_trace",
                                          replace={**sizes, "seq_len": 2}, wrong=True)
    out = _import(tmp_path / "wrong", [wrong])
    assert out.returncode == 1 and "not validated" in out.stderr, out.stdout + out.stderr


def test_an_empty_call_folder_the_recorder_failed_to_dump_is_named_with_why(tmp_path):
    """trtllm_fmha_v2_prefill's census call left an empty folder (safetensors refused two arguments sharing
    memory) and the census said "no reason given"."""
    from ikdata.flashinfer.dumps import read_calls

    (tmp_path / "20261205_095648_891_pid19209_trtllm_fmha_v2_prefill_call0001").mkdir()
    calls, skipped = read_calls(tmp_path)
    assert calls == []
    assert [s.folder.rsplit("/", 1)[-1] for s in skipped] == ["20261205_095648_891_pid19209_trtllm_fmha_v2_prefill_call0001"]
    assert "failed to dump this call" in skipped[0].reason


def test_an_in_place_api_the_recorder_cannot_dump_works_through_capture_in_the_census(tmp_path):
    rows = _census(tmp_path, "norm:fused_add_rmsnorm_trace")
    row = rows["norm:fused_add_rmsnorm_trace"]
    assert row["stage"] == "works" and row["via"] == "capture", row
