"""JSONL: whole-line locked appends safe across processes, tolerant reads, and repair that loses nothing."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from ikdata.core import jsonl


def test_append_and_read_round_trip(tmp_path):
    path = tmp_path / "sub" / "rows.jsonl"
    jsonl.append(path, [{"b": 1, "a": [1, 2]}, {"x": "ü"}])
    jsonl.append(path, [])  # nothing to write: the file is untouched
    jsonl.append(path, [{"n": None}])
    assert path.read_bytes() == b'{"a":[1,2],"b":1}\n{"x":"\xc3\xbc"}\n{"n":null}\n'
    content = jsonl.read(path, display="rows.jsonl")
    assert content.records == [(1, {"a": [1, 2], "b": 1}), (2, {"x": "ü"}), (3, {"n": None})]
    assert content.problems == []


def _writer(path: str, worker: int, count: int) -> None:
    for i in range(count):
        # ~9 KB per line: more than PIPE_BUF, so only the lock keeps lines whole
        jsonl.append(path, [{"worker": worker, "i": i, "pad": f"{worker}-{i}-" + "x" * 9000}], fsync=False)


def test_concurrent_appends_from_four_processes_keep_every_line_whole(tmp_path):
    path = tmp_path / "rows.jsonl"
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_writer, args=(str(path), w, 150)) for w in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(60)
        assert p.exitcode == 0
    content = jsonl.read(path)
    assert content.problems == []
    assert len(path.read_bytes().split(b"\n")) == 4 * 150 + 1
    seen = {(r["worker"], r["i"]) for _, r in content.records}
    assert seen == {(w, i) for w in range(4) for i in range(150)}
    for _, record in content.records:
        assert record["pad"] == f"{record['worker']}-{record['i']}-" + "x" * 9000


def test_torn_last_line_is_reported_with_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    jsonl.append(path, [{"i": 1}, {"i": 2}])
    with open(path, "ab") as stream:
        stream.write(b'{"i": 3, "pa')
    content = jsonl.read(path, display="workloads/x.jsonl")
    assert [r for _, r in content.records] == [{"i": 1}, {"i": 2}]
    [problem] = content.problems
    assert (problem.path, problem.line, problem.code) == ("workloads/x.jsonl", 3, "torn-line")
    assert str(problem).startswith("workloads/x.jsonl:3: torn last line")
    assert "ikdata repair" in problem.message


def test_complete_json_without_newline_is_still_torn(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"i": 1}\n{"i": 2}')
    content = jsonl.read(path)
    assert [r for _, r in content.records] == [{"i": 1}]
    assert [(p.line, p.code) for p in content.problems] == [(2, "torn-line")]


def test_append_after_a_torn_line_isolates_it(tmp_path):
    path = tmp_path / "rows.jsonl"
    jsonl.append(path, [{"i": 1}])
    with open(path, "ab") as stream:
        stream.write(b'{"i": 2, "pa')
    jsonl.append(path, [{"i": 3}])
    content = jsonl.read(path, display="rows.jsonl")
    assert [(n, r) for n, r in content.records] == [(1, {"i": 1}), (3, {"i": 3})]
    assert [(p.line, p.code) for p in content.problems] == [(2, "malformed-json")]


def test_malformed_lines_are_each_reported_and_the_rest_read(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"i": 1}\nnot json\n\n{"i": 4}\n{"i": \n{"i": 6}\n')
    content = jsonl.read(path, display="rows.jsonl")
    assert [n for n, _ in content.records] == [1, 4, 6]
    assert [(p.line, p.code) for p in content.problems] == [(2, "malformed-json"), (5, "malformed-json")]
    assert all("expected one JSON object per line" in p.message for p in content.problems)


def test_empty_file_reads_clean(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"")
    content = jsonl.read(path)
    assert content.records == [] and content.problems == []


def test_repair_moves_bad_lines_aside_and_loses_nothing(tmp_path):
    path = tmp_path / "rows.jsonl"
    original = b'{"i": 1}\nbroken line\n{"i": 3}\n{"i": 4, "pa'
    path.write_bytes(original)
    result = jsonl.repair(path)
    assert result.removed_lines == (2, 4)
    assert result.set_aside == str(tmp_path / "rows.jsonl.rejected")
    assert path.read_bytes() == b'{"i": 1}\n{"i": 3}\n'
    rejected = (tmp_path / "rows.jsonl.rejected").read_bytes()
    assert rejected == b'broken line\n{"i": 4, "pa\n'
    # every original line is in exactly one of the two files
    kept = path.read_bytes().splitlines() + rejected.splitlines()
    assert sorted(kept) == sorted(original.splitlines())
    assert jsonl.read(path).problems == []
    # a second repair finds nothing and leaves both files alone
    again = jsonl.repair(path)
    assert again.removed_lines == () and again.set_aside is None
    assert (tmp_path / "rows.jsonl.rejected").read_bytes() == rejected


def test_repair_of_a_clean_file_does_not_rewrite_it(tmp_path):
    path = tmp_path / "rows.jsonl"
    jsonl.append(path, [{"i": 1}])
    before = os.stat(path)
    assert jsonl.repair(path).removed_lines == ()
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not (tmp_path / "rows.jsonl.rejected").exists()


def test_repair_appends_to_an_existing_sidecar(tmp_path):
    path = tmp_path / "rows.jsonl"
    (tmp_path / "rows.jsonl.rejected").write_bytes(b"older reject\n")
    path.write_bytes(b'{"i": 1}\n{"torn')
    jsonl.repair(path)
    assert (tmp_path / "rows.jsonl.rejected").read_bytes() == b'older reject\n{"torn\n'


def test_dumps_is_compact_and_sorted():
    assert jsonl.dumps({"b": 1, "a": {"d": 2, "c": 3}}) == b'{"a":{"c":3,"d":2},"b":1}'
    assert json.loads(jsonl.dumps({"x": 1.5})) == {"x": 1.5}


@pytest.mark.parametrize("data", [
    b'{"i": 1}\n{"i": 2}\n',
    b'{"i": 1}\nnot json\n\n  \n{"i": 5}\n{"torn',
    b"",
    b'{"i": 1}',
    b'[1, 2]\n"str"\n{"i": 3}\n',
])
def test_iter_records_reports_exactly_what_read_reports(tmp_path, data):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(data)
    content = jsonl.read(path, display="rows.jsonl")
    problems = []
    streamed = list(jsonl.iter_records(path, problems, display="rows.jsonl"))
    assert streamed == content.records
    assert problems == content.problems
