"""Issue 27 finding 9: library functions take a path or a Dataset alike, ``help(ikdata)`` is short, and every
exported function's docstring example runs (doctest)."""

from __future__ import annotations

import doctest
import inspect
import pydoc

import pytest

import ikdata


def test_validate_takes_a_path_or_a_dataset(small_dataset):
    by_path = ikdata.validate(small_dataset)
    by_text = ikdata.validate(str(small_dataset))
    by_dataset = ikdata.validate(ikdata.open(small_dataset))
    assert by_path.ok and by_text.ok and by_dataset.ok
    assert by_path.workloads == by_dataset.workloads == 3


def test_import_takes_datasets_too(small_dataset, tmp_path):
    result = ikdata.import_dataset(ikdata.open(small_dataset), tmp_path / "shared", dry_run=True, trust_reports=True)
    assert result.src == str(small_dataset) and result.dry_run


def test_help_is_short():
    text = pydoc.render_doc(ikdata, renderer=pydoc.plaintext)
    assert len(text.splitlines()) <= 120, len(text.splitlines())
    assert "open(path)" in text and "validate(" in text and "import_dataset(" in text


EXPORTED = sorted(name for name in ikdata.__all__ if inspect.isfunction(getattr(ikdata, name)))


def test_exported_functions_are_the_ones_named():
    assert EXPORTED == ["import_dataset", "open", "validate"]


@pytest.mark.parametrize("name", ["ikdata", *EXPORTED])
def test_docstring_examples_run(name):
    target = ikdata if name == "ikdata" else getattr(ikdata, name)
    finder = doctest.DocTestFinder(recurse=False)
    tests = [t for t in finder.find(target, name, globs={"ikdata": ikdata}) if t.examples]
    assert tests, f"{name} has no example in its docstring"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0, f"{name}: {runner.failures} example(s) failed (run with -s to see them)"
