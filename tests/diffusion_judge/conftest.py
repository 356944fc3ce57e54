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


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def reference_capture(tmp_path_factory) -> Path:
    """The reference pipeline itself, captured (5 steps, video and audio)."""
    return capture(tmp_path_factory.mktemp("reference") / "ds")
