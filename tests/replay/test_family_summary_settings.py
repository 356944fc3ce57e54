"""A family declared with ``settings`` and ``summary`` hooks is honoured by replay: the command line makes its
settings from the options and prints its summary, and replay() hands its settings to its finish."""

from __future__ import annotations

import sys
import types

import pytest
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.core import features
from ikdata.judging import families
from ikdata.judging.summary_table import SummaryTable
from ikdata.replay.runner import replay


@pytest.fixture
def test_family(monkeypatch):
    seen: dict[str, object] = {}
    module = types.ModuleType("ikdata_summary_family")
    module.settings = lambda options: {"from": options["floor_k"]}
    module.finish = lambda run, shard=None, settings=None: seen.setdefault("settings", settings)
    module.summary = lambda report: ["the test family saw it", SummaryTable(  # handed the typed Report
        "test family table", ("uuid", "status"), tuple((c.uuid[:8], str(c.status)) for c in report.cases),
        ("a note under the table",), frozenset(c.definition for c in report.cases))]
    monkeypatch.setitem(sys.modules, "ikdata_summary_family", module)
    family = families.Family("testfamily", settings="ikdata_summary_family:settings",
                             finish="ikdata_summary_family:finish", summary="ikdata_summary_family:summary")
    with features.registered(features.Feature("testfamily", family=family)):
        yield seen


def test_the_command_makes_each_familys_settings_and_prints_its_summary(build, test_family):
    built = build(2)
    result = CliRunner().invoke(app, ["replay", str(built.root), "--definitions", str(built.definitions),
                                      "--floor-k", "3.5", "--no-reuse"])
    assert result.exit_code == 0, result.output
    assert test_family["settings"] == {"from": 3.5}
    assert "the test family saw it" in result.output and "test family table" in result.output
    assert "a note under the table" in result.output
    assert "gemm_n4_k8: 2 cases" not in result.output  # the family's table covers that definition
    assert "2 passed — report:" in result.output


def test_replay_takes_a_familys_settings_by_its_name(build, test_family):
    built = build(1)
    replay(ikdata.open(built.root, definitions=[built.definitions]), reuse=False, testfamily={"k": 1})
    assert test_family["settings"] == {"k": 1}


def test_a_keyword_naming_no_family_is_refused(build):
    built = build(1)
    with pytest.raises(TypeError, match="nofamily"):
        replay(ikdata.open(built.root, definitions=[built.definitions]), reuse=False, nofamily=1)
