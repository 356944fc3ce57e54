"""Fixtures of the capture tests: an in-process Capturer, and running scripts with capture on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def capture_into(tmp_path: Path):
    """Factory: install capture in this process (strict unless told otherwise); uninstalled after the test."""
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig

    def make(**options: Any):
        options.setdefault("into", str(tmp_path / "ds"))
        options.setdefault("strict", True)
        for key in ("definitions", "only", "adapters"):
            if key in options:
                options[key] = tuple(options[key])
        return boot.install(CaptureConfig(**options))

    yield make
    boot.uninstall()
