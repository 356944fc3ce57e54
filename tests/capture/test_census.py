"""The census (issue 32, part 3): every op a process ran, what was recorded, why the rest was not.

The counters and the summary in process; then real captures: the census file in the dataset, schema
checked by validate (a broken line named by file, line and field), carried by push, clone and import;
a capture that records nothing says why and leaves no folder; a process capture could not enable and an
``--adapter`` that failed to install make capture exit 1, naming the process and the reason.
"""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from capture_helpers import read_jsonl, write_script
from ikdata.capture import census
from ikdata.cli import app
from ikdata.core.schema import check


@pytest.fixture
def clean_census():
    census.reset()
    yield census
    census.reset()


def _text(done) -> str:
    return " ".join((done.output + (getattr(done, "stderr", "") or "")).split())


def _capture(tmp_path, source: str, *options: str, into=None):
    script = write_script(tmp_path, "program.py", source)
    into = into or tmp_path / "ds"
    done = CliRunner().invoke(app, ["capture", "--into", str(into), *options, "--", sys.executable, str(script)])
    return done, into


# -- in process: the counters, the record, the summary -----------------------------------------------------

def test_counts_become_one_record_per_op_with_every_call_accounted_for(clean_census):
    for _ in range(300):
        census.seen("torch.nn.functional.linear")
    census.recorded("torch.nn.functional.linear", "dense_gemm_f32_nt_n4_k8")
    census.skipped("torch.nn.functional.linear", "selection rule", "dense_gemm_f32_nt_n4_k8", n=290)
    census.seen("aten::addmm", 72)
    record = census.record("run-1")
    assert check("census", record, path="census/run-1.jsonl") == []
    ops = {o["op"]: o for o in record["ops"]}
    linear = ops["torch.nn.functional.linear"]
    assert linear["calls"] == 300
    assert linear["recorded"] == [{"definition": "dense_gemm_f32_nt_n4_k8", "calls": 1}]
    # the 9 calls the hook looked at and recorded nothing for are not dropped: no definition describes them
    assert {(s["reason"], s["calls"]) for s in linear["skipped"]} == {("selection rule", 290), ("no definition", 9)}
    assert ops["aten::addmm"]["skipped"] == [{"reason": "no definition", "definition": None, "calls": 72}]


def test_the_summary_merges_processes_and_says_what_ran_and_why_the_rest_was_not(clean_census):
    census.seen("aten::addmm", 600)
    census.seen("_C::rms_norm", 24)
    census.seen("F.linear", 2)
    census.recorded("F.linear", "dense_gemm_f32_nt_n4_k8")
    census.recorded("F.linear", "dense_gemm_f32_nt_n4_k16")
    one = dict(census.record("r"), torch=True, enabled=True, reason=None)
    two = dict(one, pid=one["pid"] + 1)
    summary = census.summarise([one, two])
    assert summary.processes == 2
    assert summary.lines()[0] == "ran 1,252 calls of 3 ops; recorded 4 calls of 2 definitions"
    assert summary.lines()[1] == "not recorded, no definition: aten::addmm x1,200, _C::rms_norm x48"
    assert summary.not_enabled == () and summary.adapter_failures == ()
    assert summary.lines()[-1] == "2 processes reported; capture was on in all of them"
    off = census.summarise([one, dict(two, enabled=False, reason="RuntimeError: x")])
    assert off.lines()[-1] == "2 processes reported; capture was on in 1"


def test_why_nothing_names_the_reason_and_the_ops(clean_census):
    census.seen("torch.nn.functional.linear", 4)
    census.skipped("torch.nn.functional.linear", "step", "dense_gemm_f32_nt_n4_k8", n=4)
    # as a process that imported torch and enabled capture reports it, whatever this test process imported
    why = census.summarise([dict(census.record(), torch=True, enabled=True)]).why_nothing()
    assert why == ("none of the 4 calls seen was recorded: 4 ran outside the steps asked for (--steps) "
                   "(torch.nn.functional.linear)")
    assert census.summarise([]).why_nothing().startswith("no process of the command imported torch")


def test_a_process_without_capture_and_a_failed_adapter_are_in_the_summary(clean_census):
    census.not_enabled("RuntimeError: broken")
    census.adapter_failed("mypkg.adapter", "ImportError: no module named mypkg")
    record = dict(census.record(), torch=True)
    assert check("census", record, path="census/x.jsonl") == []
    summary = census.summarise([record])
    assert summary.not_enabled[0][3] == "RuntimeError: broken"
    assert summary.adapter_failures[0][1:] == ("mypkg.adapter", "ImportError: no module named mypkg")
    assert "capture was not enabled in process" in summary.why_nothing()


def test_a_forked_child_starts_its_own_counts(clean_census):
    census.seen("aten::mm", 3)
    census.reset()
    assert census.ops() == []


# -- real captures -----------------------------------------------------------------------------------------

LOOP = """
import torch, torch.nn.functional as F
W = torch.randn(4, 8)
for _ in range(300):
    F.linear(torch.randn(2, 8), W)
"""


def test_a_capture_keeps_its_census_and_validate_checks_it(tmp_path):
    done, into = _capture(tmp_path, LOOP)
    text = _text(done)
    assert done.exit_code == 0, text
    files = list((into / "census").glob("*.jsonl"))
    assert len(files) == 1
    records, problems = census.read(into)
    assert problems == [] and len(records) == 1
    [record] = records
    assert record["enabled"] and record["torch"] and record["run"] == files[0].stem
    assert census.summarise(records).recorded_calls == 1
    assert "recorded 1 call of 1 definition" in text
    # the 299 calls the selection rule left are said, not silently dropped
    assert "selection rule" in text and "x299" in text
    assert CliRunner().invoke(app, ["validate", str(into)]).exit_code == 0
    # a broken census line is named by file, line and field
    line = json.loads(files[0].read_text())
    line["ops"][0]["calls"] = "many"
    files[0].chmod(0o644)
    files[0].write_text(json.dumps(line) + "\n")
    broken = CliRunner().invoke(app, ["validate", str(into)])
    assert broken.exit_code == 1
    assert f"census/{files[0].name}:1: /ops/0/calls" in _text(broken)


def test_the_census_survives_push_clone_and_import(tmp_path):
    done, into = _capture(tmp_path, LOOP)
    assert done.exit_code == 0, _text(done)
    [name] = [p.name for p in (into / "census").glob("*.jsonl")]
    original = (into / "census" / name).read_bytes()
    remote = f"file://{tmp_path / 'remote'}"
    runner = CliRunner()
    for args in (["push", str(into), remote], ["clone", remote, str(tmp_path / "cloned")],
                 ["replay", str(into)], ["import", str(into), str(tmp_path / "imported")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, _text(result))
    for copy in (tmp_path / "cloned", tmp_path / "imported"):
        assert (copy / "census" / name).read_bytes() == original
        assert runner.invoke(app, ["validate", str(copy)]).exit_code == 0
    again = runner.invoke(app, ["import", str(into), str(tmp_path / "imported")])  # held already: no conflict
    assert again.exit_code == 0, _text(again)


def test_a_capture_that_records_nothing_says_why_exits_1_and_leaves_no_folder(tmp_path):
    done, into = _capture(tmp_path, "import torch\nprint(torch.ones(2).sum().item())\n")
    text = _text(done)
    assert done.exit_code == 1, text
    assert "error: nothing was captured" in text
    assert "had no definition that describes them (aten::_local_scalar_dense, aten::ones, aten::sum)" in text
    assert not into.exists()
    empty = tmp_path / "made-by-the-user"
    empty.mkdir()
    done, _ = _capture(tmp_path, LOOP, "--only", "norm", into=empty)
    text = _text(done)
    assert done.exit_code == 1, text
    assert "--only norm selected none of the calls that ran" in text
    assert empty.is_dir() and list(empty.iterdir()) == []  # the user's folder stays, as empty as it was


def test_a_program_that_never_imports_torch_is_told_so(tmp_path):
    done, into = _capture(tmp_path, "print('no torch here')\n")
    assert done.exit_code == 1
    assert "no process of the command imported torch" in _text(done)
    assert not into.exists()


def test_a_failing_adapter_exits_1_naming_the_process_and_the_reason(tmp_path, monkeypatch):
    (tmp_path / "bad_adapter.py").write_text("def install(api):\n    raise RuntimeError('adapter broke on purpose')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    done, into = _capture(tmp_path, LOOP, "--adapter", "bad_adapter")
    text = _text(done)
    assert done.exit_code == 1, text
    assert "error: --adapter bad_adapter failed to install in process" in text
    assert "RuntimeError: adapter broke on purpose" in text
    # the built-in capture went on: the GEMM was recorded, and the census says which adapter failed
    assert len(read_jsonl(into / "receipts.jsonl")) == 1
    [record] = census.read(into)[0]
    assert record["adapters"] == [{"module": "bad_adapter", "error": "RuntimeError: adapter broke on purpose"}]


def test_a_process_where_capture_could_not_start_exits_1_naming_it(tmp_path, capfd):
    done, into = _capture(tmp_path, """
import sys, types
broken = types.ModuleType("ikdata.capture.adapters")
def install(cap):
    raise RuntimeError("built-in adapters broke on purpose")
broken.install = install
sys.modules["ikdata.capture.adapters"] = broken
import torch, torch.nn.functional as F
F.linear(torch.ones(2, 8), torch.ones(4, 8))
print("the program ran")
""")
    text = _text(done)
    assert done.exit_code == 1, text
    assert "the program ran" in capfd.readouterr().out  # capture failing never stops the program
    assert "error: capture was not enabled in process" in text
    assert "program.py): RuntimeError: built-in adapters broke on purpose" in text
    assert not into.exists()


def test_with_the_variable_set_by_hand_each_process_writes_its_census_into_the_dataset(tmp_path):
    from capture_helpers import capture_env, run_python

    script = write_script(tmp_path, "program.py", LOOP)
    into = tmp_path / "ds"
    done = run_python(script, capture_env({"into": str(into)}))
    assert done.returncode == 0, done.stderr
    [path] = (into / "census").glob("*.jsonl")
    records, problems = census.read(into)
    assert problems == [] and len(records) == 1
    assert records[0]["run"] is None and path.name == f"{records[0]['host']}-{records[0]['pid']}.jsonl"
    assert census.summarise(records).recorded_calls == 1
    manifest = CliRunner().invoke(app, ["manifest", str(into)])
    assert manifest.exit_code == 0, manifest.output
    assert CliRunner().invoke(app, ["validate", str(into)]).exit_code == 0


def test_an_adapter_failing_alike_in_every_worker_is_one_line_naming_them_all():
    from ikdata.capture.runner import CaptureResult

    failures = [{"pid": pid, "module": "mine", "error": "RuntimeError: x"} for pid in (11, 12, 13)]
    off = [{"pid": 14, "host": "h", "argv": ["serve.py", "--tp", "2"], "reason": "UsageError: bad"}]
    result = CaptureResult(0, {}, adapter_failures=failures, not_enabled=off)
    assert result.census_problems() == [
        "capture was not enabled in process 14 (serve.py --tp 2): UsageError: bad",
        "--adapter mine failed to install in 3 processes (11, 12, 13): RuntimeError: x"]
