"""Helpers of the diffusion judging tests: capture the tiny LTX-2 pipeline (optionally perturbed), replay it.

A module of its own (not conftest) so that test modules import it by a name no other folder uses.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent.parent / "diffusion"))

STEPS = 5


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
    from ikdata.diffusion.settings import Settings
    from ikdata.replay.runner import replay as run

    result = run(ikdata.open(root), reuse=False, report_path=tmp / f"replay-{len(list(tmp.glob('replay-*')))}.json",
                 diffusion=Settings(**settings))
    [case] = [c for c in result.report["cases"] if c["definition"].startswith("trajectory:")]
    return case
