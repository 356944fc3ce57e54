"""An engine's own op (registered with torch.library) at the dispatcher: named by the census while no definition
binds it, then bound by declaring it in a definition (no adapter code), recorded, and replayed.

Also: an op that writes its argument in place has its input recorded as it was before the call.
"""

from __future__ import annotations

import json

import pytest
import torch

import ikdata
import ikdata.capture as capture
from capture_helpers import read_jsonl
from ikdata.capture import census
from ikdata.core.errors import UsageError
from ikdata.core.writer import DatasetWriter
from ikdata.replay.runner import replay


@torch.library.custom_op("ikdtest::scaled_rms", mutates_args=())
def scaled_rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@torch.library.custom_op("ikdtest::rotate_", mutates_args=("x",))
def rotate_(x: torch.Tensor, shift: int) -> None:
    x.copy_(torch.roll(x, shift, dims=-1) * 2.0)


class Block(torch.nn.Module):
    """An engine's layer: its norm is its own op, reached by no Python function capture patches."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        y = torch.ops.ikdtest.scaled_rms(x, self.weight, 1e-6)
        torch.ops.ikdtest.rotate_(y, 1)
        return y


RMS = {
    "name": "ikdtest_scaled_rms_h8", "op_type": "norm",
    "description": "ikdtest::scaled_rms bound by declaration",
    "axes": {"M": {"type": "var"}, "H": {"type": "const", "value": 8}},
    "inputs": {"X": {"shape": ["M", "H"], "dtype": "float32"}, "W": {"shape": ["H"], "dtype": "float32"},
               "eps": {"shape": None, "dtype": "float32"}},
    "outputs": {"Y": {"shape": ["M", "H"], "dtype": "float32"}},
    "reference": "import torch\n\n\ndef run(X, W, eps):\n"
                 "    return X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps) * W\n",
    "capture": {"op": "ikdtest::scaled_rms", "inputs": {"X": "x", "W": "weight", "eps": "eps"},
                "outputs": {"Y": "return"}},
}
ROTATE = {
    "name": "ikdtest_rotate_h8", "op_type": "rotary",
    "description": "ikdtest::rotate_ writes x in place: X is read before the call, Y after it",
    "axes": {"M": {"type": "var"}, "H": {"type": "const", "value": 8}},
    "inputs": {"X": {"shape": ["M", "H"], "dtype": "float32"}, "shift": {"shape": None, "dtype": "int64"}},
    "outputs": {"Y": {"shape": ["M", "H"], "dtype": "float32"}},
    "reference": "import torch\n\n\ndef run(X, shift):\n    return torch.roll(X, shift, dims=-1) * 2.0\n",
    "capture": {"op": "ikdtest::rotate_", "inputs": {"X": "x", "shift": "shift"}, "outputs": {"Y": "x"}},
}


def _folder(tmp_path, *records):
    folder = tmp_path / "defs"
    folder.mkdir()
    for record in records:
        (folder / f"{record['name']}.json").write_text(json.dumps(record))
    return folder


def _run(block):
    x = torch.randn(3, 8)
    with torch.no_grad(), capture.request("r1"):
        out = block(x)
    capture.flush()
    return x, out


def test_an_unbound_custom_op_is_named_by_the_census(capture_into, tmp_path):
    census.reset()
    capture_into()
    _run(Block())
    counts = {o.op: o for o in census.ops()}
    for op in ("ikdtest::scaled_rms", "ikdtest::rotate_"):
        assert counts[op].calls == 1 and counts[op].recorded == {}
        assert [reason for reason, _, _ in counts[op].skipped] == ["no definition"]
    assert not (tmp_path / "ds" / "workloads").exists()


def test_a_declared_binding_records_the_op_and_replays(capture_into, tmp_path):
    census.reset()
    folder = _folder(tmp_path, RMS, ROTATE)
    capture_into(definitions=[str(folder)])
    block = Block()
    x, out = _run(block)
    root = tmp_path / "ds"
    counts = {o.op: o for o in census.ops()}
    assert counts["ikdtest::scaled_rms"].recorded == {"ikdtest_scaled_rms_h8": 1}
    assert counts["ikdtest::rotate_"].recorded == {"ikdtest_rotate_h8": 1}
    receipts = {r["definition"]: r for r in read_jsonl(root / "receipts.jsonl")}
    assert receipts["ikdtest_scaled_rms_h8"]["operation"] == "ikdtest::scaled_rms"
    assert receipts["ikdtest_scaled_rms_h8"]["module_path"] == "Block"
    DatasetWriter(root).commit()
    ds = ikdata.open(root, definitions=[folder])
    assert ikdata.validate(ds, deep=True).problems == []
    by_name = {w.definition: w for w in ds.workloads()}
    rotated = ds.load_inputs(by_name["ikdtest_rotate_h8"])
    expected_norm = scaled_rms(x, block.weight.detach(), 1e-6)
    # the in-place op's input is the tensor as it was before the op wrote it, its output as after
    torch.testing.assert_close(rotated["X"], expected_norm)
    assert rotated["shift"] == 1
    [rot_receipt] = [r for r in ds.receipts() if r.definition == "ikdtest_rotate_h8"]
    torch.testing.assert_close(ds.load_expected(rot_receipt)["Y"], out)
    result = replay(ds, reuse=False)
    assert {c["definition"]: c["status"] for c in result.report["cases"]} == {
        "ikdtest_scaled_rms_h8": "passed", "ikdtest_rotate_h8": "passed"}


def test_a_binding_whose_shapes_do_not_fit_is_counted_not_recorded(capture_into, tmp_path):
    census.reset()
    record = dict(RMS, name="ikdtest_scaled_rms_h16", axes={"M": {"type": "var"}, "H": {"type": "const", "value": 16}})
    capture_into(definitions=[str(_folder(tmp_path, record))])
    _run(Block())
    [line] = [o for o in census.ops() if o.op == "ikdtest::scaled_rms"]
    assert line.recorded == {} and [r for r, _, _ in line.skipped] == ["no definition"]


def test_a_binding_that_misses_an_input_is_refused_by_name(capture_into, tmp_path):
    record = dict(RMS, capture={"op": "ikdtest::scaled_rms", "inputs": {"X": "x"}, "outputs": {"Y": "return"}})
    with pytest.raises(UsageError, match=r"ikdtest_scaled_rms_h8.json: capture: every input and output of "
                                         r"ikdtest_scaled_rms_h8 must be mapped once \(missing \['W', 'eps'\]"):
        capture_into(definitions=[str(_folder(tmp_path, record))])


def test_an_op_registered_after_capture_started_is_bound_when_it_first_runs(capture_into, tmp_path):
    """An engine loads its op library after torch (and capture) started: the survey binds it on its first call."""
    record = dict(RMS, name="ikdtest_late_rms_h8", capture=dict(RMS["capture"], op="ikdtest::late_rms"))
    cap = capture_into(definitions=[str(_folder(tmp_path, record))])
    assert "ikdtest::late_rms.default" in cap.dispatch.pending

    @torch.library.custom_op("ikdtest::late_rms", mutates_args=())
    def late_rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return scaled_rms(x, weight, eps)

    class Late(torch.nn.Module):
        def forward(self, x):
            return torch.ops.ikdtest.late_rms(x, torch.ones(8), 1e-6)

    with torch.no_grad(), capture.request("r1"):
        Late()(torch.randn(2, 8))
    capture.flush()
    assert [r["definition"] for r in read_jsonl(tmp_path / "ds" / "receipts.jsonl")] == ["ikdtest_late_rms_h8"]
    assert not cap.dispatch.pending


ENGINE = """
import torch

@torch.library.custom_op("ikdcli::scaled_rms", mutates_args=())
def scaled_rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(8) + 0.5)
    def forward(self, x):
        return torch.ops.ikdcli.scaled_rms(x, self.weight, 1e-6)

with torch.no_grad():
    Block()(torch.randn(3, 8))
"""


def test_through_the_cli_the_census_names_the_op_then_a_definition_binds_it(tmp_path):
    """ikdata capture on a program with its own op: first it says the op has no definition (exit 1: nothing
    recorded); with a definition binding it, the op is recorded, the census is in the dataset, and it replays."""
    import sys

    from typer.testing import CliRunner

    from capture_helpers import write_script
    from ikdata.cli import app

    script = write_script(tmp_path, "engine.py", ENGINE)
    first = CliRunner().invoke(app, ["capture", "--into", str(tmp_path / "a"), "--", sys.executable, str(script)])
    assert first.exit_code == 1 and "ikdcli::scaled_rms x1" in first.output, first.output
    folder = tmp_path / "defs"
    folder.mkdir()
    record = dict(RMS, name="ikdcli_scaled_rms_h8", capture=dict(RMS["capture"], op="ikdcli::scaled_rms"))
    (folder / "ikdcli_scaled_rms_h8.json").write_text(json.dumps(record))
    into = tmp_path / "b"
    second = CliRunner().invoke(app, ["capture", "--into", str(into), "--definitions", str(folder), "--",
                                      sys.executable, str(script)])
    assert second.exit_code == 0, second.output
    assert [r["definition"] for r in read_jsonl(into / "receipts.jsonl")] == ["ikdcli_scaled_rms_h8"]
    [census_file] = (into / "census").glob("*.jsonl")
    [line] = [op for rec in read_jsonl(census_file) for op in rec["ops"] if op["op"] == "ikdcli::scaled_rms"]
    assert line["recorded"] == [{"definition": "ikdcli_scaled_rms_h8", "calls": 1}]
    replayed = CliRunner().invoke(app, ["replay", str(into), "--definitions", str(folder)])
    assert replayed.exit_code == 0, replayed.output
