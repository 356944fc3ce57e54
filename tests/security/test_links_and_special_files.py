"""Findings 8 and 10 of issue 21: record files and blobs are regular files inside the dataset.

8. A received dataset with ``reports/notes.json`` linked to a file outside it: ``ikdata manifest``
   refuses (naming the link) instead of listing the outside file's bytes, ``ikdata push`` publishes
   none of them, and ``validate`` names the linked report as it names a linked definition.
10. A FIFO where a blob or a row file should be: every command that read it blocked forever.
   Each command now answers (a located problem, or the FIFO left alone) well within a timeout;
   the commands run in a child process, so a regression fails here instead of hanging the suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ikdata
from ikdata.ops.validate import validate
from merge_helpers import GEMM_NAME, capture, read_jsonl, replay_by_hand

SECRET = b'{"aws_secret_access_key": "do-not-publish-me"}\n'
_IKDATA = [sys.executable, "-c", "from ikdata.cli import main; main()"]
TIMEOUT = 60  # seconds: each command here finishes in about one; a blocked read never does
ROWS = f"workloads/gemm/{GEMM_NAME}.jsonl"


def make_validated(root: Path, rows: int = 2) -> Path:
    """A captured dataset with a passing replay report, committed."""
    from ikdata.core.writer import DatasetWriter

    capture(root, rows=rows)
    replay_by_hand(root)
    DatasetWriter(root).commit()
    return root


def run_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a child process; a hang is a failure (TimeoutExpired), never a hung suite."""
    env = dict(os.environ, IKDATA_CACHE_DIR=str(cwd / "cache"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("IKDATA_DEBUG", None)
    try:
        return subprocess.run(_IKDATA + [str(a) for a in args], capture_output=True, text=True, timeout=TIMEOUT,
                              env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ikdata {' '.join(map(str, args))} blocked for {TIMEOUT} s (a read of a FIFO?)")


def no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr


def remote_bytes(remote: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(remote.rglob("*")) if p.is_file()) if remote.exists() else b""


# -- finding 8: a link in a received dataset ----------------------------------------------------------


@pytest.fixture
def received(tmp_path: Path) -> Path:
    """A validated dataset whose reports/notes.json is a link to a secret file outside it."""
    root = make_validated(tmp_path / "received", rows=2)
    secret = tmp_path / "home" / "credentials.json"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    (root / "reports" / "notes.json").symlink_to(secret)
    return root


def _list_in_manifest(root: Path, relative: str, data: bytes) -> None:
    """The manifest the sender shipped: it lists ``relative`` with the digest of ``data``."""
    from ikdata.core.digest import canonical_json

    manifest = json.loads((root / "ikdata.json").read_text())
    manifest["files"][relative] = hashlib.sha256(data).hexdigest()
    manifest["files"] = dict(sorted(manifest["files"].items()))
    (root / "ikdata.json").write_bytes(canonical_json(manifest) + b"\n")


def test_manifest_refuses_a_report_linked_outside_and_lists_nothing_of_it(received, tmp_path):
    before = (received / "ikdata.json").read_bytes()
    done = run_cli("manifest", received, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "reports/notes.json" in done.stderr and "link that leaves the dataset" in done.stderr, done.stderr
    assert (received / "ikdata.json").read_bytes() == before  # nothing written
    assert hashlib.sha256(SECRET).hexdigest().encode() not in (received / "ikdata.json").read_bytes()


def test_manifest_then_push_publishes_no_byte_of_the_linked_file(received, tmp_path):
    remote = tmp_path / "remote"
    run_cli("manifest", received, cwd=tmp_path)
    done = run_cli("push", received, remote, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode != 0, done.stdout
    assert b"do-not-publish-me" not in remote_bytes(remote)


def test_push_of_a_manifest_that_lists_the_link_is_refused(received, tmp_path):
    _list_in_manifest(received, "reports/notes.json", SECRET)  # as a sender (or an older ikdata) wrote it
    remote = tmp_path / "remote"
    done = run_cli("push", received, remote, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "reports/notes.json" in done.stderr and "link that leaves the dataset" in done.stderr, done.stderr
    assert b"do-not-publish-me" not in remote_bytes(remote)
    assert not (remote / "ikdata.json").exists()


def test_validate_names_a_linked_report_as_it_names_a_linked_definition(received):
    report = validate(ikdata.open(received))
    linked = [p for p in report.problems if p.path == "reports/notes.json"]
    assert linked and all(p.code == "unsafe-path" for p in linked), report.problems
    assert "link that leaves the dataset" in linked[0].message
    assert len(linked) == 1  # said once, not again by the manifest check
    assert not any("malformed JSON" in p.message for p in report.problems)  # never read


def test_validate_names_a_reports_folder_linked_outside(tmp_path):
    import shutil

    root = make_validated(tmp_path / "ds", rows=1)
    outside = tmp_path / "elsewhere"
    shutil.move(root / "reports", outside)
    (root / "reports").symlink_to(outside)
    report = validate(ikdata.open(root))
    assert any(p.path == "reports" and p.code == "unsafe-path" for p in report.problems), report.problems
    done = run_cli("manifest", root, cwd=tmp_path)
    assert done.returncode == 1 and "reports" in done.stderr, done.stderr


def test_a_report_linked_inside_the_dataset_is_listed(tmp_path):
    root = make_validated(tmp_path / "ds", rows=1)
    (root / "reports" / "copy.json").symlink_to(root / "reports" / "replay.json")
    done = run_cli("manifest", root, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "reports/copy.json" in json.loads((root / "ikdata.json").read_text())["files"]


# -- finding 10: a FIFO where a blob or a row file should be --------------------------------------------


def _uuid(root: Path) -> str:
    return read_jsonl(root / ROWS)[0]["workload"]["uuid"]


@pytest.fixture
def blob_fifo(tmp_path: Path) -> Path:
    """A validated dataset whose first row's input blob is a FIFO, in a manifest that lists it (as
    the manifest of a dataset received in that state, or written by an older ikdata, does)."""
    from ikdata.core.digest import canonical_json

    root = make_validated(tmp_path / "ds", rows=2)
    blob = root / read_jsonl(root / ROWS)[0]["workload"]["inputs"]["A"]["path"]
    size = blob.stat().st_size
    blob.unlink()
    os.mkfifo(blob)
    manifest = json.loads((root / "ikdata.json").read_text())
    manifest["blobs"]["bytes"] -= size  # the blob set a directory scan that took the FIFO for a blob gives
    (root / "ikdata.json").write_bytes(canonical_json(manifest) + b"\n")
    return root


@pytest.fixture
def row_fifo(tmp_path: Path) -> Path:
    """A validated dataset (its index built) whose workload rows file is then a FIFO."""
    root = make_validated(tmp_path / "ds", rows=2)
    run_cli("index", root, cwd=tmp_path)
    (tmp_path / "uuid").write_text(_uuid(root))  # read now: the test itself must never open the FIFO
    (root / ROWS).unlink()
    os.mkfifo(root / ROWS)
    return root


@pytest.mark.parametrize("args", [["validate"], ["validate", "--deep"]], ids=["validate", "validate-deep"])
def test_validate_names_a_fifo_blob(blob_fifo, tmp_path, args):
    done = run_cli(*args, blob_fifo, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1
    assert "FIFO" in done.stdout, done.stdout


def test_push_refuses_a_fifo_blob(blob_fifo, tmp_path):
    done = run_cli("push", blob_fifo, tmp_path / "remote", cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1 and "FIFO" in done.stderr, done.stderr
    assert not (tmp_path / "remote" / "ikdata.json").exists()


def test_import_refuses_a_fifo_blob(blob_fifo, tmp_path):
    done = run_cli("import", blob_fifo, tmp_path / "dst", cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1 and "FIFO" in done.stderr, done.stderr


def test_pack_leaves_a_fifo_blob_alone(blob_fifo, tmp_path):
    fifo = blob_fifo / read_jsonl(blob_fifo / ROWS)[0]["workload"]["inputs"]["A"]["path"]
    done = run_cli("pack", blob_fifo, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode in (0, 1), done.stderr
    assert fifo.is_fifo()


def test_manifest_refuses_a_fifo_blob(blob_fifo, tmp_path):
    done = run_cli("manifest", blob_fifo, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1 and "FIFO" in done.stderr, done.stderr


def test_replay_errs_the_case_of_a_fifo_blob(blob_fifo, tmp_path):
    from security_helpers import trusted_folder

    done = run_cli("replay", blob_fifo, "--definitions", trusted_folder(tmp_path), cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1
    assert "FIFO" in done.stdout + done.stderr


@pytest.mark.parametrize("command", ["show", "lineage"])
def test_show_and_lineage_answer_with_a_fifo_blob(blob_fifo, tmp_path, command):
    done = run_cli(command, blob_fifo, _uuid(blob_fifo), cwd=tmp_path)
    no_traceback(done)
    assert done.returncode in (0, 1), done.stderr


@pytest.mark.parametrize("args", [["validate"], ["validate", "--deep"]], ids=["validate", "validate-deep"])
def test_validate_names_a_fifo_row_file(row_fifo, tmp_path, args):
    done = run_cli(*args, row_fifo, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1
    assert ROWS in done.stdout and "FIFO" in done.stdout, done.stdout


@pytest.mark.parametrize("command", ["show", "lineage"])
def test_show_and_lineage_answer_with_a_fifo_row_file(row_fifo, tmp_path, command):
    done = run_cli(command, row_fifo, (tmp_path / "uuid").read_text(), cwd=tmp_path)
    no_traceback(done)
    assert done.returncode in (0, 1), done.stderr


@pytest.mark.parametrize("command", ["push", "import", "manifest"])
def test_writers_refuse_a_fifo_row_file(row_fifo, tmp_path, command):
    args = {"push": [tmp_path / "remote"], "import": [tmp_path / "dst"], "manifest": []}[command]
    done = run_cli(command, row_fifo, *args, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "FIFO" in done.stderr and ROWS in done.stderr, done.stderr


def test_pack_answers_with_a_fifo_row_file(row_fifo, tmp_path):
    done = run_cli("pack", row_fifo, cwd=tmp_path)
    no_traceback(done)
    assert done.returncode in (0, 1), done.stderr


def test_a_socket_where_a_receipt_file_should_be_is_named(tmp_path):
    root = make_validated(tmp_path / "ds", rows=1)
    (root / "receipts.jsonl").unlink()
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(root / "receipts.jsonl"))
        report = validate(ikdata.open(root))
        assert any(p.path == "receipts.jsonl" and "socket" in p.message for p in report.problems), report.problems
        done = run_cli("manifest", root, cwd=tmp_path)
        assert done.returncode == 1 and "socket" in done.stderr, done.stderr
    finally:
        server.close()


def test_the_open_helpers_refuse_a_fifo_before_reading(tmp_path):
    """The readers of rows and blobs (in a child process, so a regression cannot hang the suite):
    a FIFO is an error naming it, at once."""
    fifo = tmp_path / "x.safetensors"
    os.mkfifo(fifo)
    code = ("import sys; from ikdata.core import jsonl; from ikdata.core.store import read_entries, rehash_file\n"
            f"p = {str(fifo)!r}\n"
            "print(rehash_file(p).error)\n"
            "for f in (jsonl.read, read_entries):\n"
            "    try: f(p)\n"
            "    except OSError as exc: print(type(exc).__name__, exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "FIFO" in lines[0]
    assert len(lines) == 3
    assert all(line.startswith("FileSystemError") and "FIFO" in line and str(fifo) in line for line in lines[1:])
