"""Where a report's data came from, for the report page: the dataset and its id, the engines, models and programs
that captured it and when, and each case's place in the run (step, layer, request, shapes).

Read from the dataset the report belongs to: its manifest (the id), its receipts (one per workload, streamed
with a per-line cap) and its censuses (the programs' command lines). A report given without its dataset has
no provenance; the page says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ikdata.core.problems import Problem

MAX_LINE = 1 << 20  # a receipt or census line past this is not read (validate names it)
SHOWN = 8  # engines, models and programs listed on the page; the rest are counted


@dataclass(frozen=True)
class CaseFacts:
    """A case's place in the run, from its receipt."""

    step: int | None = None
    layer: str | None = None
    request: str | None = None
    axes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def shapes(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.axes.items()))


@dataclass(frozen=True)
class Provenance:
    """What the page says about where the data came from."""

    root: Path
    dataset_id: str | None
    sources: tuple[str, ...]  # "transformers 5.25.0: tiny-llama (random weights)"
    programs: tuple[str, ...]  # command lines of the captured programs
    captured: tuple[float, float] | None  # first and last capture time
    cases: Mapping[str, CaseFacts]
    problems: tuple[Problem, ...] = ()

    def lineage_command(self, uuid: str) -> str:
        return f"ikdata lineage {self.root} {uuid}"


def dataset_of(report: str | os.PathLike) -> Path | None:
    """The dataset a report file belongs to (``DS/reports/replay.json`` -> ``DS``), or None."""
    folder = Path(report).resolve().parent.parent
    return folder if (folder / "ikdata.json").is_file() else None


def gather(root: str | os.PathLike) -> Provenance:
    """The provenance of the dataset at ``root`` (streamed: receipts and censuses are read a line at a time)."""
    from ikdata.core import jsonl
    from ikdata.core import manifest as manifest_mod
    from ikdata.core.errors import RecordError

    root = Path(root)
    problems: list[Problem] = []
    try:
        dataset_id = manifest_mod.current_id(root)
    except RecordError as exc:
        problems.append(Problem("ikdata.json", str(exc)))
        dataset_id = None
    sources: dict[str, int] = {}
    cases: dict[str, CaseFacts] = {}
    first = last = None
    receipts = root / "receipts.jsonl"
    if receipts.is_file():
        for _, receipt in jsonl.iter_records(receipts, problems, display="receipts.jsonl", max_line=MAX_LINE):
            if not isinstance(receipt, dict) or not isinstance(receipt.get("uuid"), str):
                continue
            engine = " ".join(str(receipt[k]) for k in ("engine", "engine_version") if receipt.get(k))
            source = f"{engine or 'unknown engine'}: {receipt['model']}" if receipt.get("model") else engine
            if source:
                sources[source] = sources.get(source, 0) + 1
            at = receipt.get("captured_at")
            if isinstance(at, (int, float)) and not isinstance(at, bool):
                first, last = min(first or at, at), max(last or at, at)
            axes = receipt.get("axes") if isinstance(receipt.get("axes"), dict) else {}
            cases[receipt["uuid"]] = CaseFacts(_int(receipt.get("step")), _text(receipt.get("module_path")),
                                               _text(receipt.get("request_id")), axes)
    programs: dict[str, None] = {}
    census = root / "census"
    for path in sorted(census.glob("*.jsonl")) if census.is_dir() else ():
        for _, record in jsonl.iter_records(path, problems, display=f"census/{path.name}", max_line=MAX_LINE):
            argv = record.get("argv") if isinstance(record, dict) else None
            if isinstance(argv, list) and argv:
                programs[" ".join(str(a) for a in argv)[:500]] = None
    ranked = tuple(s for s, _ in sorted(sources.items(), key=lambda item: -item[1]))
    return Provenance(root, dataset_id, ranked, tuple(programs), (first, last) if first is not None else None,
                      cases, tuple(problems))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


__all__ = ["CaseFacts", "Provenance", "SHOWN", "dataset_of", "gather"]
