"""A flashinfer-bench dataset's ``traces/``: each solution trace listed as left out of an import, with why.

flashinfer-bench writes its evaluations of solutions under ``traces/<op_type>/<name>.jsonl`` or, by
solution author, ``traces/<author>/<op_type>/<name>.jsonl``: one line per (workload, solution) with
the evaluation's status. A trace is a verdict on a *solution* (a kernel someone wrote), not an
engine's captured output, and ikdata judges every workload itself (replay), so a trace is not
imported; it is never dropped silently either: each is named with its file, line, workload,
solution and status. Files pass the dataset's path rule first (a link out of the dataset is a
problem, not a read).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ikdata.core import jsonl

TRACES = "traces"
MAX_LISTED_PER_FILE = 10_000  # a listing is for people: a larger file is named once with its count


@dataclass(frozen=True)
class TraceLeftOut:
    """One solution trace not imported: where it is, what it judged, and why it stays out."""

    where: str  # file:line
    uuid: str
    definition: str
    reason: str


def traces(root: Path, dataset: Any) -> Iterator[TraceLeftOut]:
    """Every trace under ``root/traces`` (both layouts), each as left out with its reason.

    Problems of the files themselves (a torn line, a link out of the dataset) land in
    ``dataset.problems`` through the dataset's own readers.
    """
    folder = root / TRACES
    if not folder.is_dir() or folder.is_symlink():
        return
    files, problems = dataset._record_files(folder, "*.jsonl")  # the path rule: links out refused, named
    dataset._note(problems)
    for path in files:
        display = dataset.rel(path)
        author = _author(path.relative_to(folder))
        for count, (line, record) in enumerate(jsonl.iter_records(path, dataset.problems, display=display,
                                                                   dataset=root)):
            if count >= MAX_LISTED_PER_FILE:
                yield TraceLeftOut(display, "", "", f"{display}: more than {MAX_LISTED_PER_FILE} traces; the rest "
                                   "of the file is not listed one by one")
                return
            yield _left_out(record, f"{display}:{line}", author)


def _author(relative: Path) -> str | None:
    parts = relative.parts
    return parts[0] if len(parts) >= 3 else None  # <author>/<op_type>/<name>.jsonl


def _left_out(record: Any, where: str, author: str | None) -> TraceLeftOut:
    if not isinstance(record, dict):
        return TraceLeftOut(where, "", "", f"{where}: not a trace (a JSON object expected)")
    definition = record.get("definition") if isinstance(record.get("definition"), str) else ""
    workload = record.get("workload") if isinstance(record.get("workload"), dict) else {}
    uuid = workload.get("uuid") if isinstance(workload.get("uuid"), str) else ""
    solution = record.get("solution") if isinstance(record.get("solution"), str) else None
    evaluation = record.get("evaluation") if isinstance(record.get("evaluation"), dict) else {}
    status = evaluation.get("status") if isinstance(evaluation.get("status"), str) else "no status"
    by = f" by {author}" if author else ""
    what = f"the evaluation of solution {solution!r}{by} ({status})" if solution else "a trace without a solution"
    return TraceLeftOut(where, uuid, definition, f"{where}: {what} is a verdict on a solution, not an engine's "
                        "captured output; ikdata imports the workloads and judges them itself (ikdata replay): "
                        "not imported")


__all__ = ["TRACES", "TraceLeftOut", "traces"]
