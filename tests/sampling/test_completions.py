"""ikdata import of OpenAI-compatible completions: bad input is named by file and line; good input replays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ikdata.core.errors import ProblemsFound
from ikdata.sampling.completions import import_completions, read_completions


def _line(**changes):
    record = {"prompt": "The capital of France is", "model": "tiny", "position": 0, "vocab_size": 1000,
              "settings": {"temperature": 0.7, "top_k": 5, "top_p": 1.0, "min_p": 0.0},
              "top_logprobs": [{"token": f"token_id:{i}", "logprob": lp}
                               for i, lp in enumerate([-0.5, -1.5, -2.0, -2.6, -3.1, -4.5, -5.0, -6.0])],
              "draws": [{"seed": 0, "token": "token_id:0"}]}
    record.update(changes)
    return record


def _write(tmp_path, records):
    path = tmp_path / "draws.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


BAD = {
    "positive logprob": (dict(top_logprobs=[{"token": "a", "logprob": 0.5}]),
                         "/top_logprobs/0/logprob logprob 0.5 is positive"),
    "NaN logprob": (dict(top_logprobs=[{"token": "a", "logprob": float("nan")}]),
                    "/top_logprobs/0/logprob logprob must be a number, got nan"),
    "empty top-K": (dict(top_logprobs=[]), "/top_logprobs top_logprobs must list at least one"),
    "top_p above 1": (dict(settings={"temperature": 0.7, "top_p": 1.5}), "/settings/top_p top_p must be in (0, 1]"),
    "negative temperature": (dict(settings={"temperature": -0.1}), "/settings/temperature temperature must be"),
    "token outside the vocabulary": (dict(draws=[{"seed": 1, "token": "token_id:1000"}]),
                                     "/draws/0/token drawn token id 1000 is outside the vocabulary (0..999)"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_names_file_and_line(tmp_path, name):
    change, message = BAD[name]
    path = _write(tmp_path, [_line(), _line(**change)])
    with pytest.raises(ProblemsFound) as caught:
        read_completions(path)
    text = str(caught.value)
    assert f"{path}:2" in text and message in text, text
    assert not (tmp_path / "out").exists()
    with pytest.raises(ProblemsFound):
        import_completions(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written


def test_every_bad_line_is_reported(tmp_path):
    path = _write(tmp_path, [_line(top_logprobs=[]), _line(), _line(settings={"temperature": -1})])
    with pytest.raises(ProblemsFound) as caught:
        read_completions(path)
    assert {p.line for p in caught.value.problems} == {1, 3}


def _server_draws(n, rng, shift=0.0):
    """A server following the Hugging Face order: top_k 5 of the listed tokens at temperature 0.7."""
    lp = np.array([-0.5, -1.5, -2.0, -2.6, -3.1])
    w = np.exp(lp / 0.7)
    p = w / w.sum()
    p[0] -= shift
    p[4] += shift
    return rng.choice(5, size=n, p=p)


@pytest.mark.parametrize("shift, status", [(0.0, "passed"), (0.15, "failed")])
def test_import_then_replay_judges_the_draws(tmp_path, shift, status):
    import ikdata
    from ikdata.replay.runner import replay

    rng = np.random.default_rng(3)
    drawn = _server_draws(400, rng, shift)
    path = _write(tmp_path, [_line(draws=[{"seed": s, "token": f"token_id:{int(t)}"} for s, t in enumerate(drawn)])])
    result = import_completions(path, tmp_path / "ds")
    assert len(result.added) == 1
    report = replay(ikdata.open(tmp_path / "ds"), reuse=False).report
    case = report["cases"][0]
    assert case["status"] == status, case.get("reason")
    test = report["sampling"][0]["tests"][0]
    assert test["test"] == "tv" and test["n"] == 400 and test["alpha"] == 1e-3
    assert test["detectable_tv"] < 0.15 and "simulated" in test["null"]


def test_import_rechecks_sampling_verdicts_and_shards_combine(tmp_path):
    import orjson

    import ikdata
    from ikdata.importing.apply import import_dataset
    from ikdata.replay.report import combine
    from ikdata.replay.runner import replay

    rng = np.random.default_rng(4)
    lines = [_line(draws=[{"seed": s + 1000 * i, "token": f"token_id:{int(t)}"}
                          for s, t in enumerate(_server_draws(300, rng))],
                   prompt=f"prompt {i}") for i in range(3)]
    import_completions(_write(tmp_path, lines), tmp_path / "ds")
    ds = ikdata.open(tmp_path / "ds")
    whole = replay(ds, reuse=False).report
    assert [c["status"] for c in whole["cases"]] == ["passed"] * 3
    shards = [replay(ikdata.open(tmp_path / "ds"), shard=f"{i}/2", reuse=False).report for i in (1, 2)]
    combined = combine(shards)
    assert [c["status"] for c in combined["cases"]] == ["passed"] * 3
    p_values = [t["p_value"] for t in whole["sampling"][0]["tests"]]
    assert [t["p_value"] for t in combined["sampling"][0]["tests"]] == p_values
    resumed = replay(ikdata.open(tmp_path / "ds"), resume=True, reuse=False).report
    assert resumed["sampling"][0]["tests"] == whole["sampling"][0]["tests"]
    result = import_dataset(tmp_path / "ds", tmp_path / "shared")
    assert len(result.added) == 3
    # a report that claims a looser alpha is not trusted
    path = tmp_path / "ds" / "reports" / "replay.json"
    report = orjson.loads(path.read_bytes())
    for case in report["cases"]:
        case["tolerance"]["samples"]["alpha"] = 1e-9
    path.write_bytes(orjson.dumps(report))
    from ikdata.core.verdicts import recheck

    assert any("alpha" in r for r in recheck(report["cases"][0], report))


def test_cli_import_of_completions(tmp_path):
    from typer.testing import CliRunner

    from ikdata.cli import app

    good = _write(tmp_path, [_line(draws=[{"seed": s, "token": "token_id:1"} for s in range(5)])])
    result = CliRunner().invoke(app, ["import", str(good), str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    assert "added 1 sampling workload(s) (5 draws)" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_line()) + "\n" + json.dumps(_line(settings={"temperature": 0.7, "top_p": 2})) + "\n")
    result = CliRunner().invoke(app, ["import", str(bad), str(tmp_path / "other")])
    assert result.exit_code == 1
    assert f"{bad}:2: /settings/top_p top_p must be in (0, 1], got 2" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "other").exists()


def test_html_report_draws_tv_against_its_null_and_the_pit(tmp_path):
    pytest.importorskip("plotly")
    import ikdata
    from ikdata.sampling.report_figures import sampling_figures
    from ikdata.replay.runner import replay

    rng = np.random.default_rng(5)
    lines = [_line(draws=[{"seed": s, "token": f"token_id:{int(t)}"} for s, t in enumerate(_server_draws(200, rng))])]
    import_completions(_write(tmp_path, lines), tmp_path / "ds")
    report = replay(ikdata.open(tmp_path / "ds"), reuse=False).report
    tv = report["sampling"][0]["tests"][0]
    assert sum(tv["null_histogram"]["counts"]) == 20_000
    figures = sampling_figures(report)
    titles = [fig.layout.title.text for _, fig, _ in figures if fig is not None]
    assert any("TV of 200 draws vs its null" in t for t in titles)
    # top_logprobs give no PIT: no empty histogram of 0 draws, a line saying why (issue 39 finding 11)
    assert not any("PIT histogram" in t for t in titles) and "no draw had a PIT value" in figures[-1][2]
