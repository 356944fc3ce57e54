"""``with ikdata.capture.step(N):`` marks the module calls inside it as step N (issue 44): ``--steps N`` records
what runs in the block, never a warm-up call before it."""

from __future__ import annotations

from capture_helpers import read_jsonl
from selection_programs import ikdata_capture

MARKED = """
import torch
import ikdata.capture

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
with torch.inference_mode():
    model(torch.randn(4, 16))                 # a warm-up call: counted as step 0
    with ikdata.capture.step(5):
        model(torch.randn(7, 16))             # step 5, whatever ran before
        model(torch.randn(7, 16))             # the same step: counts no step of its own
    model(torch.randn(3, 16))                 # counted on from the marked step: step 6
"""


def test_steps_selects_the_marked_block_not_the_warm_up(tmp_path):
    done, dataset = ikdata_capture(tmp_path, "marked.py", MARKED, "--steps", "5")
    assert done.returncode == 0, done.stderr
    receipts = read_jsonl(dataset / "receipts.jsonl")
    assert receipts and {r["step"] for r in receipts} == {5}
    assert {r["axes"]["M"] for r in receipts} == {7}


def test_module_calls_after_the_block_count_on_from_it(tmp_path):
    done, dataset = ikdata_capture(tmp_path, "marked.py", MARKED, "--steps", "6")
    assert done.returncode == 0, done.stderr
    receipts = read_jsonl(dataset / "receipts.jsonl")
    assert {r["step"] for r in receipts} == {6} and {r["axes"]["M"] for r in receipts} == {3}
