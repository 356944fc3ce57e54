"""Files are created as the umask allows (issue 11 item 6), atomic writes kept.

Every file a dataset gets (manifest, blobs, rows, receipts, reports, rewritten JSONL, pulled
blobs, imported blobs) is 0644 under umask 022 and 0600 under umask 077. Each umask runs in
its own process, since the store reads the umask once.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_cli, trusted_definitions

WRITE = """
import sys
from pathlib import Path
sys.path[:0] = [{tests!r}, {cli_tests!r}]
from cli_helpers import write_replayable
root = Path(sys.argv[1])
write_replayable(root, rows=3)
with open(root / "workloads/gemm/gemm_test_n4_k8.jsonl", "ab") as stream:
    stream.write(b'{{"torn')
"""


def _modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): stat.S_IMODE(p.lstat().st_mode)
            for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600)])
def test_every_dataset_file_follows_the_umask(tmp_path, umask, expected):
    tests = Path(__file__).resolve().parents[1]
    script = WRITE.format(tests=str(tests), cli_tests=str(tests / "cli"))
    root, dst, remote, cloned = (tmp_path / n for n in ("ds", "dst", "remote", "cloned"))
    definitions = trusted_definitions(tmp_path / "defs")
    written = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True,
                             preexec_fn=lambda: os.umask(umask))
    assert written.returncode == 0, written.stderr
    steps = [("repair", str(root)),  # rewrites the rows file, sets the torn line aside, rewrites the manifest
             ("replay", str(root), "--definitions", str(definitions), "--no-reuse"),  # the report
             ("manifest", str(root)),
             ("import", str(root), str(dst), "--definitions", str(definitions)),  # blobs, rows, journal
             ("push", str(dst), str(remote)),
             ("clone", str(remote), str(cloned))]  # blobs fetched through a temp file
    for args in steps:
        done = run_cli(*args, umask=umask)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    for folder in (root, dst, remote, cloned):
        modes = _modes(folder)
        assert modes, folder
        wrong = {path: oct(mode) for path, mode in modes.items() if mode != expected}
        assert not wrong, (folder.name, oct(expected), wrong)
    kinds = {p.split("/")[0] for p in _modes(root)}
    assert {"ikdata.json", "blob", "workloads", "reports", "receipts.jsonl"} <= kinds
    assert (root / "workloads/gemm/gemm_test_n4_k8.jsonl.rejected").is_file()


def test_write_atomic_gives_the_umask_mode_and_leaves_no_temp_file(tmp_path):
    code = ("import os, sys; from pathlib import Path; from ikdata.core.store import write_atomic;"
            "p = Path(sys.argv[1]); write_atomic(p, [b'x']); write_atomic(p, [b'y']);"
            "print(oct(os.stat(p).st_mode & 0o777), sorted(os.listdir(p.parent)))")
    for umask, mode in ((0o022, "0o644"), (0o077, "0o600"), (0o002, "0o664")):
        target = tmp_path / f"u{umask:o}" / "file.json"
        done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True,
                              preexec_fn=lambda m=umask: os.umask(m))
        assert done.stdout.split(None, 1) == [mode, "['file.json']\n"], done.stderr
