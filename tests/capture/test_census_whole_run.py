"""The census covers the whole run (issue 44): ops that first run late, a backward pass and an optimizer step
outside any module, a custom op outside any module; recorded ops are never listed as "no definition"; the
summary lists the ops that matter first and says where the whole list is."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from ikdata.capture import census

PROGRAM = """
import torch
torch.manual_seed(0)


@torch.library.custom_op("census_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


lin = torch.nn.Linear(8, 8)
gn = torch.nn.GroupNorm(2, 8)
x = torch.randn(4, 8)
twice(x)                       # a custom op with no definition, outside any module
lin(x); lin(x)                 # steps 0 and 1
gn(x)                          # step 2: an op that first runs late
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
loss = lin(x).sum()
loss.backward(); opt.step()    # backward and optimizer, outside any module
with torch.inference_mode():
    lin(x)                     # aten::linear is composite: its addmm is what runs (and is recorded)
"""


def test_the_census_names_ops_that_run_late_outside_modules_and_custom_ops(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    into = tmp_path / "ds"
    done = subprocess.run([sys.executable, "-m", "ikdata", "capture", "--into", str(into), "--", sys.executable,
                           str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = [json.loads(line) for path in (into / "census").glob("*.jsonl") for line in path.read_text().splitlines()]
    ops = {o["op"]: o for o in record["ops"]}
    assert ops["aten::native_group_norm"]["calls"] == 1  # step 2
    assert ops["census_test::twice"]["calls"] == 1  # outside any module, before any step
    assert "aten::mm" in ops and "aten::add_" in ops  # the backward pass's GEMM, the optimizer's update
    assert not {"aten::linear", "aten::layer_norm"} & set(ops)  # composites: their parts are counted
    no_definition = {o["op"] for o in record["ops"] for s in o["skipped"] if s["reason"] == "no definition"}
    assert not no_definition & {o["op"] for o in record["ops"] if o["recorded"]} - {"aten::addmm"}
    text = done.stdout
    [line] = [line for line in text.splitlines() if "not recorded, no definition:" in line]
    listed = line.split(":", 2)[2]
    assert listed.index("aten::native_group_norm") < listed.index("aten::add_")  # a kernel family before the rest
    assert "census_test::twice" in listed
    assert "aten::t " not in listed.split("and")[0] or listed.index("aten::t ") > listed.index("aten::add_")


def test_the_summary_lists_what_matters_first_and_says_where_the_whole_list_is():
    ops = {f"aten::{name}": census.OpCount(f"aten::{name}", 1000, {}, (("no definition", None, 1000),))
           for name in ("view", "t", "reshape", "detach", "expand", "permute", "transpose", "clone", "_unsafe_view")}
    ops["aten::convolution"] = census.OpCount("aten::convolution", 2, {}, (("no definition", None, 2),))
    ops["aten::add"] = census.OpCount("aten::add", 5, {}, (("no definition", None, 5),))
    lines = census.Summary(1, ops).lines(limit=4)
    [listed] = [line for line in lines if line.startswith("not recorded, no definition")]
    assert listed.startswith("not recorded, no definition: aten::convolution x2, aten::add x5, ")
    assert "and 7 more op(s)" in listed
    assert any("every op and count (11 ops): the dataset's census/*.jsonl" in line for line in lines)
    assert census.weight("aten::view") == 2 and census.weight("_C::rms_norm") == 0
    assert census.weight("compiled region: Sequential.forward (inductor)") == 0
