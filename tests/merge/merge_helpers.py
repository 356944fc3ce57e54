"""Helpers and fixtures for import/merge tests: captured datasets and replay reports built by hand.

Not a conftest.py on purpose: the suite's modules do ``from conftest import ...``, and a
second conftest.py would shadow tests/conftest.py in ``sys.modules``. Test modules here
import the fixtures they use from this module.

The reports satisfy ``schemas/report.schema.json`` and the report contract (metrics,
per-output tolerance, input/expected digests) so that ``recheck`` trusts their passes.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: scripts run from this folder need it
from foundation_helpers import GEMM_NAME, gemm_definition_record, write_definition  # noqa: E402,F401


REPORT = "reports/replay.json"


def passing_case(receipt: dict, row: dict) -> dict:
    """A report case that passes and names exactly the row's and receipt's tensors."""
    from ikdata.core.store import digest_from_path

    return {
        "definition": receipt["definition"], "uuid": receipt["uuid"], "axes": row["workload"]["axes"],
        "status": "passed", "seconds": 0.01,
        "metrics": {name: {"max_abs_error": 0.0, "max_rel_error": 0.0, "relative_rms": 0.0,
                           "cosine_similarity": 1.0, "mismatched_fraction": 0.0}
                    for name in receipt["expected_output"]},
        "tolerance": {name: {"dtype": "float32", "rtol": 1e-4, "atol": 2e-5, "matched_ratio": 1.0}
                      for name in receipt["expected_output"]},
        "input_digests": {n: digest_from_path(d["path"]) for n, d in row["workload"]["inputs"].items()
                          if d["type"] == "safetensors"},
        "expected_digests": {n: digest_from_path(d["path"]) for n, d in receipt["expected_output"].items()},
        "device": "cpu", "torch": "2.13.0+cpu",
    }


def import_trusting_reports(src, dst, **options):
    """``import_dataset`` with SRC's reports trusted (``--trust-reports``).

    The reports of these helpers are written by hand for a test definition no one trusts, so the
    default import refuses them (a report from elsewhere is a claim, re-judged by a trusted reference).
    Tests of other things (dedupe, conflicts, the journal, the checks a report still gets) import
    through this; re-judging is tested in ``tests/security/test_import_claims.py``.
    """
    from ikdata.importing.apply import import_dataset

    return import_dataset(src, dst, **{"trust_reports": True, **options})


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows_by_uuid(root: Path) -> dict[str, dict]:
    return {r["workload"]["uuid"]: r for p in sorted((root / "workloads").rglob("*.jsonl")) for r in read_jsonl(p)}


def write_report(root: Path, cases: list[dict]) -> Path:
    report = {"format": "ikdata-replay/1", "torch": "2.13.0+cpu", "ikdata_version": "0.1.0", "device": "cpu",
              "device_name": None, "comparison": "all output elements",
              "tolerances": {"float32": {"rtol": 1e-4, "atol": 2e-5}, "bfloat16": {"rtol": 0.016, "atol": 0.005},
                             "integer": "exact"},
              "shard": None, "started_at": time.time(), "finished_at": time.time(), "cases": cases}
    path = root / REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def replay_by_hand(root: Path, *, fail: set[str] = frozenset(), skip: set[str] = frozenset()) -> dict[str, dict]:
    """Write a report with a passing case per receipt (``fail``: status failed; ``skip``: no case)."""
    rows = rows_by_uuid(root)
    cases = []
    for receipt in read_jsonl(root / "receipts.jsonl"):
        if receipt["uuid"] in skip:
            continue
        case = passing_case(receipt, rows[receipt["uuid"]])
        if receipt["uuid"] in fail:
            case.update(status="failed", reason="C: 3 of 8 elements outside rtol=1e-4, atol=2e-5")
            case["metrics"]["C"]["mismatched_fraction"] = 0.375
        cases.append(case)
    write_report(root, cases)
    return rows


def capture(root: Path, *, rows: int = 3, seed: int = 0, host: str = "host-a", w_seed: int = 99,
            definition_record: dict | None = None, commit: bool = True, start: int = 0) -> Path:
    """A dataset written by DatasetWriter: ``rows`` GEMM workloads sharing one weight ``W``."""
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    definition = Definition.from_dict(definition_record or gemm_definition_record(), origin=USER, source="test")
    writer = DatasetWriter(root)
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(w_seed).standard_normal((4, 8)).astype(np.float32)
    for i in range(start, start + rows):
        a = rng.standard_normal((i % 4 + 1, 8)).astype(np.float32)
        writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T},
                   {"engine": "test-engine", "model": "tiny", "request_id": f"{host}-r{i}", "step": i,
                    "operation": "linear", "module_path": "layers.0.proj", "host": host})
    if commit:
        writer.commit()
    return root


@pytest.fixture
def definitions_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "defs"
    write_definition(folder, gemm_definition_record())
    return folder


@pytest.fixture
def validated(tmp_path: Path) -> Callable[..., Path]:
    """Factory: a captured and replayed (by hand) dataset under tmp_path/<name>."""

    def make(name: str = "src", **kwargs) -> Path:
        root = capture(tmp_path / name, **kwargs)
        replay_by_hand(root)
        from ikdata.core.writer import DatasetWriter

        DatasetWriter(root).commit()
        return root

    return make


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under a folder (the lock file excepted)."""
    import hashlib

    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".ikdata.lock"}
