"""Records that ride with workloads into an import: every family's own records, and the kinds carried whole.

Each family with records of its own (diffusion: trajectories and the model records they name) says
which of them ride along with the workloads an import admits, through its declared ``carried`` hook
(:class:`ikdata.core.features.Family`), and adds them to one :class:`Carried`. A record kind that no
family carries and no other record names (``imported="create"`` without a naming ``pattern``, such as
capture's census) is carried file by file whenever the import admits anything: each file of SRC that DST
lacks, schema-checked; one DST holds with other content is a conflict, never an overwrite. A new kind of
either sort needs no code here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ikdata.core import features
from ikdata.core.features import hooks as family_hooks
from ikdata.core.record_checks import check_file
from ikdata.core.paths import text_refusal
from ikdata.core.problems import Problem
from ikdata.core.record_kinds import KINDS, RecordKind


@dataclass
class Carried:
    """What an import brings besides workloads.

    Attributes:
        appends: DST JSONL file -> records to append (trajectories).
        files: DST path -> bytes of a file to create (model records, census files).
        blob_paths: SRC-relative blob paths those records reference.
        added: ids of the records carried; left_out: (record id, its case's definition, why) of those that stay out.
        conflicts: a DST record with the same name and other content.
        problems: SRC record lines that cannot be read (torn, malformed, off-schema).
    """

    appends: dict[str, list[dict]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    blob_paths: set[str] = field(default_factory=set)
    added: list[str] = field(default_factory=list)
    left_out: list[tuple[str, str, str]] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def plan_carried(src: Path, dst: Path, admitted: set[str]) -> Carried:
    """The records of SRC to carry into DST, given the workload uuids that will be in DST after the import
    (``admitted``: added now or already there)."""
    carried = Carried()
    for carry in family_hooks("carried", src):  # the families whose records SRC holds
        carry(src, dst, admitted, carried)
    if admitted:
        for kind in carried_whole():
            _carry_files(src, dst, kind, carried)
    return carried


def carried_whole() -> tuple[RecordKind, ...]:
    """The record kinds an import carries file by file: created by import (``imported="create"``), named by no
    other record (no ``pattern``), no family's own (a family carries those) and not definitions (the rows
    that name them bring them)."""
    owned = set(features.kinds())
    return tuple(k for k in KINDS if k.imported == "create" and k.pattern is None and k.folder
                 and k not in owned and k.schema != "definition")


def _carry_files(src: Path, dst: Path, kind: RecordKind, carried: Carried) -> None:
    """The files of one kind SRC holds and DST lacks, each schema-checked whole (every line of a ``.jsonl``)."""
    folder = src / kind.top
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob(f"*{kind.suffix}")):
        relative = path.relative_to(src).as_posix()
        if path.is_symlink() or text_refusal(relative) is not None or relative.count("/") != kind.top.count("/") + 1:
            carried.problems.append(Problem(relative, f"not a {kind.name} file; expected "
                                            f"{kind.top}/<name>{kind.suffix}"))
            continue
        found = check_file(kind.schema, path, display=relative, dataset=src,
                                  lines=kind.suffix == ".jsonl") if kind.schema is not None else []
        if found:
            carried.problems += found
            continue
        data = path.read_bytes()
        if (dst / relative).is_file():
            if (dst / relative).read_bytes() != data:
                carried.conflicts.append(f"{kind.name} {relative}: SRC and DST hold different records under one "
                                         "name")
            continue
        carried.files[relative] = data


__all__ = ["Carried", "carried_whole", "plan_carried"]
