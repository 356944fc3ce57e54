"""Issue 43, finding 3: a report case's unknown fields and nesting, bounded in the one reader.

Import copied every field of a report case the schema does not define into DST's receipts (an 800 KB field
landed in every receipt), and a field nested 300 levels passed validate and the report page, then ended import
and replay-combine in a RecursionError traceback. Now import copies only the fields the schema defines for a
case (or a validation), and the one reader (:func:`ikdata.core.cases.read_report`) bounds nesting and a case's
unknown fields before anything walks the report: validate, the report page, import and replay-combine each
name the file and the JSON pointer instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from merge_helpers import REPORT, capture, read_jsonl
from security_helpers import trusted_folder

import ikdata
from ikdata.cli import app
from ikdata.core import manifest
from ikdata.core.cases import MAX_DEPTH
from ikdata.core.errors import ProblemsFound
from ikdata.core.writer import DatasetWriter
from ikdata.importing.apply import import_dataset


def _cli(*args) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output and "RecursionError" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _replayed(root: Path, folder: Path, *, shard: str | None = None) -> Path:
    from ikdata.replay.runner import replay

    capture(root, rows=2)
    assert replay(ikdata.open(root, definitions=[folder]), reuse=False, shard=shard).exit_code == 0
    DatasetWriter(root).commit()
    return root


def _plant(report: Path, **fields) -> None:
    """Add ``fields`` to the report's first case (written with Python's json: it nests as deep as asked)."""
    data = json.loads(report.read_text())
    data["cases"][0].update(fields)
    report.write_text(json.dumps(data))


def _nested(levels: int) -> dict:
    value: dict = {"bottom": 1}
    for _ in range(levels):
        value = {"a": value}
    return value


# -- unknown fields are not copied ------------------------------------------------------------------------


def test_import_does_not_copy_a_cases_unknown_fields_into_receipts(tmp_path):
    folder = trusted_folder(tmp_path)
    src = _replayed(tmp_path / "src", folder)
    _plant(src / REPORT, planted_note="EVIL-RUN says hello", looks_official={"verdict": "certified"})
    manifest.write(src)
    dst = tmp_path / "dst"
    import_dataset(src, dst, definitions=[folder])
    text = (dst / "receipts.jsonl").read_text()
    assert "EVIL-RUN" not in text and "looks_official" not in text and "planted_note" not in text
    validations = [r["validation"] for r in read_jsonl(dst / "receipts.jsonl")]
    assert all(v["status"] == "passed" for v in validations)


def test_a_large_unknown_field_is_a_located_problem_not_a_copy(tmp_path):
    folder = trusted_folder(tmp_path)
    src = _replayed(tmp_path / "src", folder)
    _plant(src / REPORT, padding="x" * 800_000)
    manifest.write(src)
    dst = tmp_path / "dst"
    with pytest.raises(ProblemsFound) as caught:
        import_dataset(src, dst, definitions=[folder])
    [problem] = [p for p in caught.value.problems if p.path == REPORT]
    assert problem.pointer == "/cases/0" and "padding" in problem.message
    assert not (dst / "receipts.jsonl").exists()
    code, output = _cli("validate", src)
    assert code != 0 and REPORT in output and "/cases/0" in output


# -- nesting: a located problem on every path, never a RecursionError -----------------------------------------


@pytest.fixture
def deep(tmp_path):
    folder = trusted_folder(tmp_path)
    src = _replayed(tmp_path / "src", folder)
    _plant(src / REPORT, deep=_nested(300))
    manifest.write(src)
    return src, folder


def test_validate_names_the_deep_field(deep):
    src, _ = deep
    code, output = _cli("validate", src)
    assert code != 0 and REPORT in output and "/cases/0/deep/a/a" in output, output
    assert f"deeper than {MAX_DEPTH}" in output


def test_the_report_page_refuses_a_deep_report_located(deep, tmp_path):
    src, _ = deep
    code, output = _cli("report", src, "--html", tmp_path / "page.html")
    assert code != 0 and "replay.json" in output and "/cases/0/deep" in output, output
    assert not (tmp_path / "page.html").exists()


def test_import_refuses_a_deep_report_located(deep, tmp_path):
    src, folder = deep
    with pytest.raises(ProblemsFound) as caught:
        import_dataset(src, tmp_path / "dst", definitions=[folder])
    assert any(p.path == REPORT and (p.pointer or "").startswith("/cases/0/deep") for p in caught.value.problems)
    code, output = _cli("import", src, tmp_path / "dst2", "--definitions", folder)
    assert code != 0 and "/cases/0/deep" in output


def test_replay_combine_refuses_a_deep_shard_located(tmp_path):
    folder = trusted_folder(tmp_path)
    shards = []
    for index in (1, 2):
        root = _replayed(tmp_path / f"shard{index}", folder, shard=f"{index}/2")
        shards.append(next((root / "reports").glob("replay-shard-*.json")))
    data = json.loads(shards[0].read_text())
    target = data["cases"][0] if data["cases"] else data
    target["deep"] = _nested(300)
    shards[0].write_text(json.dumps(data))
    code, output = _cli("replay-combine", tmp_path / "combined.json", *shards)
    assert code != 0 and shards[0].name in output and "/deep" in output, output


def test_a_deep_case_in_a_resumed_journal_is_skipped_not_a_traceback(tmp_path):
    from ikdata.replay import report as report_mod

    folder = trusted_folder(tmp_path)
    src = _replayed(tmp_path / "src", folder)
    journal = report_mod.journal_path(src / REPORT)
    case = json.loads((src / REPORT).read_text())["cases"][0]
    journal.write_text(json.dumps({**case, "deep": _nested(300)}) + "\n")
    loaded = report_mod.load_partial(src / REPORT)
    assert all("deep" not in c for c in loaded["cases"])


def test_an_earlier_imports_validation_loses_its_unknown_fields_on_the_next_import(tmp_path):
    """A receipt's validation (from an earlier import) that SRC padded with a field no schema defines: the
    next import copies the validation's defined fields only."""
    folder = trusted_folder(tmp_path)
    first = _replayed(tmp_path / "first", folder)
    middle = tmp_path / "middle"
    import_dataset(first, middle, definitions=[folder])
    receipts = read_jsonl(middle / "receipts.jsonl")
    for receipt in receipts:
        receipt["validation"]["planted_note"] = "EVIL-RUN certified this"
    (middle / "receipts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receipts))
    manifest.write(middle)
    last = tmp_path / "last"
    import_dataset(middle, last, definitions=[folder])
    text = (last / "receipts.jsonl").read_text()
    assert len(read_jsonl(last / "receipts.jsonl")) == len(receipts)
    assert "EVIL-RUN" not in text and "planted_note" not in text
