"""Round four, finding 7: spill folders live under one private per-user folder, are removed on normal
exit, and those of a killed process are swept by the next one that spills.

A validate SIGKILLed while its state was on disk used to leave ``$TMPDIR/ikdata-spill-*`` behind forever.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from typer.testing import CliRunner

HOLDER = textwrap.dedent("""
    import sys, time
    from ikdata.core.spill import RecordList, UuidMap
    rows = UuidMap(limit=1)
    rows["a"], rows["b"] = 1, 2
    uses = RecordList(2, limit=1)
    uses.append(1, 2)
    uses.append(3, 4)
    assert rows.on_disk and uses.on_disk
    print("spilled", flush=True)
    if sys.argv[1] == "exit":  # a normal exit that never closed them
        sys.exit(0)
    time.sleep(600)
""")


def _leftovers(tmp: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if "ikdata-spill" in str(p.relative_to(tmp)))


def _hold(tmp: Path, how: str) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp)}
    child = subprocess.Popen([sys.executable, "-c", HOLDER, how], env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "spilled"
    return child


def test_a_killed_spiller_is_swept_by_the_next_one(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    child = _hold(tmp, "sleep")
    try:
        assert _leftovers(tmp), "the child spilled nowhere under TMPDIR"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert _leftovers(tmp)  # what the killed process left
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches TMPDIR on first use
    from ikdata.core.spill import UuidMap

    with UuidMap(limit=1) as mine:
        mine["x"], mine["y"] = 1, 2
        assert mine.on_disk
        folders = [p for p in tmp.rglob("*") if p.is_dir() and p.parent != tmp]
        assert len(folders) == 1, f"the killed process's spill folder was not swept: {_leftovers(tmp)}"
    assert _leftovers(tmp) == []


def test_a_normal_exit_removes_what_was_not_closed(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    child = _hold(tmp, "exit")
    assert child.wait(timeout=60) == 0
    assert _leftovers(tmp) == []


def test_the_per_user_folder_is_private(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    child = _hold(tmp, "sleep")
    try:
        [user] = [p for p in tmp.iterdir() if p.name.startswith("ikdata-spill")]
        info = os.lstat(user)
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
        assert stat.S_IMODE(info.st_mode) & 0o077 == 0, oct(info.st_mode)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def test_a_per_user_folder_someone_else_planted_is_not_used(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    from ikdata.core import spill

    (tmp / spill.user_folder_name()).symlink_to(elsewhere)  # a link planted in a shared TMPDIR
    child = _hold(tmp, "exit")
    assert child.wait(timeout=60) == 0
    assert list(elsewhere.iterdir()) == []


def test_validate_with_spilling_leaves_nothing(tmp_path, monkeypatch, make_ikdata_dataset):
    root = make_ikdata_dataset(6)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "IKDATA_SPILL_ROWS": "1"}
    ikdata = Path(sys.executable).with_name("ikdata")
    done = subprocess.run([str(ikdata), "validate", str(root)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _leftovers(tmp) == []
