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


LIBRARY = """
import sys
import torch
import ikdata.capture

ikdata.capture.install(ikdata.capture.CaptureConfig(into=sys.argv[1]))   # the library path: no ikdata capture
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GroupNorm(2, 8))
with torch.no_grad(), ikdata.capture.step(0):
    model(torch.randn(2, 8))
"""


def test_the_library_path_leaves_a_census_naming_what_it_did_not_record(tmp_path):
    import json
    import subprocess
    import sys

    script = tmp_path / "library.py"
    script.write_text(LIBRARY)
    into = tmp_path / "ds"
    env = {k: v for k, v in __import__("os").environ.items() if k != "IKDATA_CAPTURE"}
    done = subprocess.run([sys.executable, str(script), str(into)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    files = list((into / "census").glob("*.jsonl"))
    assert len(files) == 1, files
    ops = {o["op"]: o for o in json.loads(files[0].read_text().splitlines()[0])["ops"]}
    recorded = {r["definition"] for o in ops.values() for r in o["recorded"]}
    assert recorded == {"dense_gemm_bias_f32_nt_n8_k8"} and "aten::native_group_norm" in ops, ops
    assert read_jsonl(into / "receipts.jsonl")[0]["step"] == 0
