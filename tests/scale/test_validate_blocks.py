"""validate reads rows a block at a time (one compiled schema call per block) and rehashes blobs in a
process of its own on a large dataset: what it finds, and where it says it is, is the same as record by
record on threads. A dataset of 8,000 rows spans several read blocks; its problems sit at block edges."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import orjson
import pytest

import ikdata
from ikdata.ops import validate as validate_module

ROWS_FILE = "workloads/gemm/gemm_scale_n64_k256.jsonl"
N = 8000


def _generator():
    path = Path(__file__).resolve().parents[2] / "tools/bench/scale_gen.py"
    spec = importlib.util.spec_from_file_location("ikdata_scale_gen_blocks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("blocks") / "broken"
    _generator().generate(root, N, rows_per_blob=4)
    lines = (root / ROWS_FILE).read_bytes().splitlines()
    # the line that ends the first 1 MiB read block, and its neighbours
    size, first_block_end = 0, 0
    for number, line in enumerate(lines, 1):
        size += len(line) + 1
        if size > 1 << 20:
            first_block_end = number - 1
            break
    bad_type = orjson.loads(lines[first_block_end - 1])
    bad_type["workload"]["axes"]["M"] = "three"
    lines[first_block_end - 1] = orjson.dumps(bad_type)  # the last whole line of block 1: off its schema
    lines[first_block_end] = b'{"definition": "gemm_scale_n64_k256", "workload": '  # the first of block 2: malformed
    no_uuid = orjson.loads(lines[6999])
    del no_uuid["workload"]["uuid"]
    lines[6999] = orjson.dumps(no_uuid)
    (root / ROWS_FILE).write_bytes(b"\n".join(lines) + b"\n")
    receipts = (root / "receipts.jsonl").read_bytes().splitlines()
    wrong = orjson.loads(receipts[4999])
    wrong["expected_output"]["C"]["tensor_key"] = ""
    receipts[4999] = orjson.dumps(wrong)
    (root / "receipts.jsonl").write_bytes(b"\n".join(receipts) + b"\n")
    flipped = root / orjson.loads(lines[100])["workload"]["inputs"]["A"]["path"]
    data = bytearray(flipped.read_bytes())
    data[-1] ^= 0xFF
    flipped.write_bytes(bytes(data))
    expected = [
        f"{ROWS_FILE}:{first_block_end}: /workload/axes/M 'three' is not of type 'integer'",
        f"{ROWS_FILE}:{first_block_end + 1}: malformed JSON",
        f"{ROWS_FILE}:7000: /workload 'uuid' is a required property",
        "receipts.jsonl:5000: /expected_output",
        f"{flipped.relative_to(root)}: content digest is",
    ]
    return root, expected


def _problems(root: Path, monkeypatch, process: str) -> list[str]:
    monkeypatch.setenv(validate_module.PROCESS_ENV, process)
    report = ikdata.validate(ikdata.open(root), deep=True)
    return [str(p) for p in report.problems]


def test_blocks_and_rehash_process_find_the_same_located_problems(broken, monkeypatch):
    root, expected = broken
    in_process = _problems(root, monkeypatch, "1")
    on_threads = _problems(root, monkeypatch, "0")
    assert in_process == on_threads
    for want in expected:
        assert any(p.startswith(want) for p in in_process), (want, in_process)
    lines = [int(p.split(":")[1]) for p in in_process if p.startswith(ROWS_FILE + ":")]
    assert lines == sorted(lines)  # the rows' problems in line order, across read blocks


def test_clean_large_dataset_is_clean_with_the_rehash_process(tmp_path, monkeypatch):
    root = tmp_path / "clean"
    _generator().generate(root, 2000, rows_per_blob=4)
    monkeypatch.setenv(validate_module.PROCESS_ENV, "1")
    report = ikdata.validate(ikdata.open(root), deep=True)
    assert report.ok, [str(p) for p in report.problems]
    assert report.blobs_rehashed == 8 + 2 * 500


def test_a_rehash_process_that_dies_leaves_nothing_unchecked(broken, monkeypatch):
    """A child that cannot run (here: the interpreter it is started with exits at once) costs speed, not
    findings: the foreground scans and rehashes every blob itself."""
    root, _ = broken
    on_threads = _problems(root, monkeypatch, "0")
    monkeypatch.setattr("sys.executable", "/bin/false")
    assert _problems(root, monkeypatch, "1") == on_threads
    assert any("content digest is" in p for p in on_threads)
