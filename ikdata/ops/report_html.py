"""A replay report drawn as a static HTML page (plotly): no server, opens offline.

plotly.js (4.6 MiB) is included once per page: by default as one file beside the page
(``plotly-<version>.min.js``, shared by every page in that folder; the page itself stays under
1 MiB for 100 cases), or inlined for a single file to send around (``self_contained``).

Sections, each present only when the report has the data:

- the failing cases: one row each (case, definition, status, what failed), linked to its chart;

- per diffusion trajectory and stream: ``e`` and the floor ``f`` against the step on a log scale, with
  the pass bound ``k·f + ε`` and the failing steps marked; the chain error against its bound; the
  per-frame PSNR of the decode check with its thresholds;
- per operator definition: the distribution of ``max_error_ratio`` over its cases (≤ 1 passes), one
  horizontal box per definition, worst first, failing cases marked;
- per sampling definition: the pooled PIT histogram (flat when the engine samples the reference's
  distribution) and the verdict of every test; a definition whose draws were all greedy says so in words
  (every draw checked to be the argmax; no statistical test applies) instead of drawing an empty histogram;
- every case, in a collapsible table (closed when nothing failed), so a page where everything passed still
  lists what was judged.

A report is data from a dataset, so the page treats it as hostile: every value reaches the page through
:func:`_e` (HTML text and attributes) or :func:`_label` (plotly's text), element ids are counters, and every
value is type-checked before it is formatted. A value of the wrong type (a string where a number belongs, a
step index that is not an integer) is drawn as a gap, shown as "not a number", and returned as a
:class:`~ikdata.core.problems.Problem` naming its JSON pointer; the page lists them at the top.

Torch-free; needs the ``report`` extra (plotly). Exact zeros cannot sit on a log axis: they are drawn on
a tick labelled "0" one decade below the smallest non-zero value (:func:`_zeros_on_log_axis`), so the axis
spans the data, not twelve more decades; their hover text says "0 (exact)"; a chart of zeros alone is drawn
on a linear axis. Every axis is titled and its numbers are in scientific notation (``1e-12``, never SI
prefixes such as ``1p``).
"""

from __future__ import annotations

import html
import itertools
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson

from ikdata.core import schema
from ikdata.core.errors import RecordError, UsageError
from ikdata.core.problems import Problem
from ikdata.core.store import write_atomic

TRAJECTORY = "trajectory:"
NOT_A_NUMBER = "not a number"


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


def _e(value: Any) -> str:
    """A record value as HTML text or a quoted attribute value: always escaped."""
    return html.escape(str(value), quote=True)


def _label(value: Any) -> str:
    """A record value inside plotly text (titles, trace names, annotations): plotly reads a little HTML there
    and decodes ``&lt;`` ``&gt;`` ``&amp;``, so escaping those shows the value as itself."""
    return html.escape(str(value), quote=False)


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _axes(fig: Any, **layout: Any) -> Any:
    """Lay a figure out: every axis in scientific notation (plotly's default SI prefixes read ``1p``, ``10n``)."""
    fig.update_layout(**layout)
    fig.update_xaxes(exponentformat="e", showexponent="all")
    fig.update_yaxes(exponentformat="e", showexponent="all")
    return fig


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class Checks:
    """The values of one report that were not what the page expected, each a located :class:`Problem`."""

    path: str = "report"
    problems: list[Problem] = field(default_factory=list)

    def wrong(self, pointer: str, expected: str, value: Any) -> None:
        self.problems.append(Problem(self.path, f"expected {expected}, found {_shown(value)}", pointer=pointer,
                                     code="report-value"))

    def number(self, value: Any, pointer: str) -> float | None:
        """``value`` as a float; None when absent or (a problem) not a number."""
        if value is None:
            return None
        if _is_number(value):
            try:
                return float(value)
            except OverflowError:  # an integer too large for a float
                return math.inf if value > 0 else -math.inf
        self.wrong(pointer, "a number", value)
        return None

    def integer(self, value: Any, pointer: str) -> int | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if value is not None:
            self.wrong(pointer, "an integer", value)
        return None

    def mapping(self, value: Any, pointer: str) -> Mapping[str, Any]:
        if isinstance(value, Mapping):
            return value
        if value is not None:
            self.wrong(pointer, "an object", value)
        return {}

    def items(self, value: Any, pointer: str) -> list[Any]:
        if isinstance(value, list):
            return value
        if value is not None:
            self.wrong(pointer, "a list", value)
        return []

    def text(self, value: Any, pointer: str) -> str | None:
        if isinstance(value, str):
            return value
        if value is not None:
            self.wrong(pointer, "a string", value)
        return None

    def fmt(self, value: Any, pointer: str, spec: str, *, missing: str = "-") -> str:
        """``value`` formatted with ``spec``; ``missing`` when absent, "not a number" (a problem) when not one."""
        if value is None:
            return missing
        number = self.number(value, pointer)
        return NOT_A_NUMBER if number is None else format(number, spec)


def _log(values: Iterable[tuple[Any, str]], checks: Checks) -> tuple[list[float | None], list[str]]:
    """(value, pointer) pairs as y values for a log axis and their hover text."""
    shown, text = [], []
    for raw, pointer in values:
        v = checks.number(raw, pointer)
        if v is None:
            shown.append(None)
            text.append("none" if raw is None else NOT_A_NUMBER)
        elif math.isnan(v):
            shown.append(None)
            text.append("none")
        elif v == 0:
            shown.append(0.0)  # placed by _zeros_on_log_axis once every trace of the figure is known
            text.append("0 (exact)")
        elif math.isinf(v):
            shown.append(None)
            text.append("inf")
        else:
            shown.append(v)
            text.append(f"{v:.3g}")
    return shown, text


def _zeros_on_log_axis(fig: Any, axis: str = "y") -> Any:
    """Exact zeros of a log axis (``axis``: "x" or "y") drawn as zeros: on a tick labelled "0" one decade below the
    smallest non-zero value, the other ticks powers of ten; a figure of zeros alone gets a linear axis."""
    values = [v for trace in fig.data for v in (getattr(trace, axis) or ()) if isinstance(v, (int, float))
              and math.isfinite(v)]
    if not any(v == 0 for v in values):
        return fig
    positive = [v for v in values if v > 0]
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    if not positive:
        return update(type="linear")
    low = math.floor(math.log10(min(positive))) - 1
    high = math.ceil(math.log10(max(positive)))
    zero = 10.0 ** low
    for trace in fig.data:
        found = getattr(trace, axis)
        if found is not None:
            trace.update({axis: [zero if isinstance(v, (int, float)) and v == 0 else v for v in found]})
    step = max(1, (high - low) // 12)  # at most about a dozen ticks
    powers = list(range(low + step, high + 1, step))
    return update(tickmode="array", tickvals=[zero] + [10.0 ** k for k in powers],
                  ticktext=["0"] + [_power(k) for k in powers])


def _power(k: int) -> str:
    """10**k as plotly's scientific tick labels write it: 1e-5, 0.1, 1, 10, 100, 1e+3."""
    return {-1: "0.1", 0: "1", 1: "10", 2: "100"}.get(k, f"1e{k:+d}" if k > 0 else f"1e{k}")


def _steps(m: Mapping[str, Any], pointer: str, checks: Checks) -> list[tuple[str, int, Mapping[str, Any], str]]:
    """(stream, index, step, its pointer) of every well-formed step; the others are problems."""
    found = []
    for i, s in enumerate(checks.items(m.get("steps"), pointer + "/steps")):
        at = f"{pointer}/steps/{i}"
        if not isinstance(s, Mapping):
            checks.wrong(at, "an object", s)
            continue
        stream = s.get("stream")
        index = s.get("index")
        if not isinstance(stream, str):
            checks.wrong(at + "/stream", "a string", stream)
        elif not isinstance(index, int) or isinstance(index, bool):
            checks.wrong(at + "/index", "an integer step index", index)
        else:
            found.append((stream, index, s, at))
    return found


def trajectory_figures(case: Mapping[str, Any], checks: Checks | None = None,
                       pointer: str = "") -> list[tuple[str, Any]]:
    """(title, figure) for one trajectory case: per stream e/f/bound and chain; the decode check's PSNR."""
    go = _plotly()
    checks = checks if checks is not None else Checks()
    m = checks.mapping(case.get("trajectory"), pointer + "/trajectory")
    at = pointer + "/trajectory"
    figures = []
    steps = _steps(m, at, checks)
    attention = checks.mapping(m.get("attention"), at + "/attention")
    k = checks.fmt(m.get("k"), at + "/k", "g", missing="?")
    eps = checks.fmt(m.get("eps"), at + "/eps", "g", missing="?")
    for stream in dict.fromkeys(s[0] for s in steps):
        mine = sorted((s for s in steps if s[0] == stream), key=lambda s: s[1])
        x = [s[1] for s in mine]
        name = _label(stream)
        fig = go.Figure()
        for key, trace, style in (
                ("e", "e (engine vs reference)", {"color": "#c0392b"}),
                ("f", f"f (floor: {_label(attention.get('reference'))} vs {_label(attention.get('alt'))})",
                 {"color": "#2471a3"}),
                ("bound", f"bound {k}·f + {eps}", {"color": "#7f8c8d", "dash": "dash"})):
            y, text = _log(((s[2].get(key), f"{s[3]}/{key}") for s in mine), checks)
            fig.add_trace(go.Scatter(x=x, y=y, text=text, name=trace, mode="lines+markers", line=style,
                                     hovertemplate="step %{x}: %{text}<extra>" + key + "</extra>"))
        bad = [s for s in mine if not s[2].get("passed")]
        if bad:
            y, text = _log(((s[2].get("e"), f"{s[3]}/e") for s in bad), checks)
            fig.add_trace(go.Scatter(x=[s[1] for s in bad], y=y, text=text, name="failing step",
                                     mode="markers", marker={"symbol": "x", "size": 14, "color": "#c0392b"}))
        _axes(fig, title=f"{name}: e and f per step", xaxis_title="step",
              xaxis_dtick=1, yaxis_title="relative L2 error of the denoiser output", yaxis_type="log", height=360,
              margin={"t": 50, "b": 40})
        figures.append((f"{name}: e and f per step", _zeros_on_log_axis(fig)))
        chain = go.Figure()
        for key, trace in (("chain", "chain error"), ("chain_bound", "chain bound")):
            y, text = _log(((s[2].get(key), f"{s[3]}/{key}") for s in mine), checks)
            chain.add_trace(go.Scatter(x=x, y=y, text=text, name=trace, mode="lines+markers",
                                       hovertemplate="step %{x}: %{text}<extra>" + key + "</extra>"))
        _axes(chain, title=f"{name}: chain error (x_next vs the reference scheduler's update)",
              xaxis_title="step", xaxis_dtick=1, yaxis_title="relative L2 error of x_next", yaxis_type="log",
              height=300, margin={"t": 50, "b": 40})
        figures.append((f"{name}: chain error", _zeros_on_log_axis(chain)))
    decode = checks.mapping(m.get("decode"), at + "/decode")
    psnr = checks.items(decode.get("psnr_db"), at + "/decode/psnr_db")
    if psnr:
        d = at + "/decode"
        limits = checks.mapping(decode.get("thresholds"), d + "/thresholds")
        y = [checks.number(v, f"{d}/psnr_db/{i}") for i, v in enumerate(psnr)]
        fig = go.Figure(go.Bar(x=list(range(len(y))), y=y, name="PSNR per frame"))
        for key, name in (("psnr_worst_db", "worst-frame threshold"), ("psnr_mean_db", "mean threshold")):
            limit = checks.number(limits.get(key), f"{d}/thresholds/{key}")
            if limit is not None and math.isfinite(limit):
                fig.add_hline(y=limit, line_dash="dash", annotation_text=f"{name} {limit:g} dB")
        audio = checks.mapping(decode.get("audio"), d + "/audio").get("snr_db")
        audio_text = checks.fmt(audio, d + "/audio/snr_db", ".1f", missing="")
        worst_frame = decode.get("worst_frame")
        worst_frame = worst_frame if checks.integer(worst_frame, d + "/worst_frame") is not None else "?"
        _axes(fig, title=f"decoded clip vs reference decode: mean "
                    f"{checks.fmt(decode.get('psnr_mean_db'), d + '/psnr_mean_db', '.2f')} dB, worst "
                    f"{checks.fmt(decode.get('psnr_worst_db'), d + '/psnr_worst_db', '.2f')} dB "
                    f"(frame {worst_frame})" + (f"; audio SNR {audio_text} dB" if audio_text else ""),
              xaxis_title="frame", yaxis_title="PSNR dB (luma, cap 100)", height=320, margin={"t": 50, "b": 40})
        figures.append(("decode check", fig))
    return figures


def operator_figure(cases: list[Mapping[str, Any]], checks: Checks | None = None,
                    pointers: list[str] | None = None) -> Any | None:
    """One horizontal box per definition: the distribution of max_error_ratio over its cases (log scale; ≤ 1
    passes), the worst definition on top, each case past the tolerance marked and named on hover."""
    go = _plotly()
    checks = checks if checks is not None else Checks()
    by_definition: dict[str, list[float]] = {}
    over: dict[str, list[tuple[float, str]]] = {}
    for n, case in enumerate(cases):
        at = pointers[n] if pointers else f"/cases/{n}"
        metrics = checks.mapping(case.get("metrics"), at + "/metrics")
        for output, found in metrics.items():
            if not isinstance(found, Mapping):
                continue
            ratio = checks.number(found.get("max_error_ratio"), f"{at}/metrics/{output}/max_error_ratio")
            if ratio is not None and math.isfinite(ratio):
                name = str(case.get("definition"))
                by_definition.setdefault(name, []).append(max(ratio, 0.0))
                if ratio > 1:
                    over.setdefault(name, []).append((ratio, f"{_label(str(case.get('uuid'))[:12])} {_label(output)}"))
    if not by_definition:
        return None
    order = sorted(by_definition, key=lambda d: (max(by_definition[d]), d))  # plotly draws the first at the bottom
    fig = go.Figure()
    for name in order:
        values = by_definition[name]
        fig.add_trace(go.Box(x=values, name=_label(name), orientation="h", boxpoints="all" if len(values) <= 20
                             else "outliers", jitter=0.3, pointpos=0, marker={"size": 4, "color": "#5d6d7e"},
                             line={"width": 1, "color": "#5d6d7e"}, fillcolor="rgba(93,109,126,0.15)",
                             hovertemplate="%{x:.3e}<extra>%{y}</extra>"))
    failing = [(name, ratio, label) for name in order for ratio, label in over.get(name, [])]
    if failing:
        fig.add_trace(go.Scatter(x=[r for _, r, _ in failing], y=[_label(n) for n, _, _ in failing],
                                 text=[lbl for _, _, lbl in failing], mode="markers", name="past the tolerance",
                                 marker={"symbol": "x", "size": 9, "color": "#c0392b"},
                                 hovertemplate="%{text}: %{x:.3e}<extra>failing</extra>"))
    fig.add_vline(x=1.0, line_dash="dash", line_color="#c0392b", annotation_text="tolerance (ratio 1)")
    _axes(fig, title="operator workloads: max_error_ratio per definition (worst on top)",
          xaxis_type="log", xaxis_title="max_error_ratio = error / tolerance (≤ 1 passes)",
          yaxis_title="definition", yaxis_automargin=True, showlegend=False,
          height=140 + 26 * len(order), margin={"t": 50, "b": 50})
    return _zeros_on_log_axis(fig, "x")


def _counts(values: Any, pointer: str, checks: Checks, limit: int | None = None) -> list[int]:
    """A histogram's counts: non-negative integers (a float that is one is accepted); others count 0."""
    counts = []
    for i, v in enumerate(checks.items(values, pointer)[:limit]):
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            counts.append(v)
        elif isinstance(v, float) and math.isfinite(v) and v >= 0 and v.is_integer():
            counts.append(int(v))
        else:
            checks.wrong(f"{pointer}/{i}", "a count (a non-negative integer)", v)
            counts.append(0)
    return counts


def sampling_figures(report: Mapping[str, Any], checks: Checks | None = None) -> list[tuple[str, Any, str]]:
    """(definition, figure, line) per sampling definition: each TV test against its simulated null, then the
    pooled PIT histogram with the verdict. The line is plain text (escape it before it goes into HTML). A
    definition with no PIT draw (every draw greedy, excluded or degenerate) gets no histogram: its figure is
    None and its line says why no test ran."""
    go = _plotly()
    checks = checks if checks is not None else Checks()
    found = []
    cases = checks.items(report.get("cases"), "/cases")
    for g, group in enumerate(checks.items(report.get("sampling"), "/sampling")):
        at = f"/sampling/{g}"
        if not isinstance(group, Mapping):
            checks.wrong(at, "an object", group)
            continue
        definition = str(group.get("definition"))
        tests = [t if isinstance(t, Mapping) else {} for t in checks.items(group.get("tests"), at + "/tests")]
        bins = [0] * 10
        greedy = judged = 0
        for n, case in enumerate(cases):
            if not isinstance(case, Mapping) or case.get("definition") != group.get("definition"):
                continue
            sampling = checks.mapping(case.get("sampling"), f"/cases/{n}/sampling")
            greedy += checks.integer(sampling.get("greedy"), f"/cases/{n}/sampling/greedy") or 0
            judged += checks.integer(sampling.get("judged"), f"/cases/{n}/sampling/judged") or 0
            pit = checks.mapping(sampling.get("pit"), f"/cases/{n}/sampling/pit")
            for i, count in enumerate(_counts(pit.get("histogram"), f"/cases/{n}/sampling/pit/histogram", checks, 10)):
                bins[i] += count
        pooled = [(i, t) for i, t in enumerate(tests) if t.get("test") == "pit" and t.get("histogram")]
        if pooled:  # the pooled test's own histogram: every draw it judged (docs/sampling.md)
            i, test = pooled[0]
            bins = (_counts(test["histogram"], f"{at}/tests/{i}/histogram", checks, 10) + [0] * 10)[:10]
        for i, test in enumerate(tests):  # each TV test: the observed TV against its simulated null
            t_at = f"{at}/tests/{i}"
            null = checks.mapping(test.get("null_histogram"), t_at + "/null_histogram") if test.get("test") == "tv" \
                else {}
            if not null:
                continue
            edges = [checks.number(v, f"{t_at}/null_histogram/edges/{j}")
                     for j, v in enumerate(checks.items(null.get("edges"), t_at + "/null_histogram/edges"))]
            middles = [None if a is None or b is None else (a + b) / 2 for a, b in zip(edges, edges[1:])]
            tv_fig = go.Figure(go.Bar(x=middles, y=_counts(null.get("counts"), t_at + "/null_histogram/counts", checks),
                                      name="TV under the null"))
            tv = checks.number(test.get("tv"), t_at + "/tv")
            if tv is not None and math.isfinite(tv):
                tv_fig.add_vline(x=tv, line_color="red", annotation_text=f"observed {tv:.4f}")
            threshold = checks.number(test.get("threshold"), t_at + "/threshold")
            if threshold is not None and math.isfinite(threshold):
                tv_fig.add_vline(x=threshold, line_dash="dash", annotation_text="threshold (alpha "
                                 f"{checks.fmt(test.get('alpha'), t_at + '/alpha', '.2g', missing='?')})")
            _axes(tv_fig, title=f"{_label(definition)}: TV of {_label(test.get('n'))} draws vs its null "
                                f"({_label(test.get('key'))})",
                  xaxis_title="total variation distance", yaxis_title="replicates", height=320,
                  margin={"t": 50, "b": 40})
            p_value = checks.fmt(test.get("p_value"), t_at + "/p_value", ".3g")
            found.append((definition, tv_fig, f"TV test: p = {p_value}, detectable TV {test.get('detectable_tv')}"))
        line = "; ".join(f"{t.get('test')} n={t.get('n')} "
                         f"p={checks.fmt(t.get('p_value'), f'{at}/tests/{i}/p_value', '.3g')}"
                         for i, t in enumerate(tests))
        verdict = (f"verdict {group.get('verdict')} at alpha "
                   f"{checks.fmt(group.get('alpha'), at + '/alpha', 'g', missing='?')}")
        total = sum(bins)
        if not total:  # no draw to test: say why, draw no empty histogram
            if greedy and not judged:
                why = (f"every one of the {greedy} draws was greedy: each was checked to be the argmax, and no "
                       "statistical test applies")
            elif tests:
                why = "no PIT histogram: no draw had a PIT value (the tests above judged them)"
            else:
                why = "; ".join(str(w) for w in checks.items(group.get("not_judged"), at + "/not_judged")) \
                    or "no draw could be judged"
            found.append((definition, None, f"{verdict}: {line}; {why}" if line else f"{verdict}: {why}"))
            continue
        fig = go.Figure(go.Bar(x=[f"{i / 10:.1f}-{(i + 1) / 10:.1f}" for i in range(10)], y=bins, name="PIT"))
        fig.add_hline(y=total / 10, line_dash="dash", annotation_text="uniform")
        _axes(fig, title=f"{_label(definition)}: PIT histogram ({total} draws), verdict "
                         f"{_label(group.get('verdict'))}",
              xaxis_title="PIT value", yaxis_title="draws", height=320, margin={"t": 50, "b": 40})
        found.append((definition, fig, f"{verdict}: {line}" if line else verdict))
    return found


def _summary_table(cases: list[tuple[int, Mapping[str, Any]]], checks: Checks) -> str:
    rows = []
    for n, case in cases:
        at = f"/cases/{n}/trajectory"
        m = checks.mapping(case.get("trajectory"), at)
        worst = checks.mapping(m.get("worst"), at + "/worst")
        first = checks.mapping(m.get("first_failure"), at + "/first_failure")
        decode = checks.mapping(m.get("decode"), at + "/decode")
        streams = ", ".join(str(s) for s in checks.items(first.get("streams"), at + "/first_failure/streams"))
        mean = decode.get("psnr_mean_db")
        cells = (str(case.get("uuid"))[:12], str(case.get("definition"))[len(TRAJECTORY):], case.get("status"),
                 f"{m.get('steps_passed', 0)}/{m.get('steps_total', 0)}",
                 f"{checks.fmt(worst.get('ratio'), at + '/worst/ratio', '.3g', missing='0')} at step "
                 f"{worst.get('step')} ({worst.get('stream')})" if worst else "-",
                 f"step {first.get('step')} ({streams}: {first.get('check')})" if first else "-",
                 f"{checks.fmt(mean, at + '/decode/psnr_mean_db', '.2f')} / "
                 f"{checks.fmt(decode.get('psnr_worst_db'), at + '/decode/psnr_worst_db', '.2f')}"
                 if mean is not None else (decode.get("error") or "-"))
        rows.append("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("trajectory", "pipeline", "status", "steps passed", "worst e/f",
                                              "first failure", "PSNR mean / worst dB"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _attention_text(attention: Any) -> str:
    """The floor's two attention kernels in words (``floor f: sdpa vs sdpa-reversed``), never a raw dict."""
    if isinstance(attention, Mapping):
        reference, alt = attention.get("reference"), attention.get("alt")
        if reference is not None or alt is not None:
            return f"floor f: {reference if reference is not None else '?'} vs {alt if alt is not None else '?'}"
        return "floor f: " + ", ".join(f"{k} {v}" for k, v in attention.items()) if attention else "floor f: -"
    return f"attention {attention}" if attention is not None else "attention -"


def _slug(value: Any) -> str:
    """An id fragment from a record value: letters, digits and '-' only (never the raw value)."""
    return re.sub(r"[^A-Za-z0-9-]", "", str(value))[:12]


def _problems_block(problems: list[Problem]) -> str:
    if not problems:
        return ""
    shown = "".join(f"<li><code>{_e(p.pointer or '')}</code> {_e(p.message)}</li>" for p in problems[:200])
    more = f"<li>… and {len(problems) - 200} more</li>" if len(problems) > 200 else ""
    return (f"<div class='problems'><p>{len(problems)} value(s) of this report are not what the page expected; "
            f"they are drawn as gaps or shown as \u201c{NOT_A_NUMBER}\u201d:</p><ul>{shown}{more}</ul></div>")


FAILING_SHOWN = 500  # rows of the failing-cases table; the rest are counted


def _worst_ratio(case: Mapping[str, Any], at: str, checks: Checks) -> tuple[float, str] | None:
    """An operator case's largest finite max_error_ratio and its output, None without one."""
    found = []
    for output, m in checks.mapping(case.get("metrics"), at + "/metrics").items():
        if isinstance(m, Mapping) and _is_number(m.get("max_error_ratio")):
            ratio = float(m["max_error_ratio"])
            if math.isfinite(ratio):
                found.append((ratio, str(output)))
    return max(found) if found else None


def _failing_table(rows: list[tuple[Mapping[str, Any], str, str | None]]) -> str:
    """The failed and errored cases: (case, what failed, the id of its chart or None), one row each, linked."""
    body = []
    for case, what, anchor in rows[:FAILING_SHOWN]:
        link = f"<a href='#{_e(anchor)}'>chart</a>" if anchor else "no chart"
        definition = str(case.get("definition"))
        cells = (_e(str(case.get("uuid"))[:12]), _e(definition[len(TRAJECTORY):] if definition.startswith(TRAJECTORY)
                                                     else definition), _e(case.get("status")), _e(what), link)
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    more = (f"<p class='meta'>… and {len(rows) - FAILING_SHOWN} more (ikdata replay's JSON report lists them "
            "all)</p>" if len(rows) > FAILING_SHOWN else "")
    head = "".join(f"<th>{h}</th>" for h in ("case", "definition", "status", "what failed", "see"))
    return (f"<h2 id='failing'>Failing cases ({len(rows)})</h2><table class='failing'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{more}")


CASES_SHOWN = 2000  # rows of the all-cases table; the rest are counted


def _cases_table(rows: list[tuple[Mapping[str, Any], str, str | None]], *, open_: bool) -> str:
    """Every case (case, what it measured or why it failed, the id of its chart), in a collapsible table."""
    body = []
    for case, what, anchor in rows[:CASES_SHOWN]:
        definition = str(case.get("definition"))
        cells = (_e(str(case.get("uuid"))[:12]), _e(definition[len(TRAJECTORY):] if definition.startswith(TRAJECTORY)
                                                     else definition), _e(case.get("status")), _e(what),
                 f"<a class='chart' href='#{_e(anchor)}'>chart</a>" if anchor else "-")
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    more = (f"<p class='meta'>… and {len(rows) - CASES_SHOWN} more (ikdata replay's JSON report lists them "
            "all)</p>" if len(rows) > CASES_SHOWN else "")
    head = "".join(f"<th>{h}</th>" for h in ("case", "definition", "status", "measured / reason", "see"))
    return (f"<details id='cases'{' open' if open_ else ''}><summary><h2 style='display:inline'>All cases "
            f"({len(rows)})</h2></summary><table class='cases'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{more}</details>")


def _what_failed(case: Mapping[str, Any], n: int, checks: Checks) -> str:
    reason = case.get("reason") or case.get("error")
    at = f"/cases/{n}"
    if str(case.get("definition", "")).startswith(TRAJECTORY):
        worst = checks.mapping(checks.mapping(case.get("trajectory"), at + "/trajectory").get("worst"),
                               at + "/trajectory/worst")
        if worst and _is_number(worst.get("ratio")):
            text = f"worst e/f {float(worst['ratio']):.3g} at step {worst.get('step')} ({worst.get('stream')})"
            return text + (f"; {reason}" if isinstance(reason, str) else "")
    else:
        ratio = _worst_ratio(case, at, checks)
        if ratio is not None:
            return f"max_error_ratio {ratio[0]:.3g} ({ratio[1]})" + (f"; {reason}" if isinstance(reason, str) else "")
    text = reason if isinstance(reason, str) else "-"
    return text if len(text) <= 300 else text[:300] + "…"


def draw(report: Mapping[str, Any], *, title: str = "ikdata replay report",
         path: str = "report", plotly_js: str | None = None) -> tuple[str, list[Problem]]:
    """The whole HTML page and the problems met: values of the wrong type, each named by ``path`` and its
    JSON pointer. plotly.js is included once: inlined, or with ``plotly_js`` a file of that name beside the
    page (:data:`PLOTLY_JS`, written by :func:`write_html`)."""
    _plotly()
    import plotly.io as pio

    checks = Checks(path)
    cases: list[tuple[int, Mapping[str, Any]]] = []
    for n, case in enumerate(checks.items(report.get("cases"), "/cases")):
        if isinstance(case, Mapping):
            cases.append((n, case))
        else:
            checks.wrong(f"/cases/{n}", "an object", case)
    trajectories = [(n, c) for n, c in cases if str(c.get("definition", "")).startswith(TRAJECTORY)]
    sampled = {n for n, c in cases if not str(c.get("definition", "")).startswith(TRAJECTORY)
               and checks.mapping(c.get("tolerance"), f"/cases/{n}/tolerance").get("samples")}
    operators = [(n, c) for n, c in cases if not str(c.get("definition", "")).startswith(TRAJECTORY)
                 and n not in sampled]
    parts: list[str] = []
    first = True
    ids = itertools.count()

    def plot(fig: Any) -> str:
        nonlocal first
        snippet = pio.to_html(fig, full_html=False, include_plotlyjs=first and plotly_js is None,
                              div_id=f"plot-{next(ids)}")
        first = False
        return snippet

    counts: dict[str, int] = {}
    for _, case in cases:
        counts[str(case.get("status"))] = counts.get(str(case.get("status")), 0) + 1
    parts.append(f"<p class='meta'>{len(cases)} cases: "
                 + ", ".join(f"{n} {_e(s)}" for s, n in sorted(counts.items()))
                 + f" &middot; device {_e(report.get('device'))} &middot; torch "
                 f"{_e(report.get('torch'))} &middot; ikdata {_e(report.get('ikdata_version'))}</p>")
    failing_at = len(parts)  # the failing-cases table goes here, once the charts' ids are known
    anchors: dict[int, str] = {}  # case index -> the id of the section that draws it
    if trajectories:
        parts.append("<h2>Diffusion trajectories</h2>" + _summary_table(trajectories, checks)
                     + "<p class='meta'>worst e/f: the largest ratio, over the steps, of the engine's error e to the "
                       "floor f (how far two correct attention kernels differ); a step passes while e &le; k&middot;f "
                       "+ &epsilon;. PSNR: how close the decoded clip is to the reference decode of the same latents "
                       "(dB, higher is closer; identical frames show 100).</p>")
        for n, case in trajectories:
            at = f"/cases/{n}"
            m = checks.mapping(case.get("trajectory"), at + "/trajectory")
            uuid = str(case.get("uuid"))
            anchors[n] = f"trajectory-{n}-{_slug(uuid)}"
            parts.append(f"<section class='trajectory' id='{anchors[n]}'><h3>{_e(uuid[:12])} "
                         f"{_e(str(case.get('definition'))[len(TRAJECTORY):])}: {_e(case.get('status'))}</h3>")
            if case.get("reason"):
                parts.append(f"<p class='reason'>{_e(case['reason'])}</p>")
            if m:
                parts.append(f"<p class='meta'>pass when e &le; "
                             f"{_e(checks.fmt(m.get('k'), at + '/trajectory/k', 'g', missing='?'))}&middot;f + "
                             f"{_e(checks.fmt(m.get('eps'), at + '/trajectory/eps', 'g', missing='?'))}; "
                             f"{_e(_attention_text(m.get('attention')))}; level: {_e(m.get('level'))}</p>")
            for _name, fig in trajectory_figures(case, checks, at):
                parts.append(plot(fig))
            parts.append("</section>")
    fig = operator_figure([c for _, c in operators], checks, [f"/cases/{n}" for n, _ in operators])
    if fig is not None:
        parts.append("<section id='operators'><h2>Operator workloads</h2>" + plot(fig) + "</section>")
        anchors.update((n, "operators") for n, c in operators if _worst_ratio(c, f"/cases/{n}", checks) is not None)
    sampling = sampling_figures(report, checks)
    if sampling:
        parts.append("<h2>Sampling</h2>")
        sections: dict[str, str] = {}
        for name, fig, line in sampling:
            if name not in sections:
                parts.append("</section>" if sections else "")
                sections[name] = f"sampling-{len(sections)}"
                parts.append(f"<section id='{sections[name]}'>")
            parts.append((plot(fig) if fig is not None else f"<h3>{_e(name)}</h3>") + f"<p class='meta'>{_e(line)}</p>")
        parts.append("</section>")
        anchors.update((n, sections[str(c.get("definition"))]) for n, c in cases
                       if n in sampled and str(c.get("definition")) in sections)
    if first and not sampling:
        parts.append("<p>Nothing to draw: the report has no trajectory, operator metrics or sampling verdicts.</p>")
    failing = [(c, _what_failed(c, n, checks), anchors.get(n)) for n, c in cases
               if c.get("status") in ("failed", "error")]
    if failing:
        parts.insert(failing_at, _failing_table(failing))
    if cases:  # every page lists what was judged, closed unless something failed
        parts.append(_cases_table([(c, _what_failed(c, n, checks), anchors.get(n)) for n, c in cases],
                                  open_=bool(failing)))
    problems = list(dict.fromkeys(checks.problems))  # a value read by two views is one problem
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.3em .6em;font-size:.9em}.reason{color:#a93226}.meta{color:#555}"
             ".problems{border:1px solid #a93226;padding:.5em 1em;color:#a93226}")
    library = f"<script src='{_e(plotly_js)}' charset='utf-8'></script>" if plotly_js else ""
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{style}</style>{library}</head><body><h1>{_e(title)}</h1>{_problems_block(problems)}"
            f"{''.join(parts)}</body></html>\n")
    return page, problems


def render(report: Mapping[str, Any], *, title: str = "ikdata replay report") -> str:
    """The whole HTML page (plotly.js inlined once); :func:`draw` also returns the problems it met."""
    return draw(report, title=title)[0]


def plotly_js_name() -> str:
    """The file name of plotly.js beside a page: versioned, so pages drawn by another plotly keep theirs."""
    import plotly

    return f"plotly-{_slug_version(plotly.__version__)}.min.js"


def _slug_version(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]", "", version)


def write_plotly_js(folder: str | os.PathLike) -> Path:
    """plotly.js in ``folder`` under :func:`plotly_js_name`, written atomically unless the same bytes are there."""
    from plotly.offline import get_plotlyjs

    target = Path(folder) / plotly_js_name()
    data = get_plotlyjs().encode()
    try:
        if target.is_file() and not target.is_symlink() and target.stat().st_size == len(data) \
                and target.read_bytes() == data:
            return target
    except OSError:
        pass
    write_atomic(target, [data])
    return target


def write_html(report: Mapping[str, Any], out: str | os.PathLike, *, title: str = "ikdata replay report",
               path: str = "report", self_contained: bool = False) -> tuple[Path, list[Problem]]:
    """Render and write the page atomically; returns its path and the problems met (see :func:`draw`).

    plotly.js goes once into the page's folder (:func:`write_plotly_js`) and the page loads it from there,
    or, ``self_contained``, is inlined in the page (one file, 4.6 MiB more).
    """
    target = Path(out)
    page, problems = draw(report, title=title, path=path, plotly_js=None if self_contained else plotly_js_name())
    if not self_contained:
        write_plotly_js(target.parent)
    write_atomic(target, [page.encode()])
    return target, problems


def report_path_for(target: str | os.PathLike) -> Path:
    """A report file as given, or a dataset folder's ``reports/replay.json``."""
    target = Path(target)
    if target.is_dir():
        return target / "reports" / "replay.json"
    return target


__all__ = ["NOT_A_NUMBER", "Checks", "draw", "load_report", "operator_figure", "plotly_js_name", "render",
           "report_path_for", "sampling_figures", "trajectory_figures", "write_html", "write_plotly_js"]
