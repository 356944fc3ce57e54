"""Records that ride with workloads into an import: diffusion trajectories and the model records they name.

A trajectory ties the denoiser and scheduler-step workloads of one pipeline call; without it those
workloads cannot be judged (a denoiser step is judged against its trajectory's noise floor). So an
import carries every trajectory of SRC whose workloads all get in (added now, or already in DST),
with the model record it names and every blob either references. A trajectory with a workload left
out stays out too, and is listed. Trajectories are content-named (their id), model records by their
digest: one DST already holds is not written again; one with the same name and other content is a
conflict, never an overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re

import orjson

from ikdata.diffusion import trajectories as traj_mod
from ikdata.diffusion.models import model_relpath
from ikdata.core.paths import text_refusal
from ikdata.core.problems import Problem
from ikdata.core.store import blob_path


_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass
class Carried:
    """What an import brings besides workloads.

    Attributes:
        appends: DST JSONL file -> records to append (trajectories).
        files: DST path -> bytes of a file to create (model records).
        blob_paths: SRC-relative blob paths those records reference.
        added: trajectory ids carried; left_out: (trajectory id, its case's definition, why) of those that stay out.
        conflicts: a DST record with the same name and other content.
        problems: SRC trajectory lines that cannot be read (torn, malformed, off-schema).
    """

    appends: dict[str, list[dict]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    blob_paths: set[str] = field(default_factory=set)
    added: list[str] = field(default_factory=list)
    left_out: list[tuple[str, str, str]] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _workload_uuids(record: dict) -> list[str]:
    found = []
    for step in record.get("steps") or []:
        for uuids in ((step.get("workloads") or {}) if isinstance(step, dict) else {}).values():
            found += [u for u in uuids or [] if isinstance(u, str)]
    return found


def plan_carried(src: Path, dst: Path, admitted: set[str]) -> Carried:
    """The trajectories (and their models) of SRC to carry into DST, given the workload uuids that
    will be in DST after the import (``admitted``: added now or already there)."""
    carried = Carried()
    found = traj_mod.read_all(src)
    carried.problems = list(found.problems)
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
    if admitted:
        _carry_census(src, dst, carried)
    return carried


def _carry_census(src: Path, dst: Path, carried: Carried) -> None:
    """Capture's census files of SRC (``census/<run>.jsonl``: what each process ran and why calls were not
    recorded) that DST lacks, schema-checked; one DST holds with other content is a conflict."""
    from ikdata.core import jsonl, schema

    folder = src / "census"
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*.jsonl")):
        relative = path.relative_to(src).as_posix()
        if path.is_symlink() or text_refusal(relative) is not None or relative.count("/") != 1:
            carried.problems.append(Problem(relative, "not a census file; expected census/<run>.jsonl"))
            continue
        content = jsonl.read(path, display=relative, dataset=src)
        found = list(content.problems)
        for line, record in content.records:
            found += schema.check("census", record, path=relative, line=line)
        if found:
            carried.problems += found
            continue
        data = path.read_bytes()
        if (dst / relative).is_file():
            if (dst / relative).read_bytes() != data:
                carried.conflicts.append(f"census {relative}: SRC and DST hold different records under one run")
            continue
        carried.files[relative] = data


def _carry_model(src: Path, dst: Path, relative: str, carried: Carried) -> None:
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


__all__ = ["Carried", "plan_carried"]
