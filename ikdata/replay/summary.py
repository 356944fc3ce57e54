"""Summaries of a replay report: counts, the failing cases, and rows for a per-definition table.

:func:`fit_table` lays the rows out for a terminal of a given width (pure strings, no drawing):
columns are dropped or cut rather than wrapped, so a table stays readable at 80 columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

from ikdata.core.status import Status
from ikdata.judging import families
from ikdata.core.cases import Case, Report

STATUSES = tuple(Status)
CASE_COLUMNS = ("uuid", "axes", "status", "max abs", "rel rms", "cos", "mism", "s", "note")


Reportish = Union[Report, Mapping[str, Any]]  # a Report, or a report's JSON document (read once, by Report.of)


def counts(report: Reportish) -> dict[str, int]:
    """Cases by status, and how many were reused."""
    return Report.of(report).counts()


def exit_code(report: Reportish, *, strict: bool = False) -> int:
    """0 when every replayed case passed and no definition was refused, else 1; under ``strict`` also 1
    when a statistical verdict could not be reached (:func:`not_judged`)."""
    report = Report.of(report)
    found = report.counts()
    failed = found[Status.FAILED] or found[Status.ERROR] or report.get("refused")
    return 1 if failed or (strict and report.not_judged()) else 0


def not_judged(report: Reportish) -> list[str]:
    """Group verdicts with no power: each "definition: why, and the draws it would need"."""
    return Report.of(report).not_judged()


def summarize(report: Reportish, *, report_path: str | Path) -> dict[str, Any]:
    """The ``--json`` summary: counts, exit code, refusals, every case that did not pass, and each group
    family's verdicts under its name (the statistical ones: docs/sampling.md)."""
    report = Report.of(report)
    return {
        "report": str(report_path), "device": report.get("device"), "torch": report.get("torch"),
        "shard": report.get("shard"), "counts": report.counts(), "exit_code": exit_code(report),
        "not_judged": report.not_judged(),  # no power claimed there; replay --strict exits 1
        "refused": list(report.get("refused") or []),
        "not_passed": [{"definition": case.definition, "uuid": case.uuid, "axes": case.axes, "status": case.status,
                        "reason": case.reason} for case in report.cases if not case.passed],
        **{family.name: [group.to_json() for group in report.groups.get(family.name, ())]
           for family in families.grouped()},
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2g}"
    return "-" if value is None else str(value)


def _worst(case: Case, metric: str, *, lowest: bool = False) -> Any:
    values = [m.get(metric) for m in (case.metrics or {}).values()]
    numbers = [v for v in values if isinstance(v, (int, float))]
    words = [v for v in values if isinstance(v, str)]  # "nan", "inf"
    if words:
        return words[0]
    if not numbers:
        return None
    return min(numbers) if lowest else max(numbers)


def case_rows(report: Reportish) -> dict[str, list[list[str]]]:
    """Per definition, one row of strings per case (worst output's metrics), for a table."""
    tables: dict[str, list[list[str]]] = {}
    for case in Report.of(report).cases:
        note = "reused" if case.reused else ""
        if not case.passed and case.reason:
            note = case.reason if not note else f"{note}; {case.reason}"
        axes = ",".join(f"{k}={v}" for k, v in (case.axes or {}).items())
        tables.setdefault(case.definition, []).append([
            case.uuid[:8], axes or "-", str(case.status), _fmt(_worst(case, "max_abs_error")),
            _fmt(_worst(case, "relative_rms")), _fmt(_worst(case, "cosine_similarity", lowest=True)),
            _fmt(_worst(case, "mismatched_fraction")), f"{case.seconds or 0:.3f}", note])
    return tables


# Dropped first to last when a table is too wide: the note moves under the table (whole), then
# the least telling metrics go; uuid, status, max abs and axes (cut to fit) always stay.
_DROP_ORDER = ("note", "s", "mism", "rel rms", "cos")
_CELL_OVERHEAD = 3  # a table draws " cell " plus one border per column
_EDGE = 1  # and one more border at the left edge
_MIN_AXES = 9


@dataclass(frozen=True)
class TableLayout:
    """What fits: the columns kept, the rows cut to them, and notes to print under the table.

    Attributes:
        notes: ``(uuid, note)`` for each row whose note column was dropped, in row order.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[tuple[str, str], ...] = ()

    def width(self) -> int:
        """Characters the table takes when drawn with one border and one space each side of a cell."""
        return table_width(self.columns, self.rows)


def table_width(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """Width of a bordered table of these cells when no cell wraps."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    return _EDGE + sum(w + _CELL_OVERHEAD for w in widths)


def fit_table(rows: Sequence[Sequence[str]], width: int) -> TableLayout:
    """Lay out :func:`case_rows` rows (columns :data:`CASE_COLUMNS`) within ``width`` characters.

    Nothing wraps: first the notes move under the table, then the seconds, mismatched fraction,
    relative RMS and cosine columns go, in that order; if it is still too wide, axes are cut
    with an ellipsis. uuid, axes, status and max abs always stay.

    Example:
        >>> layout = fit_table(case_rows(report)["gemm_n4_k8"], 80)
        >>> layout.columns
        ('uuid', 'axes', 'status', 'max abs', 'rel rms', 'cos', 'mism', 's')
    """
    columns = list(CASE_COLUMNS)
    table = [list(r) for r in rows]
    notes: list[tuple[str, str]] = []
    for name in _DROP_ORDER:
        if table_width(columns, table) <= width:
            break
        index = columns.index(name)
        if name == "note":
            notes = [(r[0], r[index]) for r in table if r[index]]
        columns.pop(index)
        for r in table:
            r.pop(index)
    over = table_width(columns, table) - width
    if over > 0:
        axes = columns.index("axes")
        longest = max([len(columns[axes]), *(len(r[axes]) for r in table)])
        room = max(_MIN_AXES, longest - over)
        for r in table:
            if len(r[axes]) > room:
                r[axes] = r[axes][:room - 1] + "…"
    return TableLayout(tuple(columns), tuple(tuple(r) for r in table), tuple(notes))


__all__ = ["CASE_COLUMNS", "Reportish", "STATUSES", "TableLayout", "case_rows", "counts", "exit_code", "fit_table",
           "not_judged", "summarize", "table_width"]
