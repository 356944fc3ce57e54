"""The lookup index: derived, refreshed from the files on every open, never trusted blindly."""

from __future__ import annotations

import os
import sqlite3

import orjson
import pytest

from ikdata.core.index import INDEX_FILE, open_index


def _rows(root):
    path = next((root / "workloads").rglob("*.jsonl"))
    return path, [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_every_row_and_receipt_is_found_by_uuid_prefix_and_read_back(make_ikdata_dataset):
    root = make_ikdata_dataset(5)
    index, result = open_index(root)
    with index:
        assert result.rebuilt == 2 and result.rows == 10  # one workload file and receipts.jsonl
        path, rows = _rows(root)
        for number, row in enumerate(rows, 1):
            uuid = row["workload"]["uuid"]
            [entry] = index.find(uuid[:12])
            assert (entry.path, entry.line) == (path.relative_to(root).as_posix(), number)
            assert index.read(entry) == row
            [receipt] = index.find(uuid, "receipt")
            assert index.read(receipt)["uuid"] == uuid
        assert index.counts() == {rows[0]["definition"]: 5}
        assert [e.uuid for e in index.of_definition(rows[0]["definition"])] == [r["workload"]["uuid"] for r in rows]


def test_a_fresh_index_is_reused_and_an_append_is_indexed_from_where_it_stopped(make_ikdata_dataset):
    root = make_ikdata_dataset(3)
    open_index(root)[0].close()
    index, result = open_index(root)
    index.close()
    assert not result.changed
    path, rows = _rows(root)
    extra = dict(rows[0], workload=dict(rows[0]["workload"], uuid="f" * 32))
    with open(path, "ab") as stream:
        stream.write(orjson.dumps(extra) + b"\n")
    index, result = open_index(root)
    with index:
        assert (result.extended, result.rebuilt, result.rows) == (1, 0, 1)
        [entry] = index.find("f" * 32)
        assert entry.line == 4 and index.read(entry)["workload"]["uuid"] == "f" * 32


def test_a_file_edited_by_hand_is_indexed_again_not_trusted(make_ikdata_dataset):
    root = make_ikdata_dataset(3)
    open_index(root)[0].close()
    path, rows = _rows(root)
    rows[1]["workload"]["uuid"] = "e" * 32
    data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    stat = os.stat(path)
    with open(path, "r+b") as stream:  # same inode, same size; only the bytes and mtime change
        stream.write(data)
    assert os.stat(path).st_ino == stat.st_ino
    index, result = open_index(root)
    with index:
        assert result.rebuilt == 1
        assert [e.line for e in index.find("e" * 32)] == [2]
        assert index.find(rows[0]["workload"]["uuid"])[0].line == 1


def test_a_torn_last_line_waits_until_it_is_whole(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    path, rows = _rows(root)
    extra = orjson.dumps(dict(rows[0], workload=dict(rows[0]["workload"], uuid="d" * 32)))
    with open(path, "ab") as stream:
        stream.write(extra[:20])
    index, _ = open_index(root)
    with index:
        assert index.find("d" * 32) == []
    with open(path, "ab") as stream:
        stream.write(extra[20:] + b"\n")
    index, result = open_index(root)
    with index:
        assert result.extended == 1 and [e.line for e in index.find("d" * 32)] == [3]


def test_removed_files_drop_their_entries(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    open_index(root)[0].close()
    (root / "receipts.jsonl").unlink()
    index, result = open_index(root)
    with index:
        assert result.dropped == 1
        assert index.find("", "receipt") == [] and len(index.find("")) == 2


@pytest.mark.parametrize("content", [b"not sqlite at all", b""])
def test_an_index_file_that_is_not_an_index_is_rebuilt(make_ikdata_dataset, content):
    root = make_ikdata_dataset(3)
    (root / INDEX_FILE).write_bytes(content)
    index, result = open_index(root)
    with index:
        assert result.rebuilt == 2 and len(index.find("")) == 3


def test_an_index_of_another_format_is_rebuilt(make_ikdata_dataset):
    root = make_ikdata_dataset(3)
    open_index(root)[0].close()
    connection = sqlite3.connect(root / INDEX_FILE)
    with connection:
        connection.execute("UPDATE meta SET value = 'ikdata-index/0'")
        connection.execute("DELETE FROM entries")
    connection.close()
    index, result = open_index(root)
    with index:
        assert result.rebuilt == 2 and len(index.find("")) == 3


def test_a_stale_entry_is_refused_when_read(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    index, _ = open_index(root)
    with index:
        [entry] = index.find(_rows(root)[1][0]["workload"]["uuid"])
        path = root / entry.path
        path.write_bytes(b"\n" + path.read_bytes())  # the row moved one byte on
        with pytest.raises(LookupError, match="stale"):
            index.read(entry)


def test_two_processes_refreshing_at_once_index_each_row_once(make_ikdata_dataset):
    import multiprocessing

    root = make_ikdata_dataset(50)
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_refresh, args=(str(root),)) for _ in range(3)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(60)
        assert p.exitcode == 0
    index, _ = open_index(root)
    with index:
        assert len(index.find("")) == 50 and len(index.find("", "receipt")) == 50


def _refresh(root: str) -> None:
    open_index(root)[0].close()


def test_the_manifest_does_not_list_the_index(make_ikdata_dataset):
    from ikdata.core import manifest

    root = make_ikdata_dataset(2)
    open_index(root)[0].close()
    assert not any("index" in f for f in manifest.tracked_files(root))


def test_ikdata_index_rebuilds_and_show_reads_through_it(make_ikdata_dataset):
    import json

    from typer.testing import CliRunner

    from ikdata.cli import app

    root = make_ikdata_dataset(4)
    (root / INDEX_FILE).write_bytes(b"garbage")
    result = CliRunner().invoke(app, ["index", str(root), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == 4
    path, rows = _rows(root)
    uuid = rows[2]["workload"]["uuid"]
    shown = CliRunner().invoke(app, ["show", str(root), uuid[:8], "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["source"].endswith(":3") and document["row"]["workload"]["uuid"] == uuid
    assert len(document["receipts"]) == 1


def test_ikdata_index_on_a_folder_that_is_not_a_dataset_is_a_usage_error(tmp_path):
    from typer.testing import CliRunner

    from ikdata.cli import app

    result = CliRunner().invoke(app, ["index", str(tmp_path)])
    assert result.exit_code == 1 and "not a dataset: looked for ikdata.json" in result.output  # one message (#27)
