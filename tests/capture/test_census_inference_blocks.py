"""The survey between steps never breaks a program that runs its steps in separate ``torch.inference_mode()``
blocks (as vLLM's worker and most inference loops do): leaving such a block restores the thread's whole dispatch
key set, so a mode pushed or popped inside one left torch stopping at its next op ("Hit Python dispatch key but
no arguments had PyInterpreter"), and a user's own dispatch mode stopped seeing ops."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROGRAM = """
import torch
from torch.utils._python_dispatch import TorchDispatchMode

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
x = torch.randn(4, 8)
model(x)                                # a step outside inference_mode: a survey between steps starts after it
outs = []
for n in range(10):                     # each step in a block of its own
    with torch.inference_mode():
        outs.append(model(x))
    torch.arange(3) + 1                 # an op between the blocks


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


for n in range(3):
    with torch.inference_mode(), Count() as counter:
        model(x)
    assert counter.ops >= 3, counter.ops  # the user's mode sees the model's ops, whatever capture surveys
bare = torch.stack(outs)
print("sum", float(bare.sum()))
"""


def test_steps_in_separate_inference_mode_blocks_run_as_without_capture(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    bare = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    into = tmp_path / "ds"
    done = subprocess.run([sys.executable, "-m", "ikdata", "capture", "--into", str(into), "--", sys.executable,
                           str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PyInterpreter" not in done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("sum")] == \
        [line for line in bare.stdout.splitlines() if line.startswith("sum")]
    rows = [json.loads(line) for path in (into / "workloads").rglob("*.jsonl") for line in path.read_text().splitlines()]
    assert rows, "the model's GEMMs were recorded"
