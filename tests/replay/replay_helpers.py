"""Helpers shared by the replay tests."""

from __future__ import annotations

from typing import Any

from foundation_helpers import GEMM_REFERENCE, gemm_definition_record


def gemm_record(name: str = "gemm_n4_k8", *, dtype: str = "float32", reference: str = GEMM_REFERENCE,
                **extra: Any) -> dict:
    """C[M, N] = A[M, K] @ W[N, K].T with N=4, K=8 and M a var axis (the tests' one GEMM, no description)."""
    return gemm_definition_record(name, dtype=dtype, reference=reference, description=None, **extra)


def without_timings(report: dict) -> dict:
    """A report with what differs between two identical runs removed: timings (and the combined shard list)."""
    drop = ("started_at", "finished_at", "shards")
    found = {k: v for k, v in report.items() if k not in drop}
    found["cases"] = [{k: v for k, v in case.items() if k != "seconds"} for case in report["cases"]]
    return found
