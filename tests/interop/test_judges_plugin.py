"""Issue 11 item 5: judges a user can add, under the trust rule; validate rejects unknown judge names.

A judge's code runs only when trusted: shipped, installed as an ``ikdata.judges`` entry point
(listed from metadata, imported only when a definition that names it is judged), or in a
module the user names (``IKDATA_JUDGES``). A definition only names a judge; it cannot bring one.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.core import judge_registry
from ikdata.core.errors import UsageError

runner = CliRunner()

PLUGIN = """
from pathlib import Path

from ikdata.core.judge_registry import Judge

Path({marker!r}).write_text("imported")


def worst_row(actual, expected):
    rows = (actual - expected).norm(dim=-1) / expected.norm(dim=-1).clamp_min(1e-12)
    return {{"worst_row_rms": float(rows.max())}}


{variable} = {value}
"""


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch):
    monkeypatch.delenv(judge_registry.ENV, raising=False)
    judge_registry.forget_registered()
    yield
    judge_registry.forget_registered()


def write_plugin(folder: Path, name: str = "row_judges", *, judge: str = "worst_row") -> tuple[Path, Path]:
    """A judge module in ``folder``; it writes a marker file when imported. Returns (module, marker)."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / f"{name}.imported"
    value = f'[Judge("{judge}", worst_row, {{"worst_row_rms": 0.01}}, "rows are independent")]'
    (folder / f"{name}.py").write_text(PLUGIN.format(marker=str(marker), variable="IKDATA_JUDGES", value=value))
    return folder / f"{name}.py", marker


def judged_dataset(tmp_path: Path, judge: str = "worst_row") -> tuple[Path, Path]:
    """A dataset whose definition names ``judge``; its captured outputs are 0.5% off the reference:
    outside the float32 tolerance, inside a 1% row-RMS bound. Returns (dataset, definitions folder)."""
    from foundation_helpers import gemm_definition_record, write_definition

    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    record = gemm_definition_record()
    record["judge"] = {"name": judge, "reason": "test"}
    definitions = tmp_path / "defs"
    write_definition(definitions, record)
    definition = Definition.from_dict(record, origin=USER)
    root = tmp_path / "ds"
    writer = DatasetWriter(root)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    for i in range(2):
        a = rng.standard_normal((i + 2, 8)).astype(np.float32)
        writer.add(definition, {"A": a, "W": w}, {"C": (a @ w.T) * np.float32(1.005)},
                   {"engine": "test", "request_id": f"r{i}", "step": i})
    writer.commit()
    return root, definitions


class TestUserModule:
    def test_a_judge_from_a_module_the_user_names_judges_replay(self, tmp_path, monkeypatch):
        from ikdata.replay.runner import replay

        module, marker = write_plugin(tmp_path / "plugins")
        root, definitions = judged_dataset(tmp_path)
        monkeypatch.setenv(judge_registry.ENV, str(module))
        assert ikdata.validate(ikdata.open(root)).problems == []
        report = replay(ikdata.open(root, definitions=[definitions]), reuse=False).report
        assert [c["status"] for c in report["cases"]] == ["passed", "passed"]
        case = report["cases"][0]
        assert case["tolerance"]["C"]["judge"] == "worst_row"
        assert case["tolerance"]["C"]["bounds"] == {"worst_row_rms": 0.01}
        assert case["chosen_by"] == {"C": "definition judge"}
        assert 0.004 < case["metrics"]["C"]["worst_row_rms"] < 0.006
        assert case["metrics"]["C"]["mismatched_fraction"] > 0  # the default tolerance alone would fail it
        assert marker.exists()

    def test_register_module_by_dotted_name(self, tmp_path, monkeypatch):
        write_plugin(tmp_path / "plugins", "dotted_judges", judge="dotted")
        monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
        assert judge_registry.register_module("dotted_judges") == ["dotted"]
        assert "dotted" in judge_registry.known_names()

    def test_a_module_may_not_replace_a_shipped_judge(self, tmp_path):
        module, _ = write_plugin(tmp_path / "plugins", "shadow", judge="gdn_chunk_state")
        with pytest.raises(UsageError, match="redefines the shipped judge 'gdn_chunk_state'"):
            judge_registry.register_module(str(module))


class TestUnknownJudge:
    def test_validate_rejects_it_with_file_line_and_the_known_names(self, tmp_path):
        _, marker = write_plugin(tmp_path / "plugins")
        root, _ = judged_dataset(tmp_path)
        result = runner.invoke(app, ["validate", str(root), "--json"])
        assert result.exit_code == 1, result.output
        [problem] = json.loads(result.stdout)["problems"]
        path = root / problem["path"]
        lines = path.read_text().splitlines()
        assert problem["pointer"] == "/judge/name" and problem["code"] == "unknown-judge"
        assert '"worst_row"' in lines[problem["line"] - 1]
        assert problem["message"].startswith("unknown judge 'worst_row'; known judges: gdn_chunk_state, "
                                             "relative_error, sampling. ")
        assert "IKDATA_JUDGES=MODULE" in problem["message"]
        assert not marker.exists()  # nothing the dataset names is imported

    def test_replay_without_the_module_runs_none_of_its_code(self, tmp_path):
        from ikdata.replay.runner import replay

        _, marker = write_plugin(tmp_path / "plugins")
        root, definitions = judged_dataset(tmp_path)
        report = replay(ikdata.open(root, definitions=[definitions]), reuse=False).report
        assert {c["status"] for c in report["cases"]} == {"error"}
        assert "judge 'worst_row' is unknown" in report["cases"][0]["reason"]
        assert not marker.exists()


class TestEntryPoint:
    @pytest.fixture
    def installed(self, tmp_path, monkeypatch) -> Path:
        """A distribution on sys.path declaring an ``ikdata.judges`` entry point (as pip would install it)."""
        site = tmp_path / "site"
        site.mkdir()
        marker = site / "ep_judges.imported"
        value = 'Judge("ep_row", worst_row, {"worst_row_rms": 0.01}, "rows are independent")'
        (site / "ep_judges.py").write_text(PLUGIN.format(marker=str(marker), variable="EP_ROW", value=value))
        info = site / "ep_judges-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-judges\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(textwrap.dedent("""
            [ikdata.judges]
            ep_row = ep_judges:EP_ROW
        """))
        monkeypatch.syspath_prepend(str(site))
        return marker

    def test_listed_without_importing_and_loaded_when_judged(self, installed, tmp_path):
        from ikdata.replay.runner import replay

        marker = installed
        assert judge_registry.entry_point_names() == {"ep_row": "ep_judges:EP_ROW"}
        root, definitions = judged_dataset(tmp_path, judge="ep_row")
        assert ikdata.validate(ikdata.open(root)).problems == []
        assert not marker.exists()  # validate lists names from metadata only
        report = replay(ikdata.open(root, definitions=[definitions]), reuse=False).report
        assert [c["status"] for c in report["cases"]] == ["passed", "passed"]
        assert report["cases"][0]["tolerance"]["C"]["judge"] == "ep_row"
        assert marker.exists()
