"""FlashInfer templates end to end through ``ikdata capture`` (issue 37 items 4 and 6): in-place APIs recorded with
their inputs as the call got them (``selective_state_update``'s ``state``, ``fused_add_rmsnorm``'s two outputs),
references whose parameters are the API's names (``layernorm``'s ``input``), references calling helpers of their
module (rope) made standalone, optional scalars left to the reference's default; each honest engine passes, each
wrong engine fails."""

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
ENGINES = ROOT / "tools" / "flashinfer_engines.py"
sys.path.insert(0, str(ROOT / "tools"))
from flashinfer_engines import EngineCall  # noqa: E402

HONEST = [EngineCall("mamba", "selective_state_update_trace"), EngineCall("norm", "fused_add_rmsnorm_trace"),
          EngineCall("norm", "layernorm_trace"), EngineCall("rope", "apply_rope_trace"),
          EngineCall("norm", "fused_rmsnorm_silu_trace"),
          EngineCall("norm", "gemma_fused_add_rmsnorm_trace"),  # returns 1 of its 2 outputs: not recorded
          EngineCall("sampling", "top_k_ragged_transform_trace")]  # const axis k set by a scalar: trusted after
WRONG = [EngineCall(module, attr, {"batch_size": 3}, seed=2, wrong=True)  # other shapes: other workloads
         for module, attr in [("mamba", "selective_state_update_trace"), ("norm", "fused_add_rmsnorm_trace"),
                              ("rope", "apply_rope_trace")]]


def _ikdata(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-m", "ikdata", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"}, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    into = tmp_path_factory.mktemp("fi-inplace") / "ds"
    out = _ikdata("capture", "--into", str(into), "--", sys.executable, "-W", "ignore", str(ENGINES), "--child",
                  *(c.to_arg() for c in HONEST + WRONG))
    assert out.returncode == 0, out.stdout + out.stderr
    replay = _ikdata("replay", "--json", str(into))
    return into, json.loads((into / "reports" / "replay.json").read_text())["cases"], replay, out


def test_a_call_not_recorded_is_not_called_a_cap(replayed):
    """Issue 37 item 8: no cap was set, so nothing says "caps reached"; the call is not recorded, and says why."""
    into, cases, _, captured = replayed
    assert "caps reached" not in captured.stdout + captured.stderr
    assert not [c for c in cases if c["definition"].startswith("gemma_fused_add_rmsnorm")]


def _cases(cases: list, prefix: str) -> list:
    return [c for c in cases if c["definition"].startswith(prefix)]


def test_every_honest_in_place_and_renamed_api_passes_and_every_wrong_one_fails(replayed):
    into, cases, replay, _ = replayed
    assert replay.returncode == 1  # the wrong engines
    for prefix, honest_and_wrong in [("selective_state_update_", 2), ("fused_add_rmsnorm_", 2), ("rope_h", 2),
                                     ("layernorm_", 1), ("fused_rmsnorm_silu_", 1), ("top_k_ragged_transform_", 1)]:
        found = _cases(cases, prefix)
        assert len(found) == honest_and_wrong, (prefix, [c["definition"] for c in cases])
        statuses = sorted(c["status"] for c in found)
        assert statuses == (["failed", "passed"] if honest_and_wrong == 2 else ["passed"]), (prefix, found)


def test_fused_add_rmsnorm_records_both_outputs_and_inputs_before_the_call(replayed):
    into, cases, _, _ = replayed
    record = json.loads(next((into / "definitions").rglob("fused_add_rmsnorm_h*.json")).read_text())
    assert list(record["outputs"]) == ["output", "residual_out"]
    honest = next(c for c in _cases(cases, "fused_add_rmsnorm_") if c["status"] == "passed")
    # the recorded residual input is not the residual the call wrote: the input was copied before the call
    assert honest["input_digests"]["residual"] != honest["expected_digests"]["residual_out"]


def test_selective_state_update_state_is_the_one_the_call_was_given(replayed):
    _, cases, _, _ = replayed
    honest = next(c for c in _cases(cases, "selective_state_update_") if c["status"] == "passed")
    assert set(honest["metrics"]) == {"out"}  # an honest engine passes every output (82% failed before)


def test_a_reference_taking_the_api_parameter_names_gets_the_inputs_under_them(replayed):
    into, _, _, _ = replayed
    reference = json.loads(next((into / "definitions").rglob("layernorm_h*.json")).read_text())["reference"]
    assert "input=hidden_states" in reference


def test_helpers_of_the_template_module_are_inlined_and_stay_trusted(replayed):
    into, _, _, _ = replayed
    reference = json.loads(next((into / "definitions").rglob("rope_h*.json")).read_text())["reference"]
    from ikdata.core.references import parse_reference, unbound_names

    tree, _ = parse_reference(reference)
    assert tree is not None and unbound_names(tree) == []
    import ikdata

    ds = ikdata.open(into)
    assert any(n.startswith("rope_h") for n in ds.trusted_definitions)  # re-rendered from the installed template


def test_an_absent_optional_scalar_is_left_to_the_reference_default(replayed):
    into, _, _, _ = replayed
    reference = json.loads(next((into / "definitions").rglob("fused_rmsnorm_silu_*.json")).read_text())["reference"]
    assert "eps=None" not in reference
