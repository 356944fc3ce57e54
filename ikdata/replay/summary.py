"""Summaries of a replay report: counts, the failing cases, and rows for a per-definition table."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

STATUSES = ("passed", "failed", "error", "skipped")


def counts(report: Mapping[str, Any]) -> dict[str, int]:
    """Cases by status, and how many were reused."""
    found = {status: 0 for status in STATUSES}
    found["reused"] = 0
    for case in report["cases"]:
        found[case["status"]] = found.get(case["status"], 0) + 1
        found["reused"] += bool(case.get("reused"))
    return found


def exit_code(report: Mapping[str, Any]) -> int:
    """0 when every replayed case passed and no definition was refused, else 1."""
    found = counts(report)
    return 1 if found["failed"] or found["error"] or report.get("refused") else 0


def summarize(report: Mapping[str, Any], *, report_path: str | Path) -> dict[str, Any]:
    """The ``--json`` summary: counts, exit code, refusals, and every case that did not pass."""
    return {
        "report": str(report_path), "device": report.get("device"), "torch": report.get("torch"),
        "shard": report.get("shard"), "counts": counts(report), "exit_code": exit_code(report),
        "refused": list(report.get("refused") or []),
        "not_passed": [{k: case.get(k) for k in ("definition", "uuid", "axes", "status", "reason")}
                       for case in report["cases"] if case["status"] != "passed"],
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2g}"
    return "-" if value is None else str(value)


def _worst(case: Mapping[str, Any], metric: str, *, lowest: bool = False) -> Any:
    values = [m.get(metric) for m in (case.get("metrics") or {}).values()]
    numbers = [v for v in values if isinstance(v, (int, float))]
    words = [v for v in values if isinstance(v, str)]  # "nan", "inf"
    if words:
        return words[0]
    if not numbers:
        return None
    return min(numbers) if lowest else max(numbers)


def case_rows(report: Mapping[str, Any]) -> dict[str, list[list[str]]]:
    """Per definition, one row of strings per case (worst output's metrics), for a table."""
    tables: dict[str, list[list[str]]] = {}
    for case in report["cases"]:
        note = "reused" if case.get("reused") else ""
        if case["status"] != "passed" and case.get("reason"):
            note = case["reason"] if not note else f"{note}; {case['reason']}"
        axes = ",".join(f"{k}={v}" for k, v in (case.get("axes") or {}).items())
        tables.setdefault(case["definition"], []).append([
            case["uuid"][:8], axes or "-", case["status"], _fmt(_worst(case, "max_abs_error")),
            _fmt(_worst(case, "relative_rms")), _fmt(_worst(case, "cosine_similarity", lowest=True)),
            _fmt(_worst(case, "mismatched_fraction")), f"{case.get('seconds', 0):.3f}", note])
    return tables


__all__ = ["STATUSES", "case_rows", "counts", "exit_code", "summarize"]
