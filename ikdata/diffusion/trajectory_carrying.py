"""Trajectories and the model records they name, riding with their workloads into an import.

A trajectory ties the denoiser and scheduler-step workloads of one pipeline call; without it those
workloads cannot be judged (a denoiser step is judged against its trajectory's noise floor). So an
import carries every trajectory of SRC whose workloads all get in (added now, or already in DST),
with the model record it names and every blob either references. A trajectory with a workload left
out stays out too, and is listed. Trajectories are content-named (their id), model records by their
digest: one DST already holds is not written again; one with the same name and other content is a
conflict, never an overwrite.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from ikdata.core.paths import text_refusal
from ikdata.core.problems import Problem
from ikdata.core.store import blob_path
from ikdata.diffusion import trajectories as traj_mod
from ikdata.diffusion.models import model_relpath

_HEX = re.compile(r"[0-9a-f]{64}")


def _workload_uuids(record: dict) -> list[str]:
    found = []
    for step in record.get("steps") or []:
        for uuids in ((step.get("workloads") or {}) if isinstance(step, dict) else {}).values():
            found += [u for u in uuids or [] if isinstance(u, str)]
    return found


def carry(src: Path, dst: Path, admitted: set[str], carried: Any) -> None:
    """Add to ``carried`` (:class:`ikdata.importing.carried.Carried`) the trajectories (and their models) of SRC
    to carry into DST, given the workload uuids that will be in DST after the import (``admitted``)."""
    found = traj_mod.read_all(src)
    carried.problems += found.problems
    held = {t.id for t in traj_mod.read_all(dst).trajectories} if (dst / traj_mod.TRAJECTORIES_DIR).is_dir() else set()
    for traj in found.trajectories:
        if traj.id in held:
            continue
        missing = [u for u in _workload_uuids(traj.record) if u not in admitted]
        if missing:
            carried.left_out.append((traj.id, f"trajectory:{traj.record['pipeline']['class']}",
                                     f"{len(missing)} of its workloads are left out (e.g. {missing[0]})"))
            continue
        target = traj_mod.trajectory_relpath(traj.record["pipeline"]["class"])
        if text_refusal(target) is not None or target.count("/") != 1:
            carried.problems.append(Problem(traj.source, "/pipeline/class names a path, not a class; expected a "
                                            "Python class name", traj.line, "/pipeline/class"))
            continue
        carried.appends.setdefault(target, []).append(traj.record)
        carried.added.append(traj.id)
        carried.blob_paths |= {path for _, path in traj.tensor_paths()}
        model = traj.record.get("model") or {}
        if isinstance(model.get("digest"), str) and _HEX.fullmatch(model["digest"]):
            _carry_model(src, dst, model_relpath(model["digest"]), carried)


def _carry_model(src: Path, dst: Path, relative: str, carried: Any) -> None:
    if relative in carried.files or not (src / relative).is_file():
        return  # a model recorded by repo id only, or named twice
    data = (src / relative).read_bytes()
    if (dst / relative).is_file():
        if orjson.loads((dst / relative).read_bytes()) != orjson.loads(data):
            carried.conflicts.append(f"model record {relative}: SRC and DST hold different records under one digest")
        return
    carried.files[relative] = data
    record: Any = orjson.loads(data)
    if record.get("stored"):
        carried.blob_paths |= {blob_path(t["digest"]) for t in record.get("tensors", {}).values()}


__all__ = ["carry"]
