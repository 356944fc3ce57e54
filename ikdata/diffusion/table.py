"""The terminal summary of judged trajectories: steps passed, worst e/f and where, PSNR mean/worst (no torch)."""

from __future__ import annotations

import math
from typing import Any

from ikdata.diffusion.verdicts import TRAJECTORY, TRAJECTORY_PREFIX as PREFIX
from ikdata.core.cases import Case, Report

COLUMNS = ("trajectory", "status", "steps ok", "worst e/f", "at step", "PSNR dB")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) else str(value)


def _trajectories(report: Report) -> list[Case]:
    return [case for case in report.cases if case.definition.startswith(PREFIX)]


def rows(report: Report) -> list[list[str]]:
    """One row per trajectory case of a report."""
    found = []
    for case in _trajectories(report):
        m = case.record(TRAJECTORY) or {}
        worst = m.get("worst") or {}
        decode = m.get("decode") or {}
        if decode.get("psnr_mean_db") is not None:
            psnr = f"{decode['psnr_mean_db']:.1f}/{decode['psnr_worst_db']:.1f}"
        elif decode.get("error"):
            psnr = "error"
        else:
            psnr = "-"
        steps = f"{m.get('steps_passed', 0)}/{m.get('steps_total', 0)}" if m else "-"
        at = f"{worst.get('step')} {worst.get('stream')}" if worst else "-"
        found.append([case.uuid[:12], str(case.status), steps, _fmt(worst.get("ratio")) if worst else "-", at, psnr])
    return found


def notes(report: Report | Any) -> list[str]:
    """The reasons of trajectories that did not pass, and degenerate floors (``report``: a Report, or its JSON
    document, read once here)."""
    lines = []
    for case in _trajectories(Report.of(report)):
        m = case.record(TRAJECTORY) or {}
        pipeline = case.definition[len(PREFIX):]
        first = m.get("first_failure") or {}
        short = case.uuid[:12]
        if first and not case.passed:
            lines.append(f"{short} ({pipeline}): first failure at step {first.get('step')} "
                         f"({', '.join(first.get('streams') or []) or 'all'}: {first.get('check')})")
        if not case.passed and case.reason:
            lines.append(f"{short}: {case.reason}")
        if any(s.get("degenerate") for s in m.get("steps") or []):
            lines.append(f"{short}: the floor is degenerate (f = 0) at some steps: judged by the "
                         f"definition's tolerance {m.get('fallback_tolerance')} there")
        for declared in m.get("not_judged") or []:
            lines.append(f"{short}: {declared}")
        if m.get("unjudged"):
            lines.append(f"{short}: not judged (ran, no reference replayed): {'; '.join(map(str, m['unjudged']))}")
        if m:
            steps = m.get("steps") or [{}]
            higher = sorted({str(s.get("reference_dtype", "?")).replace("torch.", "") for s in steps})
            lines.append(f"{short}: e and f against the {'/'.join(higher)} reference, floor in the "
                         f"engine's dtype ({m['attention'].get('reference')}, {m['attention'].get('alt')}), pass when "
                         f"e <= {m['k']:g}*f + {m['eps']:g} + one rounding")
            seen = m.get("detectable")
            if isinstance(seen, dict) and seen.get("max") is not None:
                lines.append(f"{short}: smallest output error a step can detect: "
                             f"{seen['min']:.2g} to {seen['max']:.2g} (relative L2)")
    return lines


def summary_lines(report: Report | Any) -> list[Any]:
    """The diffusion family's part of replay's end summary (its ``summary`` hook, handed the
    :class:`~ikdata.core.cases.Report`; its JSON is read too): one table of the trajectories (steps passed, worst e/f and where, PSNR), with their notes under it
    (no rows without any)."""
    from ikdata.judging.summary_table import SummaryTable

    report = Report.of(report)
    found = rows(report)
    covers = frozenset(case.definition for case in _trajectories(report))
    pipelines = sorted(name[len(PREFIX):] for name in covers)
    return [SummaryTable(f"diffusion trajectories: {len(found)} ({', '.join(pipelines)})", COLUMNS,
                         tuple(tuple(r) for r in found), tuple(notes(report)), covers, noun="trajectories")]


__all__ = ["COLUMNS", "notes", "rows", "summary_lines"]
