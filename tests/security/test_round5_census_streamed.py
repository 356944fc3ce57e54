"""Round five, finding 4: the census is streamed, never read whole.

A census of 200,000 lines cost validate 1,435 MB (about 8 times its size) and show and import as much, although
no command may read a record file whole. Now validate and show read it a block at a time, merge counts as they
go and cap each line. The check is the peak memory (``ru_maxrss``) of the real command in a subprocess against
the same command on the same dataset with a one-line census, measured in the same test: never a time.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

LINES = 30_000


def _record(run: str) -> dict:
    return {"run": run, "pid": 1, "host": "h", "argv": ["p.py"], "rank": None, "world_size": None,
            "time": "2026-01-01T00:00:00Z", "torch": True, "enabled": True, "reason": None, "adapters": [],
            "ops": [{"op": f"aten::op{i}", "calls": 3, "recorded": [], "skipped": [
                {"reason": "no definition", "definition": None, "calls": 3}]} for i in range(12)]}


def _peak_mb(tmp_path, *args: str) -> tuple[int, str]:
    """Peak resident memory (MB) of ``python -m ikdata ARGS``, measured by a parent of its own."""
    measure = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
               " print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024); print(done.stdout)")
    env = dict(os.environ, HOME=str(tmp_path / "home"), COLUMNS="300")
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "ikdata", *args],
                          capture_output=True, text=True, env=env, check=True)
    peak, _, output = done.stdout.partition("\n")
    return int(peak), output


def test_validate_and_show_read_a_large_census_in_bounded_memory(make_ikdata_dataset, tmp_path):
    small, big = make_ikdata_dataset(1, name="small"), make_ikdata_dataset(1, name="big")
    for root, lines in ((small, 1), (big, LINES)):
        receipts = root / "receipts.jsonl"
        receipt = json.loads(receipts.read_text())
        receipt["capture_run"] = "run-1"  # the workload's receipt names the run, so show gives its census
        receipts.write_text(json.dumps(receipt) + "\n")
        (root / "census").mkdir()
        line = (json.dumps(_record("run-1")) + "\n").encode()
        with open(root / "census" / "run-1.jsonl", "wb") as stream:
            for _ in range(lines):
                stream.write(line)
        subprocess.run([sys.executable, "-m", "ikdata", "manifest", str(root)], check=True, capture_output=True)
    size_mb = (big / "census" / "run-1.jsonl").stat().st_size // (1 << 20)
    assert size_mb >= 40
    uuid = receipt["uuid"]
    for command in (["validate"], ["show"]):
        extra = [uuid] if command == ["show"] else []
        base, said_small = _peak_mb(tmp_path, *command, str(small), *extra)
        peak, said_big = _peak_mb(tmp_path, *command, str(big), *extra)
        if command == ["show"]:
            assert f"ran {3 * 12 * LINES:,} calls of 12 ops" in " ".join(said_big.split())
        else:
            assert "valid" in said_big.lower() or "ok" in said_big.lower() or "0 problem" in said_big, said_big
        # read whole, the census cost about 8 times its size; streamed, far less than the file itself
        assert peak - base < size_mb // 4, (command, base, peak, size_mb)
