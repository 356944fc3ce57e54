"""Fixtures of the new-user tests (issue 27): one small dataset shared by the module, and a folder that is not one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """A committed ikdata dataset of 3 GEMM workloads with receipts (tests must not write into it)."""
    from cli_helpers import write_replayable

    return write_replayable(tmp_path_factory.mktemp("ux") / "ds")


@pytest.fixture
def not_a_dataset(tmp_path) -> Path:
    """A folder holding only notes.txt."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a dataset\n")
    return folder
