"""Fixtures of the diffusion judging tests: tiny LTX-2 captures (reference and perturbed engines), replayed.

The tiny pipelines are the capture tests' (tests/diffusion/tiny.py); captures run in this process on
one CPU thread. The reference capture is made once per session; each perturbed engine once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "diffusion"))
sys.path.insert(0, str(HERE))

from judge_helpers import capture  # noqa: E402

pytest.importorskip("diffusers")
pytest.importorskip("av")

from foundation_helpers import one_torch_thread  # noqa: E402,F401  (autouse: one torch thread)




@pytest.fixture(scope="session")
def reference_capture(tmp_path_factory) -> Path:
    """The reference pipeline itself, captured (5 steps, video and audio)."""
    return capture(tmp_path_factory.mktemp("reference") / "ds")
