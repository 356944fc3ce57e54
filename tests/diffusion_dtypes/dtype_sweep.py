"""One cell of the dtype sweep: a tiny pipeline of :mod:`dtype_pipes` captured in one dtype, honest or wrong, replayed.

Kinds: ``honest`` (with guidance), ``guided`` (attention x1.01 at step 1, the guidance dropped at step 2) and
``unguided`` (guidance scale 1, no CFG; attention x1.01 at step 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dtype_pipes
import pipeline_judging as pj
import pipes_tiny

STEPS = 3
KINDS = ("honest", "guided", "unguided")


def run(tmp: Path, family: str, dtype: str, kind: str) -> tuple[dict, Path]:
    """(replay report, dataset) of one cell."""
    name = f"{family}-{dtype}-{kind}"
    pipes_tiny.BUILDERS[name] = lambda **kw: dtype_pipes.build(family, dtype, guidance=kind != "unguided", **kw)
    try:
        perturb = None
        if kind == "guided":
            perturb = lambda pipe: pj.perturbed(pipe, attention=1, guidance=2)  # noqa: E731
        elif kind == "unguided":
            perturb = lambda pipe: pj.perturbed(pipe, attention=1)  # noqa: E731
        root = pj.capture(tmp / name, name, steps=STEPS, perturb=perturb)
    finally:
        del pipes_tiny.BUILDERS[name]
    return pj.replay(root, tmp / f"{name}.json"), root


def step(report: dict, index: int) -> dict[str, Any]:
    """The trajectory's measurements of step ``index`` (one stream)."""
    [found] = [s for s in pj.trajectory_case(report)["trajectory"]["steps"] if s["index"] == index]
    return found
