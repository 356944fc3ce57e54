"""Issue 27 findings 1 and 5: where the command lives, help that reads at 80 columns with its examples
verbatim, ``ikdata --version``, ``--ray`` alone, ``--endpoint-url`` wherever a URL is taken."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ikdata
from ikdata import cli

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _help(*args: str) -> str:
    result = runner.invoke(cli.app, [*args, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_help_fits_80_columns_and_keeps_examples_verbatim(command):
    text = _help(command)
    assert [line for line in text.splitlines() if len(line) > 80] == []
    assert not re.search(r"\{\w+\}|<list\[|<str>|<path>|<int>", text), text
    info = next(i for i in cli.app.registered_commands if (i.name or i.callback.__name__) == command)
    epilog = info.epilog or ""
    if "Examples:" in epilog:
        examples = epilog.split("Examples:", 1)[1].split("\n\n", 1)[0]
        for line in filter(str.strip, examples.splitlines()):
            assert line.strip() in text  # not rewrapped (no "--max-\nbytes", no "seed-\ncapture")


def test_the_command_list_is_whole_and_the_fast_help_says_the_same(capsys):
    registered = {(i.name or i.callback.__name__.replace("_", "-")): i for i in cli.app.registered_commands}
    assert list(registered) == list(cli.COMMANDS)
    for name, (module, summary) in cli.COMMANDS.items():
        info = registered[name]
        assert info.callback.__module__ == f"ikdata.cli.{module}"
        assert cli._summary(info.help or info.callback.__doc__ or "") == summary
    typer_help = _help()
    cli.main(["--help"])
    fast = capsys.readouterr().out
    for name, (_, summary) in cli.COMMANDS.items():
        assert name in fast and summary.split()[-1] in fast
        assert summary[:40] in " ".join(typer_help.split())  # not cut off at 45 characters
    assert "..." not in typer_help.split("Commands:")[1]


def test_version(capsys):
    cli.main(["--version"])
    assert capsys.readouterr().out == f"ikdata {ikdata.__version__}\n"
    result = runner.invoke(cli.app, ["--version"])
    assert result.exit_code == 0 and result.output == f"ikdata {ikdata.__version__}\n"


def test_ray_alone_does_not_eat_the_dataset_path(not_a_dataset):
    result = runner.invoke(cli.app, ["replay", "--ray", str(not_a_dataset)])
    assert result.exit_code == 1 and "not a dataset" in result.output  # the folder was read as the dataset
    from ikdata.cli.replay_cmd import _is_ray_address

    assert _is_ray_address("auto") and _is_ray_address("10.0.0.1:6379") and _is_ray_address("ray://h:10001")
    assert not _is_ray_address("runs/big") and not _is_ray_address("s3://bucket/x")


@pytest.mark.parametrize("command", ["validate", "ls", "stats", "show", "lineage", "replay", "push", "pull",
                                     "clone"])
def test_every_command_that_takes_a_url_takes_endpoint_url(command):
    assert "--endpoint-url" in _help(command)


def test_readme_says_where_the_command_lives():
    readme = (REPO / "README.md").read_text()
    assert ".venv/bin/ikdata" in readme and ". .venv/bin/activate" in readme
    demo = (REPO / "tools" / "demo.py").read_text()
    assert ".venv/bin/ikdata show" in demo
