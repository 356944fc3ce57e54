"""Fixtures of the diffusion tests: tiny pipelines on one CPU thread, and capture in this process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

pytest.importorskip("diffusers")

from foundation_helpers import one_torch_thread  # noqa: E402,F401  (autouse: one torch thread)




@pytest.fixture
def capture_into(tmp_path: Path):
    """Factory: capture in this process into ``tmp_path/ds`` (operator capture narrowed to nothing that
    matches, so only trajectories and their step workloads are written); uninstalled after the test."""
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    def make(**options: Any):
        options.setdefault("into", str(tmp_path / "ds"))
        options.setdefault("strict", True)
        options.setdefault("only", ("rmsnorm_f32_h99991",))
        return boot.install(CaptureConfig(**options))

    yield make
    boot.uninstall()
