"""Capture leaves ``torch.compile`` as it is (issue 44): the same graphs with and without ``ikdata capture``, the
program's output unchanged, and what the compiled code ran recorded where it ran (inductor's outputs included)
and named in the census.

Each case runs a tiny MLP program twice in real subprocesses, bare and under ``ikdata capture --steps 0`` (a
selection that changes between steps, which is what made compiled graphs recompile), and compares what the
program printed: its output and Dynamo's counters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROGRAM = """
import json, sys
import torch
from torch._dynamo.utils import counters

torch.manual_seed(0)
mode = sys.argv[1]
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8))
options = {"eager": None, "inductor": {}, "reduce-overhead": {"mode": "reduce-overhead"},
           "aot_eager": {"backend": "aot_eager"}, "fullgraph": {"fullgraph": True}}[mode]
run = model if options is None else torch.compile(model, **options)
x = torch.randn(4, 16)
with torch.no_grad():
    for _ in range(3):
        y = run(x)
print(json.dumps({"out": y.flatten().tolist(), "graphs": counters["stats"]["unique_graphs"],
                  "frames": counters["stats"]["calls_captured"], "breaks": sum(counters["graph_break"].values())}))
"""

COMPILED_FUNCTION = """
import json
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

torch.manual_seed(0)
w, b, g = torch.randn(8, 16), torch.randn(8), torch.rand(8)


@torch.compile(fullgraph=True)
def block(x):
    return F.layer_norm(torch.relu(F.linear(x, w, b)), (8,), g, b)


x = torch.randn(5, 16)
outs = [block(x) for _ in range(2)]
print(json.dumps({"out": outs[-1].flatten().tolist(), "graphs": counters["stats"]["unique_graphs"]}))
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               OMP_NUM_THREADS="1")
    env.pop("IKDATA_CAPTURE", None)
    return env


def _bare(tmp_path: Path, script: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(script), *args], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _captured(tmp_path: Path, script: Path, into: Path, *args: str, options: tuple[str, ...] = ()) -> tuple[dict, str]:
    command = [sys.executable, "-m", "ikdata", "capture", "--into", str(into), *options, "--",
               sys.executable, str(script), *args]
    done = subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    printed = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(printed[-1]), done.stdout + done.stderr


def _census(into: Path) -> dict[str, dict]:
    ops: dict[str, dict] = {}
    for path in (into / "census").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            for op in json.loads(line)["ops"]:
                ops[op["op"]] = op
    return ops


def _definitions(into: Path) -> set[str]:
    return {json.loads(line)["definition"] for line in (into / "receipts.jsonl").read_text().splitlines()}


@pytest.mark.parametrize("mode", ["eager", "inductor", "reduce-overhead", "aot_eager", "fullgraph"])
def test_a_compiled_model_compiles_the_same_graphs_under_capture_and_is_recorded(tmp_path, mode):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    bare = _bare(tmp_path, script, mode)
    into = tmp_path / "ds"
    captured, text = _captured(tmp_path, script, into, mode, options=("--steps", "0"))
    assert captured == bare  # same output, same number of graphs and frames, same breaks (none)
    if mode != "eager":
        assert bare["graphs"] == 1 and bare["breaks"] == 0
    # what ran was recorded where it ran: the GEMMs, GELU and LayerNorm of step 0, inductor's own outputs included
    assert {d.split("_f32")[0] for d in _definitions(into)} >= {"dense_gemm_bias", "gelu", "layernorm"}, text
    census = _census(into)
    if mode != "eager":
        backend = {"aot_eager": "aot_eager"}.get(mode, "inductor")
        region = census[f"compiled region: Sequential.forward ({backend})"]
        assert region["calls"] == 3 and region["skipped"] == [{"reason": "compiled", "definition": None, "calls": 3}]
        assert "compiled region: Sequential.forward" in text  # the printed summary names it
    replay = subprocess.run([sys.executable, "-m", "ikdata", "replay", str(into)], env=_env(tmp_path),
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert replay.returncode == 0, replay.stdout[-3000:]  # inductor's outputs judged against the eager reference


def test_a_fullgraph_compiled_function_outside_any_module_is_captured(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(COMPILED_FUNCTION))
    bare = _bare(tmp_path, script)
    into = tmp_path / "ds"
    captured, text = _captured(tmp_path, script, into)
    assert captured == bare and bare["graphs"] == 1
    assert {"dense_gemm_bias_f32_nt_n8_k16", "layernorm_f32_h8", "relu_f32_h8"} <= _definitions(into), text
    assert _census(into)["compiled region: block (inductor)"]["calls"] == 2


HIGHER_ORDER = """
import torch

torch.manual_seed(0)
lin = torch.nn.Linear(4, 4)


def pick(x):
    return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


print(pick(lin(torch.ones(3, 4))).sum().item())
"""


def test_a_higher_order_op_runs_eagerly_under_capture(tmp_path):
    """torch.cond (and compiled graphs' with_effects, auto_functionalized) dispatch in Python; under capture they
    run as without it, and are named in the census."""
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(HIGHER_ORDER))
    done = subprocess.run([sys.executable, str(script)], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    into = tmp_path / "ds"
    command = [sys.executable, "-m", "ikdata", "capture", "--into", str(into), "--", sys.executable, str(script)]
    captured = subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert captured.returncode == 0, (captured.stdout + captured.stderr)[-3000:]
    assert captured.stdout.splitlines()[0] == done.stdout.strip()
    assert _census(into)["higher_order::cond"]["calls"] == 1
