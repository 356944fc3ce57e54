"""Fixtures of the round-three diffusion tests: tiny real pipelines, one torch thread."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "diffusion_pipelines"))

pytest.importorskip("diffusers")

from foundation_helpers import one_torch_thread  # noqa: E402,F401  (autouse: one torch thread)
