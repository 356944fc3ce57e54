"""Helpers shared by the benchmarks: timing by best of N, and the machine's load for the record."""

from __future__ import annotations

import os
import time
from typing import Any, Callable


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The shortest wall time of ``repeat`` calls, and the last call's value."""
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, printed beside every figure (a shared VM moves them)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
