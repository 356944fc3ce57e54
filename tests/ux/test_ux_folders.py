"""Issue 27 finding 2: a folder that holds no dataset is refused by every command, with one message, and
nothing is written into it; a URL where a folder is expected (and the reverse) is refused with advice."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ikdata.cli import app

runner = CliRunner()

READERS = [["validate", "--deep"], ["ls"], ["stats"], ["show", "{}", "0fd8"], ["lineage"], ["lineage", "{}", "0fd8"],
           ["diff", "{}", "{}"], ["replay"], ["manifest"], ["repair"], ["gc"], ["index"], ["pack"], ["unpack"],
           ["push", "{}", "memory://ux/x"]]


def _args(template: list[str], folder) -> list[str]:
    args = [a.format(folder) if "{}" in a else a for a in template]
    return args if any("{}" in a for a in template) else [args[0], str(folder), *args[1:]]


@pytest.mark.parametrize("template", READERS, ids=lambda t: " ".join(t[:2]).replace("{}", "DIR"))
def test_a_folder_without_a_dataset_is_refused_and_left_as_it_was(template, not_a_dataset):
    result = runner.invoke(app, _args(template, not_a_dataset))
    assert result.exit_code == 1, result.output
    assert f"{not_a_dataset}: not a dataset: looked for ikdata.json" in result.output
    assert "FlashInfer Trace" in result.output and "Traceback" not in result.output
    assert sorted(p.name for p in not_a_dataset.iterdir()) == ["notes.txt"]  # no lock, no report, no manifest


def test_library_open_refuses_it_too(not_a_dataset):
    import ikdata
    from ikdata.core.dataset import NotADataset

    with pytest.raises(NotADataset) as caught:
        ikdata.open(not_a_dataset)
    assert caught.value.path == not_a_dataset and "ikdata.json" in caught.value.looked_for


def test_foreign_layouts_and_empty_datasets_are_still_datasets(tmp_path, small_dataset):
    flashinfer = tmp_path / "fi"
    (flashinfer / "definitions").mkdir(parents=True)
    assert runner.invoke(app, ["ls", str(flashinfer)]).exit_code == 0
    assert runner.invoke(app, ["init", str(tmp_path / "new")]).exit_code == 0
    assert runner.invoke(app, ["validate", str(tmp_path / "new")]).exit_code == 0
    assert runner.invoke(app, ["ls", str(small_dataset)]).exit_code == 0


def test_a_url_where_a_folder_is_needed_says_clone_it(small_dataset):
    result = runner.invoke(app, ["push", "memory://ux/remote", str(small_dataset)])
    assert result.exit_code == 2 and "not a URL; clone it first: ikdata clone memory://ux/remote DIR" in result.output
    result = runner.invoke(app, ["gc", "s3://bucket/x"])
    assert result.exit_code == 2 and "clone it first" in result.output
    result = runner.invoke(app, ["pull", str(small_dataset), "memory://ux/elsewhere"])
    assert result.exit_code == 2 and "not a URL" in result.output


def test_report_refuses_a_missing_parent_folder(small_dataset, tmp_path):
    page = tmp_path / "no" / "such" / "folder" / "page.html"
    result = runner.invoke(app, ["report", str(small_dataset), "--html", str(page)])
    assert result.exit_code == 2 and "no such folder" in result.output
    assert not (tmp_path / "no").exists()
