"""Capture across processes: the boot hook, every way of starting a child, concurrency, SIGTERM, os._exit, SIGKILL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import ikdata
from ikdata.core.writer import DatasetWriter
from capture_helpers import capture_env, read_jsonl, run_python, write_script
from ikdata.capture.config import CaptureConfig
from ikdata.capture.runner import run_capture

# Imported by every script: an optional slow writer, so that work is still queued when the process leaves.
SLOW_WRITER = """
import os, time
if os.environ.get("SLOW_WRITER"):
    from ikdata.capture.writer import CaptureWriter
    _write = CaptureWriter.write
    def _slow(self, job):
        time.sleep(float(os.environ["SLOW_WRITER"]))
        _write(self, job)
    CaptureWriter.write = _slow
"""


def _receipts(root):
    return read_jsonl(root / "receipts.jsonl") if (root / "receipts.jsonl").exists() else []


def test_boot_hook_costs_nothing_when_off_and_waits_for_torch_when_on(tmp_path):
    probe = "import sys; print('ikdata' in sys.modules, 'ikdata_boot' in sys.modules, 'torch' in sys.modules)"
    off = subprocess.run([sys.executable, "-c", probe], env=capture_env(), capture_output=True, text=True)
    assert off.stdout.split() == ["False", "False", "False"]
    on = subprocess.run([sys.executable, "-c", probe], env=capture_env({"into": str(tmp_path / "d")}),
                        capture_output=True, text=True)
    # booted (the stdlib-only ikdata_boot), but neither torch nor the ikdata package is imported for it (issue 10)
    assert on.stdout.split() == ["False", "True", "False"]


CHILDREN = SLOW_WRITER + """
import multiprocessing, os, subprocess, sys
import torch, torch.nn.functional as F

W = torch.randn(4, 8)

def work(rows):
    for extra in (0, 100, 200):  # three captures per process (three variants)
        F.linear(torch.randn(rows + extra, 8), W)

def tm_work(index, rows):
    work(rows)

if __name__ == "__main__":
    if sys.argv[1] == "--child":
        work(int(sys.argv[2]))
        sys.exit(0)
    work(1)
    for i, method in enumerate(sys.argv[1].split(",")):
        rows = 2 + i
        if method == "subprocess":
            subprocess.run([sys.executable, __file__, "--child", str(rows)], check=True)
        elif method == "os.fork":
            pid = os.fork()
            if pid == 0:
                work(rows)
                os._exit(0)  # no atexit here: capture must flush inside os._exit
            assert os.waitpid(pid, 0)[1] == 0
        elif method == "torch.multiprocessing":
            import torch.multiprocessing as tmp
            tmp.spawn(tm_work, args=(rows,), nprocs=1)
        else:
            process = multiprocessing.get_context(method).Process(target=work, args=(rows,))
            process.start()
            process.join()
            assert process.exitcode == 0, (method, process.exitcode)
    print("done")
"""


def test_every_kind_of_child_captures(tmp_path, monkeypatch):
    methods = ["fork", "os.fork", "spawn", "forkserver", "subprocess", "torch.multiprocessing"]
    script = write_script(tmp_path, "children.py", CHILDREN)
    monkeypatch.setenv("SLOW_WRITER", "0.05")  # work is still queued when a forked child calls os._exit
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # forking after OpenMP ran hangs libgomp children, capture or not
    into = tmp_path / "ds"
    result = run_capture(CaptureConfig(into=str(into)), [sys.executable, str(script), ",".join(methods)])
    assert result.returncode == 0
    receipts = _receipts(into)
    rows_by_m = {}
    for r in receipts:
        rows_by_m.setdefault(r["axes"]["M"] % 100, set()).add(r["process_id"])
    # the parent (M=1) and one child per method (M=2..6), three captures each, each from its own process
    assert sorted(rows_by_m) == list(range(1, 2 + len(methods)))
    assert len(receipts) == 3 * (1 + len(methods))
    assert len({r["process_id"] for r in receipts}) == 1 + len(methods)
    assert result.counts == {"dense_gemm_f32_nt_n4_k8": 3 * (1 + len(methods))}
    report = ikdata.validate(ikdata.open(into), deep=True)
    assert report.problems == []


def test_sigterm_flushes_what_was_queued(tmp_path):
    script = write_script(tmp_path, "served.py", SLOW_WRITER + """
import sys, time
import torch, torch.nn.functional as F
W = torch.randn(4, 8)
for rows in range(1, 6):
    F.linear(torch.randn(rows, 8), W)
print("ready", flush=True)
time.sleep(60)
""")
    into = tmp_path / "ds"
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                               env=capture_env({"into": str(into)}, SLOW_WRITER="0.2"))
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    assert len(_receipts(into)) == 5


CONCURRENT = """
import sys
import torch, torch.nn.functional as F
W = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))  # the same weight in every process
for rows in range(1, 19):
    F.linear(torch.randn(rows, 32), W)
"""


def test_concurrent_processes_write_every_row_whole(tmp_path):
    script = write_script(tmp_path, "worker.py", CONCURRENT)
    into = tmp_path / "ds"
    env = capture_env({"into": str(into)})
    processes = [subprocess.Popen([sys.executable, str(script)], env=env) for _ in range(2)]
    assert [p.wait(timeout=120) for p in processes] == [0, 0]
    lines = (into / "workloads/gemm/dense_gemm_f32_nt_n64_k32.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]  # every line is one whole row
    assert len(rows) == 36 and len({r["workload"]["uuid"] for r in rows}) == 36  # 2 processes x 18
    assert len({r["workload"]["inputs"]["W"]["path"] for r in rows}) == 1
    assert len(_receipts(into)) == 36
    DatasetWriter(into).commit()  # what 'ikdata capture' does once the command has ended
    assert ikdata.validate(ikdata.open(into), deep=True).problems == []


KILLED = """
import sys
import torch, torch.nn.functional as F
import ikdata.capture
W = torch.randn(256, 256)
i = 0
while True:
    with ikdata.capture.request(i):
        F.linear(torch.randn(16, 256), W)
    i += 1
"""


def test_sigkill_at_a_random_moment_leaves_a_valid_dataset(tmp_path):
    from typer.testing import CliRunner

    from ikdata.cli import app

    script = write_script(tmp_path, "killed.py", KILLED)
    into = tmp_path / "ds"
    process = subprocess.Popen([sys.executable, str(script)], env=capture_env({"into": str(into)}))
    deadline = time.monotonic() + 60
    while len(_receipts(into)) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(random.uniform(0, 0.2))
    process.kill()
    process.wait()
    # killed without its committing parent: the manifest is missing (repair writes it), and a blob's temp file
    # the writer had not renamed yet may be left (validate names it, repair sweeps it); nothing else
    found = ikdata.validate(ikdata.open(into), deep=True).problems
    assert all(p.path.rsplit("/", 1)[-1].startswith(".tmp-") for p in found if p.code == "stale-temp"), found
    problems = [p for p in found if p.code not in ("manifest", "stale-temp")]
    assert len(problems) <= 1, problems  # at most a torn last row
    assert all(p.path.startswith(("workloads/", "receipts.jsonl")) and p.line for p in problems), problems
    rows_file = into / "workloads/gemm/dense_gemm_f32_nt_n256_k256.jsonl"
    if not problems:  # make the worst case certain: a kill inside a row's write
        with open(rows_file, "ab") as stream:
            stream.write(b'{"definition": "dense_gemm_f32_nt_n256_k256", "workl')
        problems = [p for p in ikdata.validate(ikdata.open(into), deep=True).problems
                    if p.code not in ("manifest", "stale-temp")]
        assert [(p.path, p.line) for p in problems] == [
            ("workloads/gemm/dense_gemm_f32_nt_n256_k256.jsonl", len(rows_file.read_bytes().split(b"\n")))]
    result = CliRunner().invoke(app, ["repair", str(into)])
    assert result.exit_code == 0 and "moved line(s)" in result.output
    assert ikdata.validate(ikdata.open(into), deep=True).problems == []
    assert len(_receipts(into)) >= 5
