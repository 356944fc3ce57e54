"""The sampling family's sections of the report page (its ``figures`` hook): per sampling definition, each TV
test against its simulated null and the pooled PIT histogram (flat when the engine samples the reference's
distribution) with the verdict of every test; a definition whose draws were all greedy says so in words
(every draw checked to be the argmax; no statistical test applies) instead of drawing an empty histogram.

Every value is checked and escaped through :mod:`ikdata.ops.report_parts` (a report is hostile data).
Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ikdata.ops.report_parts import CaseView, Checks, FamilySection, axes, escape, label, plotly


def figures(report: Mapping[str, Any], cases: list[tuple[int, Mapping[str, Any]]],
            checks: Checks) -> FamilySection | None:
    """The sampling section (one sub-section per definition with a verdict) and the sampled cases: those whose
    tolerance names samples, each linked to its definition's sub-section. None when there is neither."""
    sampled = [(n, c) for n, c in cases if checks.mapping(c.get("tolerance"), f"/cases/{n}/tolerance").get("samples")]
    drawn = sampling_figures(report, checks)
    if not sampled and not drawn:
        return None
    found = FamilySection()
    sections: dict[str, str] = {}
    if drawn:
        found.parts.append("<h2>Sampling</h2>")
        for name, fig, line in drawn:
            if name not in sections:
                found.parts.append("</section>" if sections else "")
                sections[name] = f"sampling-{len(sections)}"
                found.parts.append(f"<section id='{sections[name]}'>")
            found.parts += [fig if fig is not None else f"<h3>{escape(name)}</h3>",
                            f"<p class='meta'>{escape(line)}</p>"]
        found.parts.append("</section>")
    for n, case in sampled:
        definition = str(case.get("definition"))
        found.cases[n] = CaseView(definition, anchor=sections.get(definition))
    return found


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
    go = plotly()
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
            axes(tv_fig, title=f"{label(definition)}: TV of {label(test.get('n'))} draws vs its null "
                               f"({label(test.get('key'))})",
                 xaxis_title="total variation distance", yaxis_title="replicates", height=320,
                 margin={"t": 50, "b": 40})
            p_value = checks.fmt(test.get("p_value"), t_at + "/p_value", ".3g")
            found.append((definition, tv_fig, f"TV test: p = {p_value}, detectable TV {test.get('detectable_tv')}"))
        line = "; ".join(f"{t.get('test')} n={t.get('n')} "
                         f"p={checks.fmt(t.get('p_value'), f'{at}/tests/{i}/p_value', '.3g')}"
                         for i, t in enumerate(tests))
        verdict = (f"verdict {group.get('verdict')} at alpha "
                   f"{checks.fmt(group.get('alpha'), at + '/alpha', 'g', missing='?')}" if tests else
                   f"verdict {group.get('verdict')} with no statistical test")  # no level claimed where none ran
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
        axes(fig, title=f"{label(definition)}: PIT histogram ({total} draws), verdict "
                        f"{label(group.get('verdict'))}",
             xaxis_title="PIT value", yaxis_title="draws", height=320, margin={"t": 50, "b": 40})
        found.append((definition, fig, f"{verdict}: {line}" if line else verdict))
    return found


__all__ = ["figures", "sampling_figures"]
