"""Bounded memory: past the spill threshold validate keeps per-row state on disk and finds exactly
what the in-memory path finds, each problem located by file and line; ``--json-lines`` output
parses line by line. The threshold is lowered to 1,000 rows so a 3,000-row dataset takes the
disk path (``IKDATA_SPILL_ROWS``)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import orjson
import pytest

import ikdata
from ikdata.core import spill

ROWS_FILE = "workloads/gemm/gemm_scale_n64_k256.jsonl"
N = 3000
MISSING = "blob/sha256/ab/" + "ab" * 32 + ".safetensors"


def _generator():
    path = Path(__file__).resolve().parents[2] / "tools/bench/scale_gen.py"
    spec = importlib.util.spec_from_file_location("ikdata_scale_gen", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _write(path: Path, records: list[dict], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scale") / "clean"
    _generator().generate(root, N, rows_per_blob=4)
    return root


@pytest.fixture(scope="module")
def broken(clean: Path, tmp_path_factory) -> tuple[Path, list[str]]:
    """The clean dataset with a problem of each kind late in its files (after the threshold);
    returns it and the located messages validate must give."""
    root = tmp_path_factory.mktemp("scale") / "broken"
    shutil.copytree(clean, root)
    rows = _lines(root / ROWS_FILE)
    receipts = _lines(root / "receipts.jsonl")
    twin = json.loads(json.dumps(rows[9]))
    twin["workload"]["axes"]["M"] = 99
    rows[2499] = twin  # line 2500: uuid of line 10, other content
    rows[2699]["definition"] = "no_such_op"
    rows[2799]["workload"]["inputs"]["A"]["path"] = MISSING
    w_blob = rows[0]["workload"]["inputs"]["W"]
    rows[2899]["workload"]["inputs"]["A"] = dict(w_blob)  # A points at a weight: wrong shape
    receipts[2949]["uuid"] = "f" * 32
    receipts.append({**receipts[4], "expected_output": {"C": receipts[8]["expected_output"]["C"]}})
    _write(root / ROWS_FILE, rows, tail=b'{"definition": "gemm_scale_n64_k256", "wor')
    _write(root / "receipts.jsonl", receipts)
    flipped = root / rows[1]["workload"]["inputs"]["A"]["path"]
    data = bytearray(flipped.read_bytes())
    data[-1] ^= 0xFF
    flipped.write_bytes(bytes(data))
    uuid10 = rows[9]["workload"]["uuid"]
    expected = [
        f"{ROWS_FILE}:2500: /workload/uuid: uuid {uuid10} is also used by a different row at {ROWS_FILE}:10",
        f"{ROWS_FILE}:2700: /definition: unknown definition 'no_such_op'",
        f"{ROWS_FILE}:2800: /workload/inputs/A/path: blob {MISSING} does not exist",
        f"{ROWS_FILE}:2900: /workload/inputs/A: blob {w_blob['path']} has shape [64, 256], expected",
        f"receipts.jsonl:2950: /uuid: receipt names workload {'f' * 32}, which no workload row holds",
        f"receipts.jsonl:{N + 1}: /expected_output: workload {receipts[4]['uuid']} has receipts with different",
        f"{ROWS_FILE}:{N + 1}: torn last line",
    ]
    return root, expected


def _validate(root: Path, monkeypatch, *, deep: bool, limit: int | None) -> tuple[list[dict], int]:
    if limit is None:
        monkeypatch.delenv(spill.ENV, raising=False)
    else:
        monkeypatch.setenv(spill.ENV, str(limit))
    before = spill.SPILLS[0]
    report = ikdata.validate(ikdata.open(root), deep=deep)
    return [p.to_dict() for p in report.problems], spill.SPILLS[0] - before


@pytest.mark.parametrize("deep", [False, True], ids=["shallow", "deep"])
def test_disk_path_finds_what_memory_finds_located(broken, monkeypatch, deep):
    root, expected = broken
    in_memory, spilled = _validate(root, monkeypatch, deep=deep, limit=None)
    assert spilled == 0
    on_disk, spilled = _validate(root, monkeypatch, deep=deep, limit=1000)
    assert spilled >= 3  # the rows, the first receipts and the tensor uses all moved to disk
    assert on_disk == in_memory
    text = [f"{p['path']}:{p.get('line')}: {p['pointer']}: {p['message']}" if p.get("pointer")
            else f"{p['path']}:{p.get('line')}: {p['message']}" for p in on_disk]
    for want in expected:
        assert any(t.startswith(want) for t in text), (want, text)
    flipped = [p for p in on_disk if p["code"] == "digest-mismatch"]
    assert len(flipped) == (1 if deep else 0)


def test_clean_dataset_clean_on_disk(clean, monkeypatch):
    problems, spilled = _validate(clean, monkeypatch, deep=True, limit=1000)
    assert spilled >= 3 and problems == []


def test_json_lines_parse_line_by_line(broken, monkeypatch):
    from typer.testing import CliRunner

    from ikdata.cli import app

    root, expected = broken
    monkeypatch.setenv(spill.ENV, "1000")
    result = CliRunner().invoke(app, ["validate", str(root), "--json-lines"])
    assert result.exit_code == 1, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    summary = lines[-1]
    assert summary["kind"] == "summary" and summary["ok"] is False and summary["workloads"] == N
    problems = [line for line in lines[:-1]]
    assert all(p["kind"] == "problem" for p in problems)
    assert len(problems) == summary["problems"] >= len(expected)
    assert any(p["line"] == 2500 and p["code"] == "duplicate-uuid" for p in problems)
