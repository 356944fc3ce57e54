"""The SQLite index can neither forge nor destroy (issue 21, finding 3).

The index (``.ikdata-index.sqlite``) is derived data: a planted or edited one must not make
``show`` or ``lineage`` print a row or receipt that is not in the dataset's files, one that is a
link (to another database, or to nowhere) is never followed, and a row file the path rule refuses
is refused through the index too, as ``validate`` refuses it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.core.index import INDEX_FILE, open_index

runner = CliRunner()
FORGED = "f" * 8 + "-ffff-5fff-bfff-" + "f" * 12


def _cli(*args: str):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def _rows_file(root: Path) -> Path:
    return next((root / "workloads").rglob("*.jsonl"))


def _true(root: Path) -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in _rows_file(root).read_text().splitlines()]
    receipts = [json.loads(line) for line in (root / "receipts.jsonl").read_text().splitlines()]
    return rows, receipts


def _forge(root: Path, outside: Path, *, lines: bool) -> tuple[str, str]:
    """Edit the index so that a made-up uuid leads to a row outside the dataset, the first row's
    receipt to a forged one outside, and (``lines``) the second row to line 999. Returns (first uuid,
    second uuid)."""
    rows, receipts = _true(root)
    victim, other = rows[0]["workload"]["uuid"], rows[1]["workload"]["uuid"]
    outside.mkdir(exist_ok=True)
    stolen = dict(rows[0], workload=dict(rows[0]["workload"], uuid=FORGED, axes={"M": 77}))
    (outside / "rows.jsonl").write_text(json.dumps(stolen) + "\n")
    forged = dict(receipts[0], engine="forged-engine", host="forged-host")
    (outside / "receipts.jsonl").write_text(json.dumps(forged) + "\n")
    connection = sqlite3.connect(root / INDEX_FILE)
    with connection:
        definition = rows[0]["definition"]
        connection.execute("DELETE FROM entries WHERE kind = 'receipt' AND uuid = ?", (victim,))
        if lines:
            connection.execute("UPDATE entries SET line = 999 WHERE kind = 'workload' AND uuid = ?", (other,))
        connection.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", [
            (FORGED, "workload", definition, str(outside / "rows.jsonl"), 1, 0),
            (victim, "receipt", definition, str(outside / "receipts.jsonl"), 1, 0)])
    connection.close()
    return victim, other


def _assert_only_true_data(root: Path, victim: str, other: str) -> None:
    _, receipts = _true(root)
    shown = _cli("show", str(root), other, "--json")
    assert json.loads(shown.stdout)["source"].endswith(".jsonl:2")
    shown = _cli("show", str(root), FORGED, "--json")
    assert shown.exit_code != 0 and '"M": 77' not in shown.stdout and "77" not in shown.stdout
    shown = _cli("show", str(root), victim, "--json")
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert [r["engine"] for r in document["receipts"]] == ["test"]
    assert "forged" not in shown.output
    traced = _cli("lineage", str(root), victim, "--json")
    assert traced.exit_code == 0, traced.output
    [chain] = json.loads(traced.stdout)
    assert chain["capture"]["engine"] == "test" and chain["capture"]["host"] == receipts[0]["host"]
    assert "forged" not in traced.output
    traced = _cli("lineage", str(root), other, "--json")
    assert json.loads(traced.stdout)[0]["row"].endswith(".jsonl:2")


def test_an_index_edited_in_place_shows_only_what_the_files_hold(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(3)
    open_index(root)[0].close()
    victim, other = _forge(root, tmp_path / "outside", lines=False)
    _assert_only_true_data(root, victim, other)


def test_an_index_planted_by_someone_else_is_not_believed(make_ikdata_dataset, tmp_path, monkeypatch):
    """Built and edited with another user's key (a dataset received with its index): every entry of
    it, even the line numbers, is ignored."""
    root = make_ikdata_dataset(3)
    mine = os.environ["IKDATA_CACHE_DIR"]
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(tmp_path / "attacker-cache"))
    open_index(root)[0].close()
    victim, other = _forge(root, tmp_path / "outside", lines=True)
    monkeypatch.setenv("IKDATA_CACHE_DIR", mine)
    _assert_only_true_data(root, victim, other)


def _foreign_database(path: Path) -> list:
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        connection.executemany("INSERT INTO accounts VALUES (?, ?)", [("ada", 10), ("bob", 20)])
        connection.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        connection.execute("INSERT INTO meta VALUES ('format', 'payroll/1')")
    connection.close()
    return _contents(path)


def _contents(path: Path) -> list:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master ORDER BY name")]
        return [(t, sorted(connection.execute(f'SELECT * FROM "{t}"'))) for t in tables]
    finally:
        connection.close()


@pytest.mark.parametrize("how", ["symlink", "in place"])
def test_a_foreign_database_at_the_index_place_is_left_untouched(make_ikdata_dataset, tmp_path, how):
    root = make_ikdata_dataset(3)
    foreign = tmp_path / "elsewhere" / "payroll.sqlite" if how == "symlink" else root / INDEX_FILE
    before = _foreign_database(foreign)
    if how == "symlink":
        (root / INDEX_FILE).symlink_to(foreign)
    rows, _ = _true(root)
    uuid = rows[1]["workload"]["uuid"]
    for command in (["show", str(root), uuid, "--json"], ["lineage", str(root), uuid, "--json"],
                    ["index", str(root)]):
        result = _cli(*command)
        assert _contents(foreign) == before, command
        if command[0] != "index":
            assert uuid in result.stdout, result.output
    assert result.exit_code == 1 and INDEX_FILE in result.output  # ikdata index says why it did not write
    shown = _cli("show", str(root), uuid)
    assert "not an ikdata index" in shown.output or "is a link" in shown.output
    if how == "symlink":
        assert (root / INDEX_FILE).is_symlink()
    assert not [p for p in foreign.parent.iterdir() if p.name.startswith(foreign.name + "-")]  # no -wal, -shm


def test_a_dangling_link_at_the_index_place_creates_nothing_outside(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(3)
    (root / INDEX_FILE).unlink(missing_ok=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / INDEX_FILE).symlink_to(outside / "created.sqlite")
    rows, _ = _true(root)
    uuid = rows[0]["workload"]["uuid"]
    for command in (["show", str(root), uuid, "--json"], ["lineage", str(root), uuid, "--json"],
                    ["index", str(root)]):
        result = _cli(*command)
        if command[0] != "index":
            assert uuid in result.stdout, result.output
    assert result.exit_code == 1 and "is a link" in result.output
    assert list(outside.iterdir()) == [] and (root / INDEX_FILE).is_symlink()


def test_a_row_file_linked_out_of_the_dataset_is_refused_by_show_as_by_validate(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(3)
    rows, _ = _true(root)
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps(dict(rows[0], workload=dict(rows[0]["workload"], uuid=FORGED))) + "\n")
    linked = _rows_file(root).parent / "stolen.jsonl"
    linked.symlink_to(outside)
    validated = _cli("validate", str(root))
    assert validated.exit_code == 1 and "stolen.jsonl" in validated.output
    _cli("index", str(root))  # an index built before the show: it must not hold the linked file's rows either
    for command in ("show", "lineage"):
        result = _cli(command, str(root), FORGED, "--json")
        assert result.exit_code == 1, (command, result.output)
        assert "stolen.jsonl" in result.output and "leaves the dataset" in result.output
        assert FORGED not in result.stdout
    shown = _cli("show", str(root), rows[0]["workload"]["uuid"], "--json")
    assert shown.exit_code == 1 and json.loads(shown.stdout)["row"] == rows[0]  # the true rows still show
    assert "stolen.jsonl" in shown.stderr
