"""Issue 39 findings 5 and 6: ``help(ikdata)`` shows the public functions with their signatures (and the face
stays lazy); ``load_expected`` takes a row or a receipt; docs/library.md (reading and writing datasets from
Python, DatasetWriter included) runs as printed; a DatasetWriter left without ``commit()`` gets a hint that
names it, not one about changing files by hand."""

from __future__ import annotations

import doctest
import inspect
import json
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ikdata
from foundation_helpers import gemm_definition_record

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = {"open": "ikdata.core.dataset", "validate": "ikdata.ops.validate",
             "import_dataset": "ikdata.importing.apply"}


def test_help_lists_the_public_functions_with_their_signatures():
    text = pydoc.render_doc(ikdata, renderer=pydoc.plaintext)
    functions = text.split("\nFUNCTIONS\n", 1)[1].split("\nDATA\n", 1)[0]
    for name, module in FUNCTIONS.items():
        real = getattr(__import__(module, fromlist=[name]), name)
        assert f"    {name}{inspect.signature(real)}" in functions, name  # the signature, as the real one's
        assert inspect.signature(getattr(ikdata, name)) == inspect.signature(real)
    assert len(text.splitlines()) <= 120


def test_the_face_functions_do_what_the_real_ones_do(tmp_path):
    from ikdata.core.layout import init_dataset

    init_dataset(tmp_path / "a")
    assert ikdata.open(tmp_path / "a").layout == "ikdata" and ikdata.validate(tmp_path / "a").ok
    with pytest.raises(ikdata.UsageError, match="no such dataset folder|does not exist"):
        ikdata.open(tmp_path / "nothing")


def test_importing_ikdata_loads_no_engine():
    code = "import sys, json, ikdata\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('ikdata'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    # the registry the top package hands the features to (ikdata.core.features): declarations load when read
    assert json.loads(done.stdout) == ["ikdata", "ikdata._version", "ikdata.core", "ikdata.core.features"]


def _write(root: Path, *, commit: bool = True) -> Path:
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    definition = Definition.from_dict(gemm_definition_record(), origin=USER, source="test")
    writer = DatasetWriter(root)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    for m in (1, 2):
        a = rng.standard_normal((m, 8)).astype(np.float32)
        writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, {"engine": "test", "step": m})
    if commit:
        writer.commit()
    return root


def test_load_expected_takes_a_row_or_its_receipt(tmp_path):
    ds = ikdata.open(_write(tmp_path / "ds"))
    receipts = {r.uuid: r for r in ds.receipts()}
    for row in ds.workloads():
        by_row, by_receipt = ds.load_expected(row), ds.load_expected(receipts[row.uuid])
        assert list(by_row) == ["C"] and by_row["C"].equal(by_receipt["C"])
        assert tuple(by_row["C"].shape) == (row.axes["M"], 4)
        assert ds.receipt_of(row) == receipts[row.uuid]


def test_load_expected_of_a_row_without_a_receipt_says_so(tmp_path):
    root = _write(tmp_path / "ds")
    lines = (root / "receipts.jsonl").read_text().splitlines()
    (root / "receipts.jsonl").write_text(lines[0] + "\n")  # the second row's receipt is gone
    ds = ikdata.open(root)
    rows = list(ds.workloads())
    assert ds.load_expected(rows[0])["C"].shape[0] == 1
    with pytest.raises(ikdata.RecordError) as caught:
        ds.load_expected(rows[1])
    assert str(caught.value) == (f"workloads/gemm/gemm_test_n4_k8.jsonl:2: workload {rows[1].uuid} "
                                 f"(gemm_test_n4_k8) has no receipt in {root}, so no output was recorded for it "
                                 "(FlashInfer Trace rows have none)")
    with pytest.raises(ikdata.UsageError, match="expected a WorkloadRow .* or a Receipt .*, got dict"):
        ds.load_expected(rows[1].to_dict())


def test_a_writer_left_without_commit_is_named_in_the_hint(tmp_path):
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    root = _write(tmp_path / "ds")
    other = Definition.from_dict(gemm_definition_record("gemm_other", n=2), origin=USER, source="test")
    a = np.ones((1, 8), np.float32)
    DatasetWriter(root).add(other, {"A": a, "W": np.ones((2, 8), np.float32)}, {"C": np.full((1, 2), 8.0,
                                                                                             np.float32)})
    problems = [str(p) for p in ikdata.validate(root).problems]
    new_file = [p for p in problems if "does not list definitions/gemm/gemm_other.json" in p]
    assert new_file and "call commit() on the DatasetWriter that added it" in new_file[0], problems
    assert any("a DatasetWriter (before its commit()) wrote after it: run 'ikdata repair" in p for p in problems)
    fresh = _write(tmp_path / "fresh", commit=False)  # a new folder: no manifest at all
    problems = [str(p) for p in ikdata.validate(fresh).problems]
    assert any("the dataset has no ikdata.json (a DatasetWriter writes it on commit())" in p for p in problems), \
        problems


def test_the_library_page_runs_as_printed(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the page's mkdtemp() folders land under tmp_path
    page = REPO / "docs" / "library.md"
    text = page.read_text()
    assert "DatasetWriter" in text and "commit()" in text and "load_expected(row)" in text
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "library.md", str(page), 0)
    assert len(test.examples) >= 30
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0, f"docs/library.md: {runner.failures} example(s) failed (run with -s to see them)"


def test_the_readme_gives_the_set_up_time_and_links_the_library_page():
    readme = (REPO / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "The set-up (`make setup`, which both run first" in quick_start
    assert re.search(r"takes \d+ to \d+ minutes: \d+ min \d+ s", quick_start), quick_start
    assert "[docs/library.md](docs/library.md)" in readme and "ds.load_expected(row)" in readme
