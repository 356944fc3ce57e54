"""Records that ride with workloads into an import: every family's own records, and the kinds carried whole.

Each family with records of its own (diffusion: trajectories and the model records they name) says
which of them ride along with the workloads an import admits, through its declared ``carried`` hook
(:class:`ikdata.core.features.Family`), and adds them to one :class:`Carried`. Every other kind a feature
declares is carried by default, as is a core kind no other record names (``imported="create"`` without a
naming ``pattern``): file by file whenever the import admits anything, each file of SRC that DST lacks,
schema-checked; one DST holds with other content is a conflict, never an overwrite. A new kind of either sort
needs no code here, and a declared kind never silently stays behind.

Capture's census is a record of one run (``census/<run>.jsonl``): it rides only with the workloads of that
run, as their receipts name it (``capture_run``), so a census from SRC never speaks for DST's own workloads.
A census file SRC holds under a name that is no run's (``census/sub/x.jsonl``, a name with a newline or an
escape) is refused at the boundary, in the words validate uses (:func:`ikdata.core.record_checks.pattern_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ikdata.core import features
from ikdata.core import jsonl
from ikdata.core.features import hooks as family_hooks
from ikdata.core.record_checks import MAX_LINE_BYTES, check_file, pattern_problem
from ikdata.core.paths import TooLarge, read_capped, text_refusal
from ikdata.core.problems import Problem
from ikdata.core.record_kinds import KINDS, RUN_FIELD, RecordKind

RUN_TIED = ("census",)  # the schemas of record kinds that are one run's record, named <run><suffix>
MAX_CARRIED_BYTES = 256 << 20  # one file carried whole (it is held until the import writes it)


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
    tied = [k for k in KINDS if k.schema in RUN_TIED and k.folder and (src / k.top).is_dir()]
    if tied:
        runs = runs_of(src, admitted, carried)
        for kind in tied:
            _carry_files(src, dst, kind, carried, runs=runs)
    return carried


def runs_of(src: Path, admitted: set[str], carried: Carried) -> set[str]:
    """The capture runs SRC's receipts name (``capture_run``) for the admitted workloads, streamed."""
    from ikdata.core.dataset import RECEIPTS

    runs: set[str] = set()
    path = src / RECEIPTS
    if not admitted or not path.is_file():
        return runs
    for _, receipt in jsonl.iter_records(path, [], display=RECEIPTS, max_line=MAX_LINE_BYTES):
        if isinstance(receipt, dict) and receipt.get("uuid") in admitted and isinstance(receipt.get(RUN_FIELD), str):
            runs.add(receipt[RUN_FIELD])
    return runs


def carried_whole() -> tuple[RecordKind, ...]:
    """The record kinds an import carries file by file: every kind a feature declares whose family has no
    ``carried`` hook (the default: the hook's family says which of its records ride along instead), and core's
    kinds created by import (``imported="create"``) that no other record names (no ``pattern``) and that are not
    definitions (the rows that name them bring them)."""
    declared = set(features.kinds())
    hooked = {k for f in features.features() if f.family is not None and f.family.carried is not None
              for k in f.kinds}
    return tuple(k for k in KINDS if k.imported == "create" and k.folder and k not in hooked
                 and (k in declared or (k.pattern is None and k.schema != "definition")))


def _carry_files(src: Path, dst: Path, kind: RecordKind, carried: Carried, *, runs: set[str] | None = None) -> None:
    """The files of one kind SRC holds and DST lacks, each schema-checked whole (every line of a ``.jsonl``,
    streamed). With ``runs`` (a kind that is one run's record): every file's name is checked, and only the files
    of those runs are carried."""
    folder = src / kind.top
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob(f"*{kind.suffix}")):
        relative = path.relative_to(src).as_posix()
        misnamed = pattern_problem(relative)
        if misnamed is not None:  # validate names it in the same words
            carried.problems.append(misnamed)
            continue
        if path.is_symlink() or text_refusal(relative) is not None or relative.count("/") != kind.top.count("/") + 1:
            carried.problems.append(Problem(relative, f"not a {kind.name} file; expected "
                                            f"{kind.top}/<name>{kind.suffix}"))
            continue
        if runs is not None and path.name[:-len(kind.suffix)] not in runs:
            continue  # another run's record: it speaks for no workload this import admits
        found = check_file(kind.schema, path, display=relative, dataset=src,
                           lines=kind.suffix == ".jsonl") if kind.schema is not None else []
        if found:
            carried.problems += found
            continue
        try:
            data = read_capped(path, MAX_CARRIED_BYTES, what=f"{kind.name} file", display=relative)
            held = read_capped(dst / relative, MAX_CARRIED_BYTES) if (dst / relative).is_file() else None
        except TooLarge as exc:
            carried.problems.append(exc.problem())
            continue
        if held is not None:
            if held != data:
                carried.conflicts.append(f"{kind.name} {relative}: SRC and DST hold different records under one "
                                         "name")
            continue
        carried.files[relative] = data


__all__ = ["Carried", "RUN_FIELD", "carried_whole", "plan_carried", "runs_of"]
