"""The report page draws each judge family through its declared ``figures`` hook: a family added by
declaration gets its section and its words in the case tables, and the cases it draws leave the operators'
default section; a family that draws nothing leaves every case to the operators."""

from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("plotly")

from ikdata.judging import families  # noqa: E402
from ikdata.ops.report_html import draw  # noqa: E402
from ikdata.ops.report_parts import CaseView, FamilySection, escape  # noqa: E402


def _report() -> dict:
    cases = [{"definition": "weird_op", "uuid": "w" * 32, "status": "failed", "reason": "odd",
              "metrics": {"out": {"max_error_ratio": 9.0}}},
             {"definition": "gemm", "uuid": "g" * 32, "status": "passed", "metrics": {"C": {"max_error_ratio": 0.5}}}]
    return {"format": "ikdata-replay-report", "device": "cpu", "cases": cases}


@pytest.fixture
def declare(monkeypatch):
    """Declare a family whose figures hook is ``figures``, registered for the test alone."""
    from ikdata.core import features

    def declared(name: str, figures) -> None:
        module = types.ModuleType(name)
        module.figures = figures
        monkeypatch.setitem(sys.modules, name, module)
        features.register(features.Feature("weird", family=families.Family("weird", figures=f"{name}:figures")))

    yield declared
    features.unregister("weird")


def test_a_declared_family_draws_its_section_and_its_cases_leave_the_operators(declare):
    seen = []

    def figures(report, cases, checks):
        seen.append([n for n, _ in cases])
        mine = [(n, c) for n, c in cases if c.get("definition") == "weird_op"]
        section = FamilySection([f"<section id='weird'><h2>Weird {escape('<ops>')}</h2></section>"])
        section.cases.update((n, CaseView("WEIRD", "weirdness 9", "weird")) for n, _ in mine)
        return section

    declare("ikdata_test_figures_drawn", figures)
    page, problems = draw(_report())
    assert problems == [] and seen == [[0, 1]]
    assert "<section id='weird'><h2>Weird &lt;ops&gt;</h2></section>" in page
    failing = page[page.index("<h2 id='failing'>"):page.index("</table>", page.index("<h2 id='failing'>"))]
    assert "<td>WEIRD</td>" in failing and "<td>weirdness 9</td>" in failing and "href='#weird'" in failing
    operators = page[page.index("<section id='operators'>"):]
    assert "gemm" in operators and "weird_op" not in operators.split("</section>")[0]


def test_a_family_that_draws_nothing_leaves_every_case_to_the_operators(declare):
    declare("ikdata_test_figures_none", lambda report, cases, checks: None)
    page, _ = draw(_report())
    failing = page[page.index("<h2 id='failing'>"):page.index("</table>", page.index("<h2 id='failing'>"))]
    assert "<td>weird_op</td>" in failing and "max_error_ratio 9 (out); odd" in failing
    assert "href='#operators'" in failing
