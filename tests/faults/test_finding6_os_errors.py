"""Finding 6 (issue 9): bad input and the OS saying no give one-line messages, never tracebacks.

The OS errors are real: the commands run in a child process under a file-size limit
(RLIMIT_FSIZE, with SIGXFSZ ignored, so a write past the limit fails with EFBIG as on a full
disk), or with a file where a folder is expected; permissions are tested only as a non-root
user (root writes through a 0555 folder). Each command must exit 1 with one ``error:`` line
naming the file, leave no temp file, and leave the dataset as it was.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fault_helpers import ROWS, make_validated, read_jsonl, tree_digest

from ikdata.cli import app

runner = CliRunner()
_IKDATA = [sys.executable, "-c", "from ikdata.cli import main; main()"]


def _limited(limit: int | None):
    def setup() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return setup


def run_cli(*args: str, limit: int | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("IKDATA_DEBUG", None)
    return subprocess.run(_IKDATA + [str(a) for a in args], capture_output=True, text=True, timeout=300,
                          preexec_fn=_limited(limit), env=env, cwd=cwd)


def assert_one_line_error(done: subprocess.CompletedProcess, *names: str) -> str:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


def no_temp_files(root: Path) -> None:
    left = [p for p in root.rglob("*") if p.name.startswith(".tmp-")] if root.exists() else []
    assert not left, left


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_validated(tmp_path / "src", rows=2)


# -- bad input: diff ----------------------------------------------------------------------------

def _edit_rows(root: Path, edit) -> None:
    rows = read_jsonl(root / ROWS)
    lines = [edit(r) if i == 0 else r for i, r in enumerate(rows)]
    (root / ROWS).write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize("case", ["row-array", "row-without-uuid", "receipt-string"])
def test_diff_on_malformed_records_is_a_message(src, tmp_path, case):
    other = make_validated(tmp_path / "other", rows=1, seed=3)
    if case == "row-array":
        _edit_rows(src, lambda r: [r])
    elif case == "row-without-uuid":
        _edit_rows(src, lambda r: {**r, "workload": {k: v for k, v in r["workload"].items() if k != "uuid"}})
    else:
        with open(src / "receipts.jsonl", "a") as stream:
            stream.write('"just a string"\n')
    for args in (["diff", str(src), str(other)], ["diff", str(other), str(src)]):
        done = runner.invoke(app, args)
        assert done.exit_code == 1, done.output
        assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)
        where = ROWS if case != "receipt-string" else "receipts.jsonl"
        assert where in done.output and "cannot compare" in done.output, done.output


# -- the OS says no ----------------------------------------------------------------------------

def test_manifest_under_a_file_size_limit(src):
    before = tree_digest(src)
    done = run_cli("manifest", src, limit=64)
    assert_one_line_error(done, "ikdata.json", "file-size limit")
    assert tree_digest(src) == before
    no_temp_files(src)


def test_init_under_a_file_size_limit_and_under_a_file(tmp_path):
    done = run_cli("init", tmp_path / "new", limit=16)
    assert_one_line_error(done, "ikdata.json", "file-size limit")
    no_temp_files(tmp_path / "new")
    (tmp_path / "plain-file").write_text("x")
    done = run_cli("init", tmp_path / "plain-file" / "ds")  # a usage error (exit 2) is right too
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert "plain-file" in done.stderr


def test_import_under_a_file_size_limit_writes_nothing(src, tmp_path):
    dst = make_validated(tmp_path / "dst", rows=1, seed=5, w_seed=5)
    before = tree_digest(dst)
    done = run_cli("import", src, dst, "--trust-reports", limit=300)
    assert_one_line_error(done, str(dst), "file-size limit")
    assert tree_digest(dst) == before
    no_temp_files(dst)


def test_import_into_a_file_is_a_message(src, tmp_path):
    (tmp_path / "plain-file").write_text("x")
    done = run_cli("import", src, tmp_path / "plain-file" / "dst")
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr


def test_clone_and_pull_under_a_file_size_limit(src, tmp_path):
    remote = tmp_path / "remote"
    assert run_cli("push", src, remote).returncode == 0
    done = run_cli("clone", remote, tmp_path / "copy", limit=100)
    assert_one_line_error(done, "file-size limit")
    assert not (tmp_path / "copy").exists() or not (tmp_path / "copy" / "ikdata.json").exists()
    into = make_validated(tmp_path / "into", rows=1, seed=8, w_seed=8)
    before = tree_digest(into)
    done = run_cli("pull", remote, into, limit=100)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "file-size limit" in done.stderr
    assert tree_digest(into) == before
    no_temp_files(into)


def test_repair_under_a_file_size_limit(src):
    with open(src / ROWS, "ab") as stream:
        stream.write(b'{"torn": ')
    before = tree_digest(src)
    done = run_cli("repair", src, limit=40)
    assert_one_line_error(done, "file-size limit")
    assert tree_digest(src) == before
    no_temp_files(src)


def test_gc_under_a_file_size_limit(src):
    before = tree_digest(src)
    done = run_cli("gc", src, "--grace", "0", limit=16)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    if done.returncode == 1:
        assert_one_line_error(done, "file-size limit")
    no_temp_files(src)
    assert tree_digest(src) == before  # nothing to collect: nothing changes


def test_replay_under_a_file_size_limit(src, tmp_path):
    (src / "reports" / "replay.json").unlink()
    from fault_helpers import recommit

    recommit(src)
    before = tree_digest(src)
    done = run_cli("replay", src, "--definitions", _definitions(tmp_path), limit=200)
    assert_one_line_error(done, "file-size limit")
    no_temp_files(src)
    assert tree_digest(src) == before


def test_capture_into_a_file_and_under_a_file_size_limit(tmp_path):
    (tmp_path / "plain-file").write_text("x")
    done = run_cli("capture", "--into", tmp_path / "plain-file" / "ds", "--", sys.executable, "-c", "pass")
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert "plain-file" in done.stderr
    from merge_helpers import gemm_definition_record, write_definition

    write_definition(tmp_path / "defs", gemm_definition_record())
    program = ("import torch\nA = torch.randn(2, 8)\nW = torch.randn(4, 8)\n"
               "for _ in range(3):\n    torch.nn.functional.linear(A, W)\n")
    done = run_cli("capture", "--into", tmp_path / "ds", "--definitions", tmp_path / "defs", "--",
                   sys.executable, "-c", program, limit=700)
    # the exit status of a capture that lost workloads is finding 8's; here: a message, no traceback
    assert "Traceback" not in done.stderr, done.stderr
    assert "file-size limit" in done.stderr, done.stderr
    no_temp_files(tmp_path / "ds")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a read-only (0555) folder; "
                    "the file-size-limit and not-a-folder cases above cover the same paths")
def test_permission_denied_is_a_message(src):
    os.chmod(src, 0o555)
    try:
        done = run_cli("manifest", src)
        assert_one_line_error(done, "permission denied")
    finally:
        os.chmod(src, 0o755)


def _definitions(tmp_path: Path) -> Path:
    from merge_helpers import gemm_definition_record, write_definition

    folder = tmp_path / "defs"
    write_definition(folder, gemm_definition_record())
    return folder


@pytest.mark.parametrize("name", [".", "workloads/", "workloads"])
def test_remote_files_naming_a_folder_is_a_message(src, tmp_path, name):
    remote = tmp_path / "remote"
    assert run_cli("push", src, remote).returncode == 0
    held = json.loads((remote / "ikdata.json").read_text())
    held["files"][name] = "0" * 64
    (remote / "ikdata.json").write_text(json.dumps(held))
    for args in (["clone", remote, tmp_path / "copy"], ["pull", remote, tmp_path / "pulled"]):
        done = run_cli(*args)
        assert done.returncode in (1, 2), (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert [line for line in done.stderr.splitlines() if line.startswith("error:")], done.stderr


# -- a real full disk and a real read-only file system, where the test may mount a tmpfs ------

@pytest.fixture
def small_fs(tmp_path: Path):
    """A 1 MiB tmpfs under tmp_path (skipped where mounting is not allowed); unmounted afterwards."""
    import shutil

    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    point = tmp_path / "small"
    point.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN); the file-size-limit tests "
                    "cover the same paths")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _fill(point: Path) -> None:
    """Take every free block of the file system."""
    with open(point / "filler", "wb") as stream:
        try:
            while True:
                stream.write(b"\0" * 65536)
                stream.flush()
        except OSError:
            pass


def test_disk_full_on_import_and_manifest(src, small_fs):
    import shutil

    dst = small_fs / "dst"
    shutil.copytree(make_validated(src.parent / "seed-dst", rows=1, seed=21, w_seed=21), dst)
    _fill(small_fs)
    before = tree_digest(dst)
    done = run_cli("import", src, dst, "--trust-reports")
    assert_one_line_error(done, "disk is full (ENOSPC)")
    assert tree_digest(dst) == before
    no_temp_files(dst)
    (dst / "workloads" / "gemm" / "extra.jsonl").touch()  # an empty file needs no block
    done = run_cli("manifest", dst)
    assert_one_line_error(done, "ikdata.json", "disk is full (ENOSPC)")
    no_temp_files(dst)


def test_read_only_file_system(src, small_fs):
    import shutil

    root = small_fs / "ds"
    shutil.copytree(src, root)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    before = tree_digest(root)
    for args in (["manifest", root], ["repair", root], ["gc", root, "--grace", "0"],
                 ["import", make_validated(src.parent / "other", rows=1, seed=4, w_seed=4), root, "--trust-reports"]):
        done = run_cli(*args)
        if done.returncode == 0:  # nothing to write (repair or gc with nothing to do) is fine
            continue
        assert_one_line_error(done, "read-only (EROFS)")
    assert tree_digest(root) == before


def test_a_header_of_a_hundred_thousand_brackets_is_a_message_in_validate_and_import(src, tmp_path):
    from fault_helpers import blob_of, join, recommit, rewrite

    rewrite(blob_of(src), lambda header, data: join("[" * 100_000, data))
    recommit(src)
    for args in (["validate", str(src)], ["validate", "--deep", str(src)],
                 ["import", str(src), str(tmp_path / "dst"), "--trust-reports"]):
        done = runner.invoke(app, args)
        assert done.exit_code == 1, (args, done.output)
        assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)
        assert "nests arrays and objects" in done.output, done.output
