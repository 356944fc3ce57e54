"""A replay report drawn as a static HTML page (plotly): no server, opens offline.

plotly.js (4.6 MiB) is included once per page: by default as one file beside the page
(``plotly-<version>.min.js``, shared by every page in that folder; the page itself stays under
1 MiB for 100 cases), or inlined for a single file to send around (``self_contained``).

Sections, each present only when the report has the data:

- the failing cases: one row each (case, definition, status, what failed), linked to its chart;
- every judge family's sections, in declaration order (:data:`ikdata.judging.families.FAMILIES`): what the
  family's ``figures`` hook returns (:class:`~ikdata.ops.report_parts.FamilySection`), e.g. the diffusion
  trajectories' e/f, chain and PSNR charts, the sampling definitions' PIT histograms and TV tests;
- the operators' section, for the cases no family drew: per operator definition the distribution of
  ``max_error_ratio`` over its cases (≤ 1 passes), one horizontal box per definition, worst first, failing
  cases marked;
- every case, in a collapsible table (closed when nothing failed), so a page where everything passed still
  lists what was judged.

A report is data from a dataset, so the page treats it as hostile: every value reaches the page through
:func:`~ikdata.ops.report_parts.escape` (HTML text and attributes) or :func:`~ikdata.ops.report_parts.label`
(plotly's text), element ids are counters, and every value is type-checked before it is formatted
(:class:`~ikdata.ops.report_parts.Checks`). A value of the wrong type (a string where a number belongs, a
step index that is not an integer) is drawn as a gap, shown as "not a number", and returned as a
:class:`~ikdata.core.problems.Problem` naming its JSON pointer; the page lists them at the top.

Torch-free; needs the ``report`` extra (plotly). Exact zeros cannot sit on a log axis: they are drawn on
a tick labelled "0" one decade below the smallest non-zero value
(:func:`~ikdata.ops.report_parts.zeros_on_log_axis`), so the axis spans the data, not twelve more decades;
their hover text says "0 (exact)"; a chart of zeros alone is drawn on a linear axis. Every axis is titled and
its numbers are in scientific notation (``1e-12``, never SI prefixes such as ``1p``).
"""

from __future__ import annotations

import itertools
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping

from ikdata.core.problems import Problem
from ikdata.core.status import Status
from ikdata.core.store import write_atomic
from ikdata.judging import families
from ikdata.core.cases import Report
from ikdata.ops.report_provenance import SHOWN, Provenance
from ikdata.ops.report_parts import (NOT_A_NUMBER, CaseView, Checks, FamilySection, axes, escape, is_number, label,
                                     plotly, reason_text, zeros_on_log_axis)


def operator_figure(cases: list[Mapping[str, Any]], checks: Checks | None = None,
                    pointers: list[str] | None = None) -> Any | None:
    """One horizontal box per definition: the distribution of max_error_ratio over its cases (log scale; ≤ 1
    passes), the worst definition on top, each case past the tolerance marked and named on hover."""
    go = plotly()
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
                    over.setdefault(name, []).append((ratio, f"{label(str(case.get('uuid'))[:12])} {label(output)}"))
    if not by_definition:
        return None
    order = sorted(by_definition, key=lambda d: (max(by_definition[d]), d))  # plotly draws the first at the bottom
    fig = go.Figure()
    for name in order:
        values = by_definition[name]
        fig.add_trace(go.Box(x=values, name=label(name), orientation="h", boxpoints="all" if len(values) <= 20
                             else "outliers", jitter=0.3, pointpos=0, marker={"size": 4, "color": "#5d6d7e"},
                             line={"width": 1, "color": "#5d6d7e"}, fillcolor="rgba(93,109,126,0.15)",
                             hovertemplate="%{x:.3e}<extra>%{y}</extra>"))
    failing = [(name, ratio, text) for name in order for ratio, text in over.get(name, [])]
    if failing:
        fig.add_trace(go.Scatter(x=[r for _, r, _ in failing], y=[label(n) for n, _, _ in failing],
                                 text=[lbl for _, _, lbl in failing], mode="markers", name="past the tolerance",
                                 marker={"symbol": "x", "size": 9, "color": "#c0392b"},
                                 hovertemplate="%{text}: %{x:.3e}<extra>failing</extra>"))
    fig.add_vline(x=1.0, line_dash="dash", line_color="#c0392b", annotation_text="tolerance (ratio 1)")
    axes(fig, title="operator workloads: max_error_ratio per definition (worst on top)",
         xaxis_type="log", xaxis_title="max_error_ratio = error / tolerance (≤ 1 passes)",
         yaxis_title="definition", yaxis_automargin=True, showlegend=False,
         height=140 + 26 * len(order), margin={"t": 50, "b": 50})
    return zeros_on_log_axis(fig, "x")


def _problems_block(problems: list[Problem]) -> str:
    if not problems:
        return ""
    shown = "".join(f"<li><code>{escape(p.pointer or '')}</code> {escape(p.message)}</li>" for p in problems[:200])
    more = f"<li>… and {len(problems) - 200} more</li>" if len(problems) > 200 else ""
    return (f"<div class='problems'><p>{len(problems)} value(s) of this report are not what the page expected; "
            f"they are drawn as gaps or shown as \u201c{NOT_A_NUMBER}\u201d:</p><ul>{shown}{more}</ul></div>")


FAILING_SHOWN = 500  # rows of the failing-cases table; the rest are counted


def _worst_ratio(case: Mapping[str, Any], at: str, checks: Checks) -> tuple[float, str] | None:
    """An operator case's largest finite max_error_ratio and its output, None without one."""
    found = []
    for output, m in checks.mapping(case.get("metrics"), at + "/metrics").items():
        if isinstance(m, Mapping) and is_number(m.get("max_error_ratio")):
            ratio = float(m["max_error_ratio"])
            if math.isfinite(ratio):
                found.append((ratio, str(output)))
    return max(found) if found else None


PLACE = ("step", "layer", "shapes", "lineage")  # a case's place in the run, where the dataset is known


def _place(case: Mapping[str, Any], provenance: Provenance | None) -> tuple[str, ...]:
    """The cells of a case's place in the run (escaped): step, layer (and request), shapes, the lineage command."""
    if provenance is None:
        return ()
    uuid = str(case.get("uuid"))
    facts = provenance.cases.get(uuid)
    if facts is None:
        return ("-", "-", "-", f"<code>{escape(provenance.lineage_command(uuid))}</code>")
    layer = facts.layer or "-"
    if facts.request:
        layer += f" (request {facts.request})"
    return (escape("-" if facts.step is None else facts.step), escape(layer), escape(facts.shapes or "-"),
            f"<code>{escape(provenance.lineage_command(uuid))}</code>")


def _failing_table(rows: list[tuple[Mapping[str, Any], CaseView]], provenance: Provenance | None = None) -> str:
    """The failed and errored cases: (case, how it is shown), one row each, linked to its chart."""
    body = []
    for case, view in rows[:FAILING_SHOWN]:
        link = f"<a href='#{escape(view.anchor)}'>chart</a>" if view.anchor else "no chart"
        cells = (escape(str(case.get("uuid"))[:12]), escape(view.definition), escape(case.get("status")),
                 escape(view.what), link, *_place(case, provenance))
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    more = (f"<p class='meta'>… and {len(rows) - FAILING_SHOWN} more (ikdata replay's JSON report lists them "
            "all)</p>" if len(rows) > FAILING_SHOWN else "")
    head = "".join(f"<th>{h}</th>" for h in ("case", "definition", "status", "what failed", "see",
                                              *(PLACE if provenance else ())))
    return (f"<h2 id='failing'>Failing cases ({len(rows)})</h2><table class='failing'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{more}")


CASES_SHOWN = 2000  # rows of the all-cases table; the rest are counted


def _cases_table(rows: list[tuple[Mapping[str, Any], CaseView]], *, open_: bool,
                 provenance: Provenance | None = None) -> str:
    """Every case (case, how it is shown: what it measured or why it failed, its chart; its place in the run
    where the dataset is known), in a collapsible table."""
    body = []
    for case, view in rows[:CASES_SHOWN]:
        cells = (escape(str(case.get("uuid"))[:12]), escape(view.definition), escape(case.get("status")),
                 escape(view.what), f"<a class='chart' href='#{escape(view.anchor)}'>chart</a>" if view.anchor else "-",
                 *_place(case, provenance))
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    more = (f"<p class='meta'>… and {len(rows) - CASES_SHOWN} more (ikdata replay's JSON report lists them "
            "all)</p>" if len(rows) > CASES_SHOWN else "")
    head = "".join(f"<th>{h}</th>" for h in ("case", "definition", "status", "measured / reason", "see",
                                              *(PLACE if provenance else ())))
    return (f"<details id='cases'{' open' if open_ else ''}><summary><h2 style='display:inline'>All cases "
            f"({len(rows)})</h2></summary><table class='cases'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{more}</details>")


def _operator_view(case: Mapping[str, Any], n: int, checks: Checks, anchor: str | None) -> CaseView:
    """How the tables show a case no family drew (or drew without words): its worst max_error_ratio, else
    its reason."""
    ratio = _worst_ratio(case, f"/cases/{n}", checks)
    if ratio is None:
        what = reason_text(case)
    else:
        reason = case.get("reason") or case.get("error")
        what = f"max_error_ratio {ratio[0]:.3g} ({ratio[1]})" + (f"; {reason}" if isinstance(reason, str) else "")
    return CaseView(str(case.get("definition")), what, anchor)


def _family_sections(report: Mapping[str, Any], cases: list[tuple[int, Mapping[str, Any]]],
                     checks: Checks) -> list[FamilySection]:
    """Every family's section, in declaration order; a case drawn by one family is not offered to the next."""
    found = []
    left = list(cases)
    for family in families.FAMILIES:
        hook = family.hook("figures")
        section = hook(report, left, checks) if hook is not None else None
        if section is not None:
            found.append(section)
            left = [(n, c) for n, c in left if n not in section.cases]
    return found


def _provenance_block(provenance: Provenance | None) -> str:
    """Where the data came from: the dataset and its id, engines and models, programs, capture times."""
    if provenance is None:
        return ("<p class='meta'>Where the data came from: not known (the page was drawn from a report file "
                "outside its dataset).</p>")
    from ikdata.core.times import iso_time

    def listed(items: tuple[str, ...]) -> str:
        shown = ", ".join(escape(i) for i in items[:SHOWN]) or "not recorded"
        return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")

    when = ("not recorded" if provenance.captured is None else
            f"{escape(iso_time(provenance.captured[0]))} to {escape(iso_time(provenance.captured[1]))}")
    rows = (("dataset", f"{escape(provenance.root)} (id <code>{escape(provenance.dataset_id or 'none')}</code>)"),
            ("engine and model", listed(provenance.sources)), ("program", listed(provenance.programs)),
            ("captured", when))
    return ("<section id='provenance'><h2>Where the data came from</h2><table class='provenance'>"
            + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table></section>")


def draw(report: Report | Mapping[str, Any], *, title: str = "ikdata replay report",
         path: str = "report", plotly_js: str | None = None,
         provenance: Provenance | None = None) -> tuple[str, list[Problem]]:
    """The whole HTML page and the problems met: values of the wrong type, each named by ``path`` and its
    JSON pointer. plotly.js is included once: inlined, or with ``plotly_js`` a file of that name beside the
    page (:data:`PLOTLY_JS`, written by :func:`write_html`).

    ``report``: a :class:`~ikdata.core.cases.Report` (as :func:`~ikdata.core.cases.read_report` gives it),
    or any JSON document: the page reads its JSON either way, each value through :class:`Checks`, so a report
    no schema checked (a case that is not an object, a uuid that is a number) is drawn with located problems
    where the typed reader would refuse it whole."""
    plotly()
    import plotly.io as pio

    report = report.document if isinstance(report, Report) else report  # its JSON, built once and only read
    checks = Checks(path)
    cases: list[tuple[int, Mapping[str, Any]]] = []
    for n, case in enumerate(checks.items(report.get("cases"), "/cases")):
        if isinstance(case, Mapping):
            cases.append((n, case))
        else:
            checks.wrong(f"/cases/{n}", "an object", case)
    parts: list[str] = []
    first = True
    ids = itertools.count()

    def plot(fig: Any) -> str:
        nonlocal first
        # the title on the left and room above it: plotly's toolbar (top right) never covers it
        fig.update_layout(title_x=0, title_xanchor="left", margin_t=max(fig.layout.margin.t or 0, 70))
        snippet = pio.to_html(fig, full_html=False, include_plotlyjs=first and plotly_js is None,
                              div_id=f"plot-{next(ids)}")
        first = False
        return snippet

    counts: dict[str, int] = {}
    for _, case in cases:
        counts[str(case.get("status"))] = counts.get(str(case.get("status")), 0) + 1
    parts.append(f"<p class='meta'>{len(cases)} cases: "
                 + ", ".join(f"{n} {escape(s)}" for s, n in sorted(counts.items()))
                 + f" &middot; device {escape(report.get('device'))} &middot; torch "
                 f"{escape(report.get('torch'))} &middot; ikdata {escape(report.get('ikdata_version'))}</p>")
    parts.append(_provenance_block(provenance))
    failing_at = len(parts)  # the failing-cases table goes here, once the charts' ids are known
    views: dict[int, CaseView] = {}  # case index -> how a family shows it
    sections = _family_sections(report, cases, checks)
    for section in sections:
        parts += [part if isinstance(part, str) else plot(part) for part in section.parts]
        views.update(section.cases)
    operators = [(n, c) for n, c in cases if n not in views]
    fig = operator_figure([c for _, c in operators], checks, [f"/cases/{n}" for n, _ in operators])
    drawn_operators: set[int] = set()
    if fig is not None:
        parts.append("<section id='operators'><h2>Operator workloads</h2>" + plot(fig) + "</section>")
        drawn_operators = {n for n, c in operators if _worst_ratio(c, f"/cases/{n}", checks) is not None}
    if first and not any(section.parts for section in sections):
        parts.append("<p>Nothing to draw: the report has no operator metrics and no judge family drew a figure.</p>")
    for n, case in cases:
        view = views.get(n)
        if view is None or view.what is None:
            anchor = view.anchor if view is not None else ("operators" if n in drawn_operators else None)
            shown = _operator_view(case, n, checks, anchor)
            views[n] = shown if view is None else CaseView(view.definition, shown.what, anchor)
    failing = [(c, views[n]) for n, c in cases if c.get("status") in (Status.FAILED, Status.ERROR)]
    if failing:
        parts.insert(failing_at, _failing_table(failing, provenance))
    if cases:  # every page lists what was judged, closed unless something failed
        parts.append(_cases_table([(c, views[n]) for n, c in cases], open_=bool(failing), provenance=provenance))
    problems = list(dict.fromkeys(checks.problems))  # a value read by two views is one problem
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.3em .6em;font-size:.9em}.provenance th{text-align:left}.reason{color:#a93226}.meta{color:#555}"
             ".problems{border:1px solid #a93226;padding:.5em 1em;color:#a93226}")
    library = f"<script src='{escape(plotly_js)}' charset='utf-8'></script>" if plotly_js else ""
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{style}</style>{library}</head><body><h1>{escape(title)}</h1>{_problems_block(problems)}"
            f"{''.join(parts)}</body></html>\n")
    return page, problems


def render(report: Report | Mapping[str, Any], *, title: str = "ikdata replay report") -> str:
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


def write_html(report: Report | Mapping[str, Any], out: str | os.PathLike, *, title: str = "ikdata replay report",
               path: str = "report", self_contained: bool = False,
               provenance: Provenance | None = None) -> tuple[Path, list[Problem]]:
    """Render and write the page atomically; returns its path and the problems met (see :func:`draw`).

    plotly.js goes once into the page's folder (:func:`write_plotly_js`) and the page loads it from there,
    or, ``self_contained``, is inlined in the page (one file, 4.6 MiB more).
    """
    target = Path(out)
    page, problems = draw(report, title=title, path=path, plotly_js=None if self_contained else plotly_js_name(),
                          provenance=provenance)
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


__all__ = ["NOT_A_NUMBER", "Checks", "draw", "operator_figure", "plotly_js_name", "render",
           "report_path_for", "write_html", "write_plotly_js"]
