"""Lineage's validation line shows a family's own metrics by name (issue 51: a sampler row's ended in a bare
"samples: ", its metrics being none of an operator's)."""

from __future__ import annotations

from ikdata.cli._read import _metrics


def test_a_sampler_rows_metrics_are_shown_by_name():
    line = _metrics({"samples": {"alpha": 0.001, "judged": 1, "p_value": None, "positions": 1, "tests": 0,
                                 "too_small": False}})
    assert line == "samples: alpha 0.001, judged 1, positions 1, tests 0"


def test_an_operators_metrics_keep_their_short_names():
    line = _metrics({"C": {"max_abs_error": 4.9e-4, "relative_rms": 1.6e-3, "tolerance": "dtype"}})
    assert line == "C: max abs 0.00049, rel rms 0.0016"


def test_an_output_with_no_figure_says_so():
    assert _metrics({"samples": {"too_small": True, "p_value": None}}) == "samples: no figures"
