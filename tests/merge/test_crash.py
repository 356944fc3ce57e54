"""SIGKILL at named points of an import (real subprocesses), then a rerun that completes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ikdata.core.faults import CRASH_ENV
from ikdata.core.journal import STAGING
from merge_helpers import import_trusting_reports as import_dataset  # hand-written reports: --trust-reports
from merge_helpers import capture, read_jsonl, rows_by_uuid, tree_digest, validated  # noqa: F401

BEFORE_COMMIT = ["blobs-staged", "files-staged"]
AFTER_COMMIT = ["journal-written", "rolled-partly", "manifest-written"]


def run_import(src: Path, dst: Path, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    if crash_at:
        env[CRASH_ENV] = crash_at
    code = "import sys; from ikdata.importing.apply import import_dataset; import_dataset(sys.argv[1], sys.argv[2], trust_reports=True)"
    return subprocess.run([sys.executable, "-c", code, str(src), str(dst)], env=env, capture_output=True, text=True,
                          timeout=120)


def tracked(root: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(root).items() if not k.startswith(STAGING)}


def validate_deep(root: Path) -> list[str]:
    from ikdata import open as open_ds
    from ikdata import validate

    return [str(p) for p in validate(open_ds(root), deep=True).problems]


@pytest.fixture
def pair(validated, tmp_path):
    """(SRC, DST, DST's tracked files before, the rows a clean import gives)."""
    base = validated("base", rows=2, seed=1, host="h0")
    src = validated("src", rows=3, seed=2, host="h1")
    reference = tmp_path / "reference"
    import_dataset(base, reference)
    import_dataset(src, reference)
    dst = tmp_path / "dst"
    import_dataset(base, dst)
    return src, dst, tracked(dst), rows_by_uuid(reference)


@pytest.mark.parametrize("point", BEFORE_COMMIT + AFTER_COMMIT)
def test_sigkill_then_rerun_completes(pair, point):
    src, dst, before, expected_rows = pair
    killed = run_import(src, dst, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (dst / STAGING).exists()
    if point in BEFORE_COMMIT:
        # Not committed: DST's files are exactly as they were, and it validates clean.
        assert tracked(dst) == before
        assert validate_deep(dst) == []
    rerun = run_import(src, dst)
    assert rerun.returncode == 0, rerun.stderr
    assert not (dst / STAGING).exists()
    assert validate_deep(dst) == []
    assert rows_by_uuid(dst) == expected_rows
    receipts = read_jsonl(dst / "receipts.jsonl")
    assert len(receipts) == len({r["uuid"] for r in receipts}) == 5
    from ikdata.core.manifest import current_id, read

    parents = [p["id"] for p in read(dst)["parents"]]
    assert parents.count(current_id(src)) == 1


def test_roll_forward_keeps_lines_a_capture_appended_after_the_kill(pair, tmp_path):
    src, dst, _, expected_rows = pair
    assert run_import(src, dst, "journal-written").returncode == -signal.SIGKILL
    capture(dst, rows=1, seed=50, host="late", commit=False)  # a capture writes before anyone recovers
    late = set(rows_by_uuid(dst)) - set(expected_rows)
    assert len(late) == 1
    from ikdata.importing.apply import recover

    assert recover(dst) == "rolled-forward"
    assert set(rows_by_uuid(dst)) == set(expected_rows) | late
    assert validate_deep(dst) == []


def test_uncommitted_staging_is_discarded(pair):
    src, dst, before, _ = pair
    run_import(src, dst, "files-staged")
    from ikdata.importing.apply import recover

    assert recover(dst) == "discarded"
    assert tracked(dst) == before and not (dst / STAGING).exists()
    assert np is not None


def test_ikdata_repair_finishes_a_killed_import_and_validate_is_then_clean(pair):
    from typer.testing import CliRunner

    from ikdata.cli import app

    src, dst, _, expected_rows = pair
    assert run_import(src, dst, "journal-written").returncode == -signal.SIGKILL
    assert rows_by_uuid(dst) != expected_rows  # committed in the journal, not yet in the files
    result = CliRunner().invoke(app, ["repair", str(dst)])
    assert result.exit_code == 0, result.output
    assert "finished an import that was killed after its commit point" in result.output
    assert not (dst / STAGING).exists()
    assert rows_by_uuid(dst) == expected_rows
    assert validate_deep(dst) == []
