"""What a new user met under ``ikdata capture`` (issue 11 items 1-3): start-up, receipt fields, ``--steps``."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from capture_helpers import capture_env, read_jsonl, run_python, write_script
from ikdata.cli import app

GEMM_OUTSIDE_MODULES = """
import torch, torch.nn.functional as F
w = torch.randn(4, 8)
for m in (1, 2, 3):
    F.linear(torch.randn(m, 8), w)   # a call outside any module forward: no step can be known
"""

GEMM_IN_A_MODULE = """
import torch
lin = torch.nn.Linear(8, 4, bias=False)
for m in (1, 2):
    lin(torch.randn(m, 8))           # two steps: 0 and 1
"""


def _capture(tmp_path, source: str, *options: str):
    script = write_script(tmp_path, "program.py", source)
    into = tmp_path / "ds"
    done = CliRunner().invoke(app, ["capture", "--into", str(into), *options, "--", sys.executable, str(script)])
    return done, into


def _text(done) -> str:
    return done.output + (getattr(done, "stderr", "") or "")


# -- 1. start-up: nothing the program does not import --------------------------------------------

def test_capture_does_not_import_dynamo_for_a_program_that_never_compiles(tmp_path):
    script = write_script(tmp_path, "program.py", GEMM_OUTSIDE_MODULES + """
import sys
print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
""")
    done = run_python(script, capture_env({"into": str(tmp_path / "ds")}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no dynamo"
    assert len(read_jsonl(next((tmp_path / "ds" / "workloads").rglob("*.jsonl")))) == 3


def test_a_program_that_compiles_after_capture_started_is_still_captured_eagerly(tmp_path):
    """Dynamo imported by the program after the patches were made: the graph break is built then."""
    script = write_script(tmp_path, "program.py", """
import torch, torch.nn.functional as F
import ikdata.capture
w = torch.randn(4, 8)
F.linear(torch.randn(1, 8), w)
compiled = torch.compile(lambda a, w: F.linear(a, w).relu(), backend="eager")
with ikdata.capture.request("compiled"):
    out = compiled(torch.randn(2, 8), w)
print(out.shape[0])
""")
    done = run_python(script, capture_env({"into": str(tmp_path / "ds")}), timeout=300)
    assert done.returncode == 0, done.stderr
    receipts = read_jsonl(tmp_path / "ds" / "receipts.jsonl")
    gemms = [r for r in receipts if r["definition"].startswith("dense_gemm")]  # relu_f32_h4 is recorded too
    assert [r["axes"]["M"] for r in gemms if r["request_id"] == "compiled"] == [2]


# -- 2. receipts: the engine's own version, request-file values as they are ---------------------

def test_engine_version_is_the_named_engines_own_never_torchs(tmp_path):
    done, into = _capture(tmp_path, GEMM_IN_A_MODULE, "--engine", "SGLang")
    assert done.exit_code == 0, _text(done)
    receipts = read_jsonl(into / "receipts.jsonl")
    assert {r["engine"] for r in receipts} == {"SGLang"}
    assert {r.get("engine_version") for r in receipts} == {None}  # sglang is not installed here
    assert all(r["torch_version"] for r in receipts)


def test_engine_version_found_from_the_engine_package(tmp_path):
    from importlib.metadata import version

    done, into = _capture(tmp_path, GEMM_IN_A_MODULE, "--engine", "typer")
    assert done.exit_code == 0, _text(done)
    assert {r["engine_version"] for r in read_jsonl(into / "receipts.jsonl")} == {version("typer")}


def test_request_file_values_are_kept_as_json_and_capped(tmp_path, capfd):
    request = tmp_path / "request.json"
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.7, "stop": None}
    request.write_text(json.dumps({"request_id": "req-9", "request": body,
                                   "server_args": ["--model", "Qwen/Qwen3-8B", "--tp", "2"],
                                   "huge": "x" * (100 << 10)}))
    done, into = _capture(tmp_path, GEMM_IN_A_MODULE, "--request-file", str(request))
    assert done.exit_code == 0, _text(done)
    [first, _] = read_jsonl(into / "receipts.jsonl")
    assert first["request_id"] == "req-9"
    assert first["request"] == body
    assert first["server_args"] == ["--model", "Qwen/Qwen3-8B", "--tp", "2"]
    assert first["huge"].startswith("<omitted by ikdata: 102402 bytes of JSON, past the 65536-byte cap")
    assert "field 'huge' is 102402 bytes of JSON" in capfd.readouterr().err  # said by the program's process
    check = CliRunner().invoke(app, ["validate", "--deep", str(into)])
    assert check.exit_code == 0, check.output


# -- 3. --steps that selects nothing -------------------------------------------------------------

def test_steps_outside_any_step_say_why_and_exit_1(tmp_path):
    done, into = _capture(tmp_path, GEMM_OUTSIDE_MODULES, "--steps", "0")
    text = _text(done)
    assert done.exit_code == 1, text
    assert "None" not in text
    assert "nothing was captured" in text
    assert "--steps 0 kept nothing: dense_gemm_f32_nt_n4_k8 (3 calls) ran outside any step" in " ".join(text.split())
    assert "ikdata.capture.step" in text


def test_steps_beyond_those_that_ran_warn_and_exit_1(tmp_path):
    done, into = _capture(tmp_path, GEMM_IN_A_MODULE, "--steps", "5")
    text = " ".join(_text(done).split())
    assert done.exit_code == 1, text  # a capture that records nothing exits 1 (issue 32), saying why
    assert "ran outside the steps asked for (--steps)" in text
    assert "None" not in text
    assert "--steps 5 kept nothing: each request ran 2 step(s) at most (steps 0-1)" in text


@pytest.mark.parametrize("steps", ["0", "0,1"])
def test_steps_that_select_something_say_nothing_more(tmp_path, steps):
    done, into = _capture(tmp_path, GEMM_IN_A_MODULE, "--steps", steps)
    assert done.exit_code == 0, _text(done)
    assert "kept nothing" not in _text(done)
    assert len(read_jsonl(into / "receipts.jsonl")) == len(steps.split(","))
