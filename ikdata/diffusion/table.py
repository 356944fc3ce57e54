"""The terminal summary of judged trajectories: steps passed, worst e/f and where, PSNR mean/worst (no torch)."""

from __future__ import annotations

import math
from typing import Any, Mapping

from ikdata.core.status import Status

PREFIX = "trajectory:"
COLUMNS = ("trajectory", "status", "steps ok", "worst e/f", "at step", "PSNR dB")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) else str(value)


def rows(report: Mapping[str, Any]) -> list[list[str]]:
    """One row per trajectory case of a report."""
    found = []
    for case in report.get("cases") or []:
        if not str(case.get("definition", "")).startswith(PREFIX):
            continue
        m = case.get("trajectory") or {}
        worst = m.get("worst") or {}
        first = m.get("first_failure") or {}
        decode = m.get("decode") or {}
        if decode.get("psnr_mean_db") is not None:
            psnr = f"{decode['psnr_mean_db']:.1f}/{decode['psnr_worst_db']:.1f}"
        elif decode.get("error"):
            psnr = "error"
        else:
            psnr = "-"
        steps = f"{m.get('steps_passed', 0)}/{m.get('steps_total', 0)}" if m else "-"
        at = f"{worst.get('step')} {worst.get('stream')}" if worst else "-"
        found.append([str(case.get("uuid", ""))[:12], str(case.get("status")), steps,
                      _fmt(worst.get("ratio")) if worst else "-", at, psnr])
    return found


def notes(report: Mapping[str, Any]) -> list[str]:
    """The reasons of trajectories that did not pass, and degenerate floors."""
    lines = []
    for case in report.get("cases") or []:
        if not str(case.get("definition", "")).startswith(PREFIX):
            continue
        m = case.get("trajectory") or {}
        pipeline = str(case.get("definition", ""))[len(PREFIX):]
        first = m.get("first_failure") or {}
        if first and case.get("status") != Status.PASSED:
            lines.append(f"{str(case['uuid'])[:12]} ({pipeline}): first failure at step {first.get('step')} "
                         f"({', '.join(first.get('streams') or []) or 'all'}: {first.get('check')})")
        if case.get("status") != Status.PASSED and case.get("reason"):
            lines.append(f"{str(case['uuid'])[:12]}: {case['reason']}")
        if any(s.get("degenerate") for s in m.get("steps") or []):
            lines.append(f"{str(case['uuid'])[:12]}: the floor is degenerate (f = 0) at some steps: judged by the "
                         f"definition's tolerance {m.get('fallback_tolerance')} there")
        if m.get("unjudged"):
            lines.append(f"{str(case['uuid'])[:12]}: not judged (ran, no reference replayed): "
                         f"{'; '.join(map(str, m['unjudged']))}")
        if m:
            steps = m.get("steps") or [{}]
            higher = sorted({str(s.get("reference_dtype", "?")).replace("torch.", "") for s in steps})
            lines.append(f"{str(case['uuid'])[:12]}: e and f against the {'/'.join(higher)} reference, floor in the "
                         f"engine's dtype ({m['attention'].get('reference')}, {m['attention'].get('alt')}), pass when "
                         f"e <= {m['k']:g}*f + {m['eps']:g} + one rounding")
            seen = m.get("detectable")
            if isinstance(seen, dict) and seen.get("max") is not None:
                lines.append(f"{str(case['uuid'])[:12]}: smallest output error a step can detect: "
                             f"{seen['min']:.2g} to {seen['max']:.2g} (relative L2)")
    return lines


def summary_lines(report: Mapping[str, Any]) -> list[Any]:
    """The diffusion family's part of replay's end summary (its ``summary`` hook): one table of the
    trajectories (steps passed, worst e/f and where, PSNR), with their notes under it (no rows without any)."""
    from ikdata.judging.summary_table import SummaryTable

    found = rows(report)
    covers = frozenset(str(c["definition"]) for c in report.get("cases") or []
                       if str(c.get("definition", "")).startswith(PREFIX))
    pipelines = sorted(name[len(PREFIX):] for name in covers)
    return [SummaryTable(f"diffusion trajectories: {len(found)} ({', '.join(pipelines)})", COLUMNS,
                         tuple(tuple(r) for r in found), tuple(notes(report)), covers, noun="trajectories")]


__all__ = ["COLUMNS", "notes", "rows", "summary_lines"]
