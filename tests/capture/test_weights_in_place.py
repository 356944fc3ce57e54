"""Capture records the weight an operator really used, even when the program changes it in place (issue 18).

Every case runs under ``ikdata capture`` and is replayed: each workload either passes or is
flagged ``unverified`` (replayed as skipped, with the reason); none may fail. Weights of 16
features are copied at every capture; weights of 128 features (64 KiB and more) are reused
and checked by the writer thread, which is where a change the version counter misses is
caught after the fact.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

import ikdata
import ikdata.capture as capture
from capture_helpers import read_jsonl, write_script
from ikdata.cli import app
from ikdata.replay.runner import replay

CASES = {  # output features = N + offset: one definition per case
    1: "W.data.mul_() between calls",
    2: "W.data.copy_() from a tensor equal except in one element",
    3: "param.data = other_tensor",
    4: "module.load_state_dict() between calls",
    5: "an in-place update under torch.no_grad()",
    6: "one weight shared by two modules, one of which updates it",
    7: "a weight updated from another thread between calls",
}

PROGRAM = """
import sys, threading, queue
import torch, torch.nn as nn, torch.nn.functional as F

N = int(sys.argv[1])
torch.manual_seed(0)
x = lambda m: torch.randn(m, N)

W = torch.randn(N + 1, N)                        # 1: through .data, the version counter does not move
for i in range(3):
    F.linear(x(i + 1), W)
    W.data.mul_(2.0)

W = torch.randn(N + 2, N)                        # 2: one element differs
for i in range(3):
    F.linear(x(i + 1), W)
    other = W.detach().clone()
    other[N // 2, N // 3] += 1.0
    W.data.copy_(other)

lin = nn.Linear(N, N + 3, bias=False)            # 3: the parameter's storage is swapped
for i in range(3):
    lin(x(i + 1))
    lin.weight.data = torch.randn(N + 3, N)

lin = nn.Linear(N, N + 4, bias=False)            # 4: load_state_dict copies into the parameter
for i in range(3):
    lin(x(i + 1))
    lin.load_state_dict({"weight": torch.randn(N + 4, N)})

lin = nn.Linear(N, N + 5, bias=False)            # 5: no_grad in-place update
for i in range(3):
    lin(x(i + 1))
    with torch.no_grad():
        lin.weight.mul_(0.5)

shared = nn.Parameter(torch.randn(N + 6, N))     # 6: shared by two modules, one updates it
a, b = nn.Linear(N, N + 6, bias=False), nn.Linear(N, N + 6, bias=False)
a.weight = shared
b.weight = shared
for i in range(3):
    a(x(i + 1))
    a.weight.data.add_(1.0)
    b(x(i + 4))

W = torch.randn(N + 7, N)                        # 7: another thread updates it between calls
todo, done = queue.Queue(), queue.Queue()

def updater():
    while todo.get():
        W.data.copy_(torch.randn(N + 7, N))
        done.put(True)

thread = threading.Thread(target=updater)
thread.start()
for i in range(6):
    F.linear(x(i + 1), W)
    todo.put(True)
    done.get()
todo.put(False)
thread.join()
print("done")
"""


def _verdicts(root) -> dict[int, list[dict]]:
    result = replay(ikdata.open(root), reuse=False)
    by_case: dict[int, list[dict]] = {}
    for case in result.report["cases"]:
        n = int(case["definition"].split("_nt_n")[1].split("_")[0])
        by_case.setdefault(n, []).append(case)
    return by_case


@pytest.mark.parametrize("features", [16, 128], ids=["copied-every-capture", "reused-and-checked"])
def test_in_place_weight_changes_never_give_a_false_failed(tmp_path, features):
    script = write_script(tmp_path, "program.py", PROGRAM)
    into = tmp_path / "ds"
    # every step (--per-step): each case's three module calls are steps, and each is to be judged (issue 44)
    done = CliRunner().invoke(app, ["capture", "--into", str(into), "--per-step", "--", sys.executable, str(script),
                                    str(features)])
    assert done.exit_code == 0, done.output
    by_case = _verdicts(into)
    assert sorted(by_case) == [features + k for k in CASES]
    for offset, what in CASES.items():
        cases = by_case[features + offset]
        assert len(cases) == (6 if offset in (6, 7) else 3), what
        for case in cases:
            assert case["status"] in ("passed", "skipped"), (what, case)
            if case["status"] == "skipped":
                assert case["reason"].startswith("unverified capture, not judged"), (what, case)
    statuses = [c["status"] for cases in by_case.values() for c in cases]
    if features == 16:  # copied at every capture: exact, nothing to flag
        assert set(statuses) == {"passed"}
    for offset in (3, 4, 5):  # the version counter or the storage moved: caught on the engine thread
        assert {c["status"] for c in by_case[features + offset]} == {"passed"}, CASES[offset]


def _hold_writer(cap):
    """Keep the writer thread from writing (it waits for this lock) while the program runs on."""
    return cap.writer._io


def test_a_change_the_version_counter_misses_is_flagged_never_judged(capture_into, tmp_path):
    cap = capture_into(strict=False, weight_cache_min_bytes=0)
    w = torch.randn(4, 8)
    with _hold_writer(cap):
        for i in range(3):
            with capture.request(f"r{i}"):
                F.linear(torch.randn(i + 1, 8), w)
        w.data.mul_(2.0)  # after captures 1 and 2 reused the copy made by capture 0, before any check
        with capture.request("r3"):
            F.linear(torch.randn(4, 8), w)  # reuses the stale copy: the same check covers it
    capture.flush()
    with capture.request("r4"):
        F.linear(torch.randn(5, 8), w)  # the failed check dropped the copy: copied afresh
    capture.flush()
    receipts = {r["request_id"]: r for r in read_jsonl(tmp_path / "ds" / "receipts.jsonl")}
    assert "unverified" not in receipts["r0"]  # copied: exact
    for rid in ("r1", "r2", "r3"):
        assert receipts[rid]["unverified"]["inputs"] == ["W"]
        assert "version counter" in receipts[rid]["unverified"]["reason"]
    assert "unverified" not in receipts["r4"]
    assert cap.weights.flagged == 3
    result = replay(ikdata.open(tmp_path / "ds"), reuse=False)
    status = {c["uuid"]: c for c in result.report["cases"]}
    by_request = {r["request_id"]: status[r["uuid"]] for r in receipts.values()}
    assert by_request["r0"]["status"] == by_request["r4"]["status"] == "passed"
    for rid in ("r1", "r2", "r3"):
        assert by_request[rid]["status"] == "skipped"
        assert "unverified capture, not judged" in by_request[rid]["reason"]
    assert result.exit_code == 0


def test_an_unverified_workload_is_not_imported_and_says_why(capture_into, tmp_path):
    from ikdata.core.errors import ProblemsFound
    from ikdata.importing.apply import import_dataset

    cap = capture_into(strict=False, weight_cache_min_bytes=0)
    w = torch.randn(4, 8)
    with _hold_writer(cap):
        for i in range(2):
            with capture.request(f"r{i}"):
                F.linear(torch.randn(i + 1, 8), w)
        other = w.detach().clone()
        other[3, 7] += 1.0
        w.data.copy_(other)  # one element: no sampled signal would see it; the rehash does
    capture.flush()
    cap.writer.dataset.commit()
    replay(ikdata.open(tmp_path / "ds"), reuse=False)
    with pytest.raises(ProblemsFound) as refused:
        import_dataset(tmp_path / "ds", tmp_path / "shared")
    assert "its capture is unverified" in str(refused.value.problems)
    imported = import_dataset(tmp_path / "ds", tmp_path / "shared", only_passed=True)
    assert len(imported.added) == 1


def test_a_check_covers_only_captures_made_before_it(capture_into, tmp_path):
    """A weight changed right after a good check: the captures before it stay verified."""
    cap = capture_into(strict=False, weight_cache_min_bytes=0)
    w = torch.randn(4, 8)
    for i in range(3):
        with capture.request(f"r{i}"):
            F.linear(torch.randn(i + 1, 8), w)
    capture.flush()  # checks the reused copy now: the live weight is unchanged
    w.data.add_(1.0)
    with _hold_writer(cap):
        with capture.request("r3"):
            F.linear(torch.randn(4, 8), w)  # reuses the stale copy: only the check can tell
    capture.flush()
    receipts = {r["request_id"]: r for r in read_jsonl(tmp_path / "ds" / "receipts.jsonl")}
    assert [rid for rid, r in sorted(receipts.items()) if "unverified" in r] == ["r3"]
    assert cap.weights.checks >= 2


def test_the_check_keeps_a_swapped_out_storage_alive_until_it_ran(capture_into, tmp_path):
    """``param.data = other`` after captures that reused the old storage: they are checked against it."""
    cap = capture_into(strict=False, weight_cache_min_bytes=0)
    linear = torch.nn.Linear(8, 4, bias=False)
    with _hold_writer(cap):
        for i in range(3):
            with capture.request(f"r{i}"):
                linear(torch.randn(i + 1, 8))
        linear.weight.data = torch.randn(4, 8)
        with capture.request("r3"):
            linear(torch.randn(4, 8))
    capture.flush()
    receipts = read_jsonl(tmp_path / "ds" / "receipts.jsonl")
    assert len(receipts) == 4 and not any("unverified" in r for r in receipts)
    rows = read_jsonl(next((tmp_path / "ds" / "workloads").rglob("*.jsonl")))
    assert len({r["workload"]["inputs"]["W"]["path"] for r in rows}) == 2
    assert json.dumps(cap.weights.flagged) == "0"
