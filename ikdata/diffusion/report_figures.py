"""The diffusion family's sections of the report page (its ``figures`` hook): a summary table of the
trajectories, then per trajectory and stream ``e`` and the floor ``f`` against the step on a log scale, with
the pass bound ``k·f + ε`` and the failing steps marked; the chain error against its bound; the per-frame PSNR
of the decode check with its thresholds.

Every value is checked and escaped through :mod:`ikdata.ops.report_parts` (a report is hostile data).
Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ikdata.ops.report_parts import (CaseView, Checks, FamilySection, axes, escape, is_number, label, log_values,
                                     plotly, reason_text, slug, zeros_on_log_axis)

TRAJECTORY = "trajectory:"  # the definition of a trajectory's case: trajectory:<pipeline class>


def figures(report: Mapping[str, Any], cases: list[tuple[int, Mapping[str, Any]]],
            checks: Checks) -> FamilySection | None:
    """The trajectories' section: a summary table, then one section per trajectory (its charts), each case
    shown by its pipeline class and worst e/f. None when the report has no trajectory."""
    trajectories = [(n, c) for n, c in cases if str(c.get("definition", "")).startswith(TRAJECTORY)]
    if not trajectories:
        return None
    found = FamilySection()
    found.parts.append("<h2>Diffusion trajectories</h2>" + _summary_table(trajectories, checks)
                       + "<p class='meta'>worst e/f: the largest ratio, over the steps, of the engine's error e to "
                         "the floor f (how far two correct attention kernels differ); a step passes while e &le; "
                         "k&middot;f + &epsilon;. PSNR: how close the decoded clip is to the reference decode of the "
                         "same latents (dB, higher is closer; identical frames show 100).</p>")
    for n, case in trajectories:
        at = f"/cases/{n}"
        m = checks.mapping(case.get("trajectory"), at + "/trajectory")
        uuid = str(case.get("uuid"))
        anchor = f"trajectory-{n}-{slug(uuid)}"
        found.parts.append(f"<section class='trajectory' id='{anchor}'><h3>{escape(uuid[:12])} "
                           f"{escape(str(case.get('definition'))[len(TRAJECTORY):])}: "
                           f"{escape(case.get('status'))}</h3>")
        if case.get("reason"):
            found.parts.append(f"<p class='reason'>{escape(case['reason'])}</p>")
        if m:
            found.parts.append(f"<p class='meta'>pass when e &le; "
                               f"{escape(checks.fmt(m.get('k'), at + '/trajectory/k', 'g', missing='?'))}&middot;f + "
                               f"{escape(checks.fmt(m.get('eps'), at + '/trajectory/eps', 'g', missing='?'))}; "
                               f"{escape(_attention_text(m.get('attention')))}; level: {escape(m.get('level'))}</p>")
        found.parts += [fig for _name, fig in trajectory_figures(case, checks, at)]
        found.parts.append("</section>")
        found.cases[n] = CaseView(str(case.get("definition"))[len(TRAJECTORY):], _what(case, n, checks), anchor)
    return found


def _what(case: Mapping[str, Any], n: int, checks: Checks) -> str:
    """The tables' words for a trajectory case: its worst e/f and where, then its reason; else its reason."""
    at = f"/cases/{n}"
    worst = checks.mapping(checks.mapping(case.get("trajectory"), at + "/trajectory").get("worst"),
                           at + "/trajectory/worst")
    if not (worst and is_number(worst.get("ratio"))):
        return reason_text(case)
    reason = case.get("reason") or case.get("error")
    text = f"worst e/f {float(worst['ratio']):.3g} at step {worst.get('step')} ({worst.get('stream')})"
    return text + (f"; {reason}" if isinstance(reason, str) else "")


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
    go = plotly()
    checks = checks if checks is not None else Checks()
    m = checks.mapping(case.get("trajectory"), pointer + "/trajectory")
    at = pointer + "/trajectory"
    drawn = []
    steps = _steps(m, at, checks)
    attention = checks.mapping(m.get("attention"), at + "/attention")
    k = checks.fmt(m.get("k"), at + "/k", "g", missing="?")
    eps = checks.fmt(m.get("eps"), at + "/eps", "g", missing="?")
    for stream in dict.fromkeys(s[0] for s in steps):
        mine = sorted((s for s in steps if s[0] == stream), key=lambda s: s[1])
        x = [s[1] for s in mine]
        name = label(stream)
        fig = go.Figure()
        for key, trace, style in (
                ("e", "e (engine vs reference)", {"color": "#c0392b"}),
                ("f", f"f (floor: {label(attention.get('reference'))} vs {label(attention.get('alt'))})",
                 {"color": "#2471a3"}),
                ("bound", f"bound {k}·f + {eps}", {"color": "#7f8c8d", "dash": "dash"})):
            y, text = log_values(((s[2].get(key), f"{s[3]}/{key}") for s in mine), checks)
            fig.add_trace(go.Scatter(x=x, y=y, text=text, name=trace, mode="lines+markers", line=style,
                                     hovertemplate="step %{x}: %{text}<extra>" + key + "</extra>"))
        bad = [s for s in mine if not s[2].get("passed")]
        if bad:
            y, text = log_values(((s[2].get("e"), f"{s[3]}/e") for s in bad), checks)
            fig.add_trace(go.Scatter(x=[s[1] for s in bad], y=y, text=text, name="failing step",
                                     mode="markers", marker={"symbol": "x", "size": 14, "color": "#c0392b"}))
        axes(fig, title=f"{name}: e and f per step", xaxis_title="step",
             xaxis_dtick=1, yaxis_title="relative L2 error of the denoiser output", yaxis_type="log", height=360,
             margin={"t": 50, "b": 40})
        drawn.append((f"{name}: e and f per step", zeros_on_log_axis(fig)))
        chain = go.Figure()
        for key, trace in (("chain", "chain error"), ("chain_bound", "chain bound")):
            y, text = log_values(((s[2].get(key), f"{s[3]}/{key}") for s in mine), checks)
            chain.add_trace(go.Scatter(x=x, y=y, text=text, name=trace, mode="lines+markers",
                                       hovertemplate="step %{x}: %{text}<extra>" + key + "</extra>"))
        axes(chain, title=f"{name}: chain error (x_next vs the reference scheduler's update)",
             xaxis_title="step", xaxis_dtick=1, yaxis_title="relative L2 error of x_next", yaxis_type="log",
             height=300, margin={"t": 50, "b": 40})
        drawn.append((f"{name}: chain error", zeros_on_log_axis(chain)))
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
        axes(fig, title=f"decoded clip vs reference decode: mean "
                   f"{checks.fmt(decode.get('psnr_mean_db'), d + '/psnr_mean_db', '.2f')} dB, worst "
                   f"{checks.fmt(decode.get('psnr_worst_db'), d + '/psnr_worst_db', '.2f')} dB "
                   f"(frame {worst_frame})" + (f"; audio SNR {audio_text} dB" if audio_text else ""),
             xaxis_title="frame", yaxis_title="PSNR dB (luma, cap 100)", height=320, margin={"t": 50, "b": 40})
        drawn.append(("decode check", fig))
    return drawn


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
        rows.append("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in cells) + "</tr>")
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


__all__ = ["TRAJECTORY", "figures", "trajectory_figures"]
