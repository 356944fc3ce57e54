"""``ikdata stats`` answered from the index: the same output as reading every row, never stale."""

from __future__ import annotations

import json
import os

import orjson
import pytest
from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.core import jsonl
from ikdata.core.dataset import Dataset
from ikdata.core.index import INDEX_FILE
from ikdata.ops.stats import compute

runner = CliRunner()


def _stats(root, *args):
    result = runner.invoke(app, ["stats", str(root), *args])
    return result.exit_code, result.stdout, result.stderr


def _both(root):
    """(CLI --json, CLI human, compute) with the index in place and from reading the files, index set aside."""
    with_index = (_stats(root, "--json"), _stats(root), compute(Dataset.open(root)).to_dict())
    os.rename(root / INDEX_FILE, root / "index.aside")
    try:
        reading = (_stats(root, "--json"), _stats(root), compute(Dataset.open(root), use_index=False).to_dict())
        assert not (root / INDEX_FILE).exists()  # stats builds no index of its own
    finally:
        os.replace(root / "index.aside", root / INDEX_FILE)
    return with_index, reading


def _rows(root):
    path = next((root / "workloads").rglob("*.jsonl"))
    return path, [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.fixture
def dataset(make_ikdata_dataset):
    """5 rows of one definition, 2 rows of another in a second file (one naming a missing blob), indexed."""
    root = make_ikdata_dataset(5)
    path, rows = _rows(root)
    other = []
    for i, row in enumerate(rows[:2]):
        row = dict(row, definition="gemm_other", workload=dict(row["workload"], uuid=f"{i:032x}"))
        other.append(row)
    missing = dict(other[1]["workload"]["inputs"]["A"], path="blob/sha256/00/" + "0" * 64 + ".safetensors")
    other[1]["workload"]["inputs"]["A"] = missing
    (path.parent / "other.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in other))
    assert runner.invoke(app, ["index", str(root)]).exit_code == 0
    return root


def _no_reads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("stats read a record file")

    monkeypatch.setattr(jsonl, "iter_records", refuse)


def test_stats_from_the_index_prints_what_reading_every_row_prints(dataset, monkeypatch):
    with_index, reading = _both(dataset)
    assert with_index == reading
    (code, text, _), _, figures = with_index
    assert code == 0
    document = json.loads(text)
    assert (document["workloads"], document["receipts"]) == (7, 5)
    assert sorted(document["workloads_per_definition"].values()) == [2, 5]
    assert document["workloads_per_definition"]["gemm_other"] == 2
    assert document["unique_blobs"] == 11 and document["referenced_bytes"] > document["stored_bytes"]
    _no_reads(monkeypatch)  # with the index fresh, no row is read
    assert compute(Dataset.open(dataset)).to_dict() == figures


def test_an_append_after_indexing_is_counted_not_stale(dataset, make_ikdata_dataset, monkeypatch):
    before = compute(Dataset.open(dataset))
    path, rows = _rows(dataset)
    extra = dict(rows[0], workload=dict(rows[0]["workload"], uuid="f" * 32))
    with open(path, "ab") as stream:
        stream.write(orjson.dumps(extra) + b"\n")
    with open(dataset / "receipts.jsonl", "ab") as stream:
        stream.write((dataset / "receipts.jsonl").read_bytes().splitlines()[0] + b"\n")
    blob = dataset / "blob/sha256/ff" / ("f" * 64 + ".safetensors")  # a blob added since the last scan
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(b"x" * 1000)
    with_index, reading = _both(dataset)
    assert with_index == reading
    after = with_index[2]
    assert (after["workloads"], after["receipts"]) == (before.workloads + 1, before.receipts + 1)
    assert after["unique_blobs"] == before.unique_blobs + 1
    assert after["stored_bytes"] == before.stored_bytes + 1000
    assert after["referenced_bytes"] > before.referenced_bytes
    blob.unlink()  # and one removed
    _no_reads(monkeypatch)
    assert compute(Dataset.open(dataset)).unique_blobs == before.unique_blobs


def test_a_file_rewritten_in_place_is_counted_again(dataset):
    path = next((dataset / "workloads").rglob("other.jsonl"))
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    rows[0]["definition"] = "gemm_renam"  # same length: same size, a new mtime
    data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    assert len(data) == path.stat().st_size
    with open(path, "r+b") as stream:
        stream.write(data)
    with_index, reading = _both(dataset)
    assert with_index == reading
    assert with_index[2]["workloads_per_definition"]["gemm_renam"] == 1


def test_a_torn_or_malformed_line_is_reported_as_a_read_reports_it(dataset):
    path, _ = _rows(dataset)
    with open(path, "ab") as stream:
        stream.write(b"{not json}\n{\"definition\": \"gem")
    with_index, reading = _both(dataset)
    assert with_index == reading
    (code, _, _), (_, _, said), _ = with_index
    assert code == 1 and "malformed JSON" in said and f"{path.name}:" in said and "torn" in said.lower()


def test_a_missing_blob_that_turns_up_is_counted_in_the_referenced_bytes(dataset):
    before = compute(Dataset.open(dataset))  # the kept referenced bytes: this blob counted as 0
    blob = dataset / "blob/sha256/00" / ("0" * 64 + ".safetensors")
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(b"y" * 500)
    with_index, reading = _both(dataset)
    assert with_index == reading
    assert with_index[2]["referenced_bytes"] == before.referenced_bytes + 500
    assert with_index[2]["unique_blobs"] == before.unique_blobs + 1
