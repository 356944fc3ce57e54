"""Fixtures of the diffusion judging tests: tiny LTX-2 captures (reference and perturbed engines), replayed.

The tiny pipelines are the capture tests' (tests/diffusion/tiny.py); captures run in this process on
one CPU thread. The reference capture is made once per session; each perturbed engine once.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "diffusion"))
sys.path.insert(0, str(HERE))

pytest.importorskip("diffusers")
pytest.importorskip("av")

STEPS = 5


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def capture(root: Path, *, perturb: Callable[[Any], Any] | None = None, seed: int = 7, steps: int = STEPS) -> Path:
    """Capture one call of the tiny LTX-2 pipeline into ``root`` (committed), with ``perturb(pipe)`` applied
    first (a context manager or None); returns ``root``."""
    import tiny
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.core.writer import DatasetWriter

    pipe, kwargs = tiny.ltx2(seed=seed, steps=steps)
    boot.install(CaptureConfig(into=str(root), strict=True, only=("rmsnorm_f32_h99991",)))
    try:
        with (perturb(pipe) if perturb else contextlib.nullcontext()):
            video, audio = pipe(**kwargs)
    finally:
        boot.uninstall()
    DatasetWriter(root).commit()
    return root


def replay(root: Path, tmp: Path, **settings: Any) -> dict:
    """Replay ``root`` (reuse off) and return its one trajectory case."""
    import ikdata
    from ikdata.replay.diffusion import Settings
    from ikdata.replay.runner import replay as run

    result = run(ikdata.open(root), reuse=False, report_path=tmp / f"replay-{len(list(tmp.glob('replay-*')))}.json",
                 diffusion=Settings(**settings))
    [case] = [c for c in result.report["cases"] if c["definition"].startswith("trajectory:")]
    return case


@pytest.fixture(scope="session")
def reference_capture(tmp_path_factory) -> Path:
    """The reference pipeline itself, captured (5 steps, video and audio)."""
    return capture(tmp_path_factory.mktemp("reference") / "ds")
