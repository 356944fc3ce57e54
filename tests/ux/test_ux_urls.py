"""Issue 27 finding 3: URLs are URLs wherever a path is accepted; a typo (``s3:/``) or an unknown scheme is
refused, never made into a local folder."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from ikdata.cli import app

runner = CliRunner()


@pytest.fixture
def in_tmp(tmp_path):
    before = os.getcwd()
    os.chdir(tmp_path)
    yield tmp_path
    os.chdir(before)


@pytest.mark.parametrize("args", [["import", "{ds}", "s3:/nobucket/y"], ["push", "{ds}", "s3:/nobucket/y"],
                                  ["pull", "s3:/nobucket/y", "copy"], ["clone", "s3:/nobucket/y", "copy"],
                                  ["show", "s3:/nobucket/y", "0fd8"], ["validate", "s3:/nobucket/y"],
                                  ["ls", "hf:datasets/org/name"]], ids=lambda a: a[0])
def test_a_scheme_typo_is_refused_and_creates_nothing(args, in_tmp, small_dataset):
    result = runner.invoke(app, [a.format(ds=small_dataset) for a in args])
    assert result.exit_code == 2, result.output
    assert "did you mean" in result.output and "://" in result.output
    assert list(in_tmp.iterdir()) == []


def test_import_into_a_url_is_refused_with_the_commands_that_do_it(in_tmp, small_dataset):
    result = runner.invoke(app, ["import", str(small_dataset), "s3://nobucket/y"])
    assert result.exit_code == 2
    assert "ikdata push DIR s3://nobucket/y" in result.output
    assert list(in_tmp.iterdir()) == []


def test_an_unknown_scheme_is_refused(in_tmp):
    result = runner.invoke(app, ["validate", "nosuchscheme://x/y"])
    assert result.exit_code == 2 and "unknown URL scheme nosuchscheme://" in result.output


def test_show_reads_a_url_and_names_it_unmangled(small_dataset):
    pushed = runner.invoke(app, ["push", str(small_dataset), "memory://ux-show/ds"])
    assert pushed.exit_code == 0, pushed.output
    listed = runner.invoke(app, ["ls", "memory://ux-show/ds", "--json"])
    assert listed.exit_code == 0, listed.output
    shown = runner.invoke(app, ["show", "memory://ux-show/ds", "0"])
    assert shown.exit_code in (0, 2), shown.output  # a prefix matching several workloads is a usage error
    missing = runner.invoke(app, ["show", "memory://ux-nothing/here", "0fd8"])
    assert "memory://ux-nothing/here" in missing.output and "memory:/ux" not in missing.output


def test_library_parse_catches_the_typo():
    from ikdata.core.errors import UsageError
    from ikdata.remote.url import parse_url

    with pytest.raises(UsageError, match="did you mean s3://bucket/x"):
        parse_url("s3:/bucket/x")
