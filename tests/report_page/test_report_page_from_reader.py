"""The report page takes the typed report the one reader gives (core.cases.read_report) and draws the
same page as from the report's JSON: typing the report changes nothing the user sees."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("plotly")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_page_helpers import report_of_100_cases  # noqa: E402

from ikdata.core.cases import read_report  # noqa: E402
from ikdata.ops.report_html import draw  # noqa: E402


def test_a_report_read_by_the_one_reader_draws_the_page_its_json_draws(tmp_path):
    document = report_of_100_cases()
    document["format"] = "ikdata-replay/1"
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(document))
    typed = read_report(path)
    assert len(typed.cases) == 100
    page, problems = draw(typed, path=str(path))
    assert (page, problems) == draw(json.loads(path.read_text()), path=str(path))
    assert "Failing cases" in page and problems == []
