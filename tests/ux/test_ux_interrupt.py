"""Ctrl-C stops a long command promptly, says so, leaves what it wrote valid and says how to go on.

Before: Ctrl-C after 20 of 1,601 blobs, push uploaded all 1,601 (the thread pool ran every queued upload to its
end), then exited 130 without a word.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ikdata.remote.transfer import DEFAULT_JOBS, run_parallel

ROWS = 800  # two new blobs a row (A and C; W is shared): 1,601 blobs


def test_interrupt_stops_queued_transfers():
    """A KeyboardInterrupt while transfers run starts nothing queued: at most the ones under way finish."""
    started: list[int] = []
    lock = threading.Lock()

    def work(item: int) -> int:
        time.sleep(0.002)  # a transfer takes time: by the 200th, all 2,000 have long been queued
        with lock:
            started.append(item)
            if len(started) == 200:
                # what Ctrl-C does: SIGINT to the main thread, waiting on the pool, raises KeyboardInterrupt there
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        return item

    items = list(range(2000))
    with pytest.raises(KeyboardInterrupt):
        run_parallel("upload", items, work, size_of=lambda _: 1, jobs=DEFAULT_JOBS)
    for thread in threading.enumerate():  # let the workers under way finish, as the interpreter does at exit
        if thread.name.startswith("ThreadPoolExecutor"):
            thread.join()
    assert len(started) < 200 + 4 * DEFAULT_JOBS, f"{len(started)} of {len(items)} transfers ran after Ctrl-C"


def _blobs(folder: Path) -> int:
    return sum(1 for _ in (folder / "blob").rglob("*.safetensors")) if (folder / "blob").is_dir() else 0


def test_ctrl_c_during_push_stops_says_so_and_a_rerun_finishes(make_ikdata_dataset, tmp_path):
    dataset = make_ikdata_dataset(ROWS, name="many")
    total = _blobs(dataset)
    remote = tmp_path / "remote"
    command = [sys.executable, "-m", "ikdata", "push", "--no-pack", str(dataset), str(remote)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1"})
    while _blobs(remote) < 20 and proc.poll() is None:
        time.sleep(0.005)
    assert proc.poll() is None, "push finished before it could be interrupted; the test needs more blobs"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    sent = _blobs(remote)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "push again" in err, err
    assert "Traceback" not in err
    assert sent < total / 2, f"{sent} of {total} blobs were sent after Ctrl-C"
    assert not (remote / "ikdata.json").exists(), "the manifest goes last: an interrupted push publishes nothing"

    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert _blobs(remote) == total
    check = subprocess.run([sys.executable, "-m", "ikdata", "validate", "--deep", str(remote)],
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr


def test_ctrl_c_during_replay_stops_says_how_to_resume_and_resume_finishes(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
    from cli_helpers import trusted_definitions, write_replayable

    root = write_replayable(tmp_path / "ds", rows=2000)
    defs = trusted_definitions(tmp_path / "defs")
    command = [sys.executable, "-m", "ikdata", "replay", str(root), "--definitions", str(defs), "--no-reuse"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    journal = root / "reports" / "replay.json.journal"
    while (not journal.exists() or journal.stat().st_size < 2000) and proc.poll() is None:
        time.sleep(0.005)
    assert proc.poll() is None, "replay finished before it could be interrupted; the test needs more rows"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "--resume" in err and "Traceback" not in err, err
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "2000 passed" in resumed.stdout, resumed.stdout[-500:]
