"""A replay report drawn as one static HTML file (plotly, its JavaScript inlined): no server, opens offline.

Sections, each present only when the report has the data:

- per diffusion trajectory and stream: ``e`` and the floor ``f`` against the step on a log scale, with
  the pass bound ``k·f + ε`` and the failing steps marked; the chain error against its bound; the
  per-frame PSNR of the decode check with its thresholds;
- per operator definition: the distribution of ``max_error_ratio`` over its cases (≤ 1 passes);
- per sampling definition: the pooled PIT histogram (flat when the engine samples the reference's
  distribution) and the verdict of every test.

Torch-free; needs the ``report`` extra (plotly). Exact zeros cannot sit on a log axis: they are drawn
at :data:`ZERO_AT` and their hover text says "0 (exact)".
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson

from ikdata.core import schema
from ikdata.core.errors import RecordError, UsageError
from ikdata.core.store import write_atomic

ZERO_AT = 1e-12
TRAJECTORY = "trajectory:"


def load_report(path: str | os.PathLike) -> dict[str, Any]:
    """Read and schema-check a replay report.

    Raises:
        RecordError: not JSON, or not a replay report (each problem named).
    """
    path = Path(path)
    try:
        report = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise RecordError("no replay report here; run 'ikdata replay' on the dataset first", path=str(path)) from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise RecordError(f"cannot read the replay report: {exc}", path=str(path)) from exc
    problems = schema.check("report", report, path=str(path))
    if problems:
        raise RecordError("not a replay report: " + "; ".join(f"{p.pointer} {p.message}" for p in problems[:5]),
                          path=str(path))
    return report


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise UsageError("drawing a report needs plotly: pip install 'ikdata[report]' (or pip install plotly)") from None
    return go


def _log(values: Iterable[Any]) -> tuple[list[float | None], list[str]]:
    shown, text = [], []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            shown.append(None)
            text.append("none")
        elif v == 0:
            shown.append(ZERO_AT)
            text.append("0 (exact)")
        elif isinstance(v, float) and math.isinf(v):
            shown.append(None)
            text.append("inf")
        else:
            shown.append(float(v))
            text.append(f"{v:.3g}")
    return shown, text


def trajectory_figures(case: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(title, figure) for one trajectory case: per stream e/f/bound and chain; the decode check's PSNR."""
    go = _plotly()
    m = case.get("trajectory") or {}
    figures = []
    streams = list(dict.fromkeys(s["stream"] for s in m.get("steps") or []))
    for stream in streams:
        steps = sorted((s for s in m["steps"] if s["stream"] == stream), key=lambda s: s["index"])
        x = [s["index"] for s in steps]
        fig = go.Figure()
        for key, name, style in (("e", "e (engine vs reference)", {"color": "#c0392b"}),
                                 ("f", f"f (floor: {m['attention'].get('reference')} vs {m['attention'].get('alt')})",
                                  {"color": "#2471a3"}),
                                 ("bound", f"bound {m['k']:g}·f + {m['eps']:g}", {"color": "#7f8c8d", "dash": "dash"})):
            y, text = _log(s.get(key) for s in steps)
            fig.add_trace(go.Scatter(x=x, y=y, text=text, name=name, mode="lines+markers", line=style,
                                     hovertemplate="step %{x}: %{text}<extra>" + key + "</extra>"))
        bad = [s for s in steps if not s.get("passed")]
        if bad:
            y, text = _log(s.get("e") for s in bad)
            fig.add_trace(go.Scatter(x=[s["index"] for s in bad], y=y, text=text, name="failing step",
                                     mode="markers", marker={"symbol": "x", "size": 14, "color": "#c0392b"}))
        fig.update_layout(title=f"{stream}: e and f per step (an exact 0 is drawn at 1e-12)", xaxis_title="step", xaxis_dtick=1, yaxis_title="relative L2",
                          yaxis_type="log", height=360, margin={"t": 50, "b": 40})
        figures.append((f"{stream}: e and f per step", fig))
        chain = go.Figure()
        for key, name in (("chain", "chain error"), ("chain_bound", "chain bound")):
            y, text = _log(s.get(key) for s in steps)
            chain.add_trace(go.Scatter(x=x, y=y, text=text, name=name, mode="lines+markers",
                                       hovertemplate="step %{x}: %{text}<extra>" + key + "</extra>"))
        chain.update_layout(title=f"{stream}: chain error (x_next vs the reference scheduler's update)",
                            xaxis_title="step", xaxis_dtick=1, yaxis_type="log", height=300, margin={"t": 50, "b": 40})
        figures.append((f"{stream}: chain error", chain))
    decode = m.get("decode") or {}
    if decode.get("psnr_db"):
        limits = decode.get("thresholds") or {}
        fig = go.Figure(go.Bar(x=list(range(len(decode["psnr_db"]))), y=decode["psnr_db"], name="PSNR per frame"))
        for key, name in (("psnr_worst_db", "worst-frame threshold"), ("psnr_mean_db", "mean threshold")):
            if limits.get(key) is not None:
                fig.add_hline(y=limits[key], line_dash="dash", annotation_text=f"{name} {limits[key]:g} dB")
        audio = (decode.get("audio") or {}).get("snr_db")
        fig.update_layout(title=f"decoded clip vs reference decode: mean {decode['psnr_mean_db']:.2f} dB, worst "
                                f"{decode['psnr_worst_db']:.2f} dB (frame {decode['worst_frame']})"
                                + (f"; audio SNR {audio:.1f} dB" if isinstance(audio, (int, float)) else ""),
                          xaxis_title="frame", yaxis_title="PSNR dB (luma, cap 100)", height=320,
                          margin={"t": 50, "b": 40})
        figures.append(("decode check", fig))
    return figures


def operator_figure(cases: list[Mapping[str, Any]]) -> Any | None:
    """One box per definition: the distribution of max_error_ratio over its cases (log scale; ≤ 1 passes)."""
    go = _plotly()
    by_definition: dict[str, list[float]] = {}
    for case in cases:
        for found in (case.get("metrics") or {}).values():
            ratio = found.get("max_error_ratio") if isinstance(found, Mapping) else None
            if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and math.isfinite(ratio):
                by_definition.setdefault(case["definition"], []).append(max(float(ratio), ZERO_AT))
    if not by_definition:
        return None
    fig = go.Figure()
    for name in sorted(by_definition):
        fig.add_trace(go.Box(y=by_definition[name], name=name, boxpoints="all", jitter=0.4))
    fig.add_hline(y=1.0, line_dash="dash", annotation_text="tolerance (ratio 1)")
    fig.update_layout(title="operator workloads: max_error_ratio per definition (0 drawn at 1e-12)",
                      yaxis_type="log", showlegend=False, height=max(380, 24 * len(by_definition)),
                      margin={"t": 50, "b": 160})
    return fig


def sampling_figures(report: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """(definition, figure, line) per sampling definition: each TV test against its simulated null, then the
    pooled PIT histogram with the verdict."""
    go = _plotly()
    found = []
    for group in report.get("sampling") or []:
        bins = [0] * 10
        for case in report.get("cases") or []:
            pit = ((case.get("sampling") or {}).get("pit") or {}) if case.get("definition") == group["definition"] else {}
            for i, count in enumerate(pit.get("histogram") or []):
                if i < 10:
                    bins[i] += int(count)
        pooled = [t for t in group.get("tests") or [] if t.get("test") == "pit" and t.get("histogram")]
        if pooled:  # the pooled test's own histogram: every draw it judged (docs/sampling.md)
            bins = [int(c) for c in pooled[0]["histogram"]][:10]
        for test in group.get("tests") or []:  # each TV test: the observed TV against its simulated null
            null = test.get("null_histogram") if test.get("test") == "tv" else None
            if not null:
                continue
            edges = null["edges"]
            tv_fig = go.Figure(go.Bar(x=[(a + b) / 2 for a, b in zip(edges, edges[1:])], y=null["counts"],
                                      name="TV under the null"))
            tv_fig.add_vline(x=test["tv"], line_color="red", annotation_text=f"observed {test['tv']:.4f}")
            tv_fig.add_vline(x=test["threshold"], line_dash="dash", annotation_text=f"threshold (alpha {test['alpha']:.2g})")
            tv_fig.update_layout(title=f"{group['definition']}: TV of {test['n']} draws vs its null ({test.get('key')})",
                                 xaxis_title="TV", yaxis_title="replicates", height=320, margin={"t": 50, "b": 40})
            found.append((group["definition"], tv_fig, f"TV test: p = {test['p_value']:.3g}, detectable TV "
                                                       f"{test.get('detectable_tv')}"))
        fig = go.Figure(go.Bar(x=[f"{i / 10:.1f}-{(i + 1) / 10:.1f}" for i in range(10)], y=bins, name="PIT"))
        total = sum(bins)
        if total:
            fig.add_hline(y=total / 10, line_dash="dash", annotation_text="uniform")
        fig.update_layout(title=f"{group['definition']}: PIT histogram ({total} draws), verdict {group['verdict']}",
                          xaxis_title="PIT value", yaxis_title="draws", height=320, margin={"t": 50, "b": 40})
        tests = "; ".join(f"{t['test']} n={t['n']} p={t['p_value']:.3g}" for t in group.get("tests") or [])
        found.append((group["definition"], fig, f"verdict {group['verdict']} at alpha {group['alpha']:g}: {tests}"))
    return found


def _summary_table(cases: list[Mapping[str, Any]]) -> str:
    rows = []
    for case in cases:
        m = case.get("trajectory") or {}
        worst, first, decode = m.get("worst") or {}, m.get("first_failure") or {}, m.get("decode") or {}
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            case["uuid"][:12], case["definition"][len(TRAJECTORY):], case["status"],
            f"{m.get('steps_passed', 0)}/{m.get('steps_total', 0)}",
            f"{worst.get('ratio', 0):.3g} at step {worst.get('step')} ({worst.get('stream')})" if worst else "-",
            f"step {first.get('step')} ({', '.join(first.get('streams') or [])}: {first.get('check')})" if first else "-",
            f"{decode['psnr_mean_db']:.2f} / {decode['psnr_worst_db']:.2f}" if decode.get("psnr_mean_db") is not None
            else (decode.get("error") or "-"))) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("trajectory", "pipeline", "status", "steps passed", "worst e/f",
                                              "first failure", "PSNR mean / worst dB"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def render(report: Mapping[str, Any], *, title: str = "ikdata replay report") -> str:
    """The whole HTML page (plotly.js inlined once)."""
    _plotly()
    import plotly.io as pio

    cases = list(report.get("cases") or [])
    trajectories = [c for c in cases if str(c.get("definition", "")).startswith(TRAJECTORY)]
    operators = [c for c in cases if not str(c.get("definition", "")).startswith(TRAJECTORY)
                 and not (c.get("tolerance") or {}).get("samples")]
    parts: list[str] = []
    first = True

    def plot(fig: Any, div_id: str) -> str:
        nonlocal first
        snippet = pio.to_html(fig, full_html=False, include_plotlyjs=True if first else False, div_id=div_id)
        first = False
        return snippet

    counts: dict[str, int] = {}
    for case in cases:
        counts[case["status"]] = counts.get(case["status"], 0) + 1
    parts.append(f"<p class='meta'>{len(cases)} cases: "
                 + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                 + f" &middot; device {html.escape(str(report.get('device')))} &middot; torch "
                 f"{html.escape(str(report.get('torch')))} &middot; ikdata {html.escape(str(report.get('ikdata_version')))}</p>")
    if trajectories:
        parts.append("<h2>Diffusion trajectories</h2>" + _summary_table(trajectories))
        for n, case in enumerate(trajectories):
            m = case.get("trajectory") or {}
            parts.append(f"<section class='trajectory' id='trajectory-{case['uuid'][:12]}'><h3>{case['uuid'][:12]} "
                         f"{html.escape(case['definition'][len(TRAJECTORY):])}: {case['status']}</h3>")
            if case.get("reason"):
                parts.append(f"<p class='reason'>{html.escape(case['reason'])}</p>")
            if m:
                parts.append(f"<p class='meta'>pass when e &le; {m.get('k'):g}&middot;f + {m.get('eps'):g}; attention "
                             f"{html.escape(str(m.get('attention')))}; level: {html.escape(str(m.get('level')))}</p>")
            for i, (name, fig) in enumerate(trajectory_figures(case)):
                parts.append(plot(fig, f"t{n}-{i}"))
            parts.append("</section>")
    fig = operator_figure(operators)
    if fig is not None:
        parts.append("<h2>Operator workloads</h2>" + plot(fig, "operators"))
    sampling = sampling_figures(report)
    if sampling:
        parts.append("<h2>Sampling</h2>")
        for i, (name, fig, line) in enumerate(sampling):
            parts.append(plot(fig, f"sampling-{i}") + f"<p class='meta'>{html.escape(line)}</p>")
    if first:
        parts.append("<p>Nothing to draw: the report has no trajectory, operator metrics or sampling verdicts.</p>")
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.3em .6em;font-size:.9em}.reason{color:#a93226}.meta{color:#555}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>\n")


def write_html(report: Mapping[str, Any], out: str | os.PathLike, *, title: str = "ikdata replay report") -> Path:
    """Render and write the page atomically; returns its path."""
    path = Path(out)
    write_atomic(path, [render(report, title=title).encode()])
    return path


def report_path_for(target: str | os.PathLike) -> Path:
    """A report file as given, or a dataset folder's ``reports/replay.json``."""
    target = Path(target)
    if target.is_dir():
        return target / "reports" / "replay.json"
    return target


__all__ = ["ZERO_AT", "load_report", "operator_figure", "render", "report_path_for", "sampling_figures",
           "trajectory_figures", "write_html"]
