"""Verdicts of a diffusion trajectory's replay, from its measurements: one rule, torch-free.

The replay (:mod:`ikdata.diffusion.replay`) measures, per step and stream, ``e`` (the engine's output
against the reference's, relative L2), ``f`` (the reference against itself with another exact
attention kernel), the chain error, continuity, the initial noise and the decoded clip's PSNR; this
module decides. The same functions decide when replay writes a case and when import re-checks one
(:func:`recheck`), so a "passed" in a report is always recomputed from its numbers.

A step passes when ``e <= k*f + eps + slack``. ``e`` and ``f`` are measured against the reference run one
precision above the engine's (float64 for a float32 engine, float32 for bf16 and fp16): ``f`` is how far
the reference in the engine's own dtype (and with the other exact attention) lands from it, so the floor is
the dtype's rounding of the same computation and is never zero by a coincidence of two kernels; ``slack``
is one rounding of the reference output to the engine's dtype (relative L2: at most the dtype's unit
roundoff), the metric's own resolution for that tensor. A degenerate floor (``f == 0``) falls back to the
definition's tolerance (``fallback``), and the report says so. Derivation: docs/diffusion.md "Numerics by
dtype".
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ikdata.core.status import Status
from ikdata.core.cases import Case, Report

DEFAULT_K = 2.0  # docs/diffusion.md "Numerics by dtype": honest exact kernels measured at most 1.16 f, every dtype
DEFAULT_EPS = 0.0  # absolute slack on a relative L2 error; each step's own slack (one rounding) replaced 1e-6
CHAIN_ULPS = 4.0  # chain error bound, in units of the latent dtype's machine epsilon
CONTINUITY_TOLERANCE = 0.0  # x_next of step i must be x of step i+1 exactly (same digest)
NOISE_TOLERANCE = 0.0  # the first x must be the recipe's noise exactly (as a multiset of values)
PSNR_MEAN_DB = 25.0  # decoded clip vs the reference decode (luma), mean over frames: docs/diffusion.md
PSNR_WORST_DB = 20.0  # ... and the worst frame
AUDIO_SNR_DB = 10.0  # audio stream vs the reference's audio (after aligning the codec's delay)
PSNR_CAP_DB = 100.0
_EPS_BY_DTYPE = {"torch.float32": 2.0 ** -23, "torch.float16": 2.0 ** -10, "torch.bfloat16": 2.0 ** -7,
                 "torch.float64": 2.0 ** -52}


def chain_bound(dtype: str) -> float:
    """The largest chain error of a correct scheduler update in ``dtype`` (relative L2)."""
    return CHAIN_ULPS * _EPS_BY_DTYPE.get(dtype, 2.0 ** -7)


def unit_roundoff(dtype: str) -> float:
    """Half the machine epsilon of ``dtype``: the largest relative error of one rounding to it."""
    return _EPS_BY_DTYPE.get(dtype, 2.0 ** -7) / 2


def step_bound(f: float | None, *, k: float, eps: float, fallback: float, slack: float = 0.0) -> tuple[float, bool]:
    """(bound on e, degenerate floor)."""
    if f is None or not f > 0.0:
        return fallback, True
    return k * f + eps + slack, False


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def decide(measures: Mapping[str, Any]) -> dict[str, Any]:
    """Decide a trajectory from its measurements (the case's ``trajectory`` object).

    Returns ``{"status", "reason", "first_failure", "worst", "steps_passed", "steps_total"}`` and
    fills each step's ``bound``, ``ratio``, ``degenerate`` and ``passed``.
    """
    k, eps = float(measures["k"]), float(measures["eps"])
    fallback = float(measures.get("fallback_tolerance") or 0.0)
    part = measures.get("part")  # a step workload's case: "denoiser" (e only) or "scheduler_step" (chain only)
    failures: list[str] = []
    first: dict[str, Any] | None = None
    schedule = measures.get("schedule") or {}
    if schedule.get("stopped"):
        failures.append(f"schedule mismatch, stopped at step 0: {schedule.get('reason')}")
        first = {"step": 0, "streams": [], "check": "schedule"}
    worst = None
    passed_steps = 0
    steps = measures.get("steps") or []
    for step in steps:
        e, f, chain = _num(step.get("e")), _num(step.get("f")), _num(step.get("chain"))
        bound, degenerate = step_bound(f, k=k, eps=eps, fallback=fallback, slack=_num(step.get("slack")) or 0.0)
        step["bound"], step["degenerate"] = bound, degenerate
        step["ratio"] = None if e is None else (e / f if f else (math.inf if e > 0 else 0.0))
        # the smallest error added to the output (orthogonal to its rounding) that fails the step: what it can see
        step["detectable"] = None if degenerate else math.sqrt(max(bound * bound - (f or 0.0) ** 2, 0.0))
        checks = []
        if part != "scheduler_step" and (e is None or not e <= bound):
            checks.append("e")
        if part != "denoiser" and (step.get("chain_reason") or (chain is not None and
                                                               not chain <= float(step.get("chain_bound", math.inf)))):
            checks.append("chain")
        step["passed"] = not checks
        if checks:
            step["failed"] = checks
        else:
            passed_steps += 1
            step.pop("failed", None)
        if step["ratio"] is not None and (worst is None or step["ratio"] > worst["ratio"]):
            worst = {"ratio": step["ratio"], "step": step["index"], "stream": step["stream"]}
        if checks and (first is None or (first["check"] != "schedule" and step["index"] < first["step"])):
            first = {"step": step["index"], "streams": [step["stream"]], "check": "+".join(checks)}
        elif checks and first is not None and step["index"] == first["step"] and step["stream"] not in first["streams"]:
            first["streams"].append(step["stream"])
            if "+".join(checks) not in first["check"].split(","):
                first["check"] += "," + "+".join(checks)
    for stream, check in sorted((measures.get("noise") or {}).items()):
        if isinstance(check, Mapping) and check.get("equal") is False:
            failures.append(f"initial noise of stream {stream!r} is not the recipe's for seed {measures.get('seed')} "
                            f"(relative difference {check.get('rel'):.3g})")
    for item in measures.get("continuity") or []:
        if not item.get("equal") and not item.get("edited"):  # a callback's edit is the program's: judged as given
            failures.append(f"continuity broken at step {item['step']} of stream {item['stream']!r}: {item['what']} "
                            f"(relative difference {item.get('rel')})")
    decode = measures.get("decode")
    if isinstance(decode, Mapping) and decode.get("error"):
        failures.append(f"decode check: {decode['error']}")
    elif isinstance(decode, Mapping) and decode.get("passed") is False:
        failures.append(f"decode check: {decode.get('reason')}")
    failures[:0] = _step_failures(steps, measures.get("scheduler"))
    seen = [s["detectable"] for s in steps if _num(s.get("detectable")) is not None]
    return {"status": Status.FAILED if failures else Status.PASSED, "reason": "; ".join(failures) or None,
            "first_failure": first, "worst": worst, "steps_passed": passed_steps, "steps_total": len(steps),
            "detectable": {"min": min(seen), "max": max(seen)} if seen else None}


def _step_failures(steps: list[dict[str, Any]], scheduler: Any) -> list[str]:
    """The reasons of failed steps, earliest first: denoiser outputs outside the floor (``e``), and scheduler
    steps whose x_next is not the reference step's (``chain``), each naming its first step and stream."""
    found: list[tuple[int, int, str]] = []
    floor = [s for s in steps if "e" in (s.get("failed") or ())]
    if floor:
        f0 = min(floor, key=lambda s: s["index"])
        streams = [s["stream"] for s in floor if s["index"] == f0["index"]]
        worst = max(floor, key=lambda s: (s.get("ratio") or 0.0))
        found.append((f0["index"], 0, f"{len(floor)} of {len(steps)} step(s) outside the floor; first at step "
                                       f"{f0['index']} ({', '.join(streams)}: e); worst e/f {_fmt(worst.get('ratio'))} "
                                       f"at step {worst['index']} ({worst['stream']})"))
    chained = [s for s in steps if "chain" in (s.get("failed") or ())]
    if chained:
        c0 = min(chained, key=lambda s: s["index"])
        streams = [s["stream"] for s in chained if s["index"] == c0["index"]]
        why = f"; {c0['chain_reason']}" if c0.get("chain_reason") else ""
        found.append((c0["index"], 1, f"{len(chained)} scheduler step(s) wrong; first at step {c0['index']} "
                                      f"({', '.join(streams)}: chain): x_next is not the reference "
                                      f"{scheduler or 'scheduler'}.step of the recorded x, out, state and noise "
                                      f"(relative error {_fmt(c0.get('chain'))} > bound "
                                      f"{_fmt(c0.get('chain_bound'))}{why})"))
    return [message for _, _, message in sorted(found)]


def _fmt(value: Any) -> str:
    return "inf" if value == math.inf else (f"{value:.3g}" if isinstance(value, (int, float)) else str(value))


def recheck(case: Case | Mapping[str, Any], report: Report | None = None, definition: Any = None) -> list[str] | None:
    """The diffusion family's re-check of a report case (:func:`ikdata.core.verdicts.recheck`): why a
    trajectory's (or one of its denoiser steps') "passed" cannot be trusted, empty for a trustworthy pass;
    None when the case holds no trajectory measurements (not the family's). ``case`` may also be the bare JSON
    of its status and measurements.

    Recomputes the verdict from the recorded measurements, and refuses bounds looser than the
    defaults (k, eps, PSNR and SNR thresholds, chain bounds).
    """
    problems: list[str] = []
    if isinstance(case, Case):
        status, measures = case.status, case.record(TRAJECTORY)
    else:
        status, measures = case.get("status"), case.get(TRAJECTORY)
    if not isinstance(measures, Mapping):
        return None
    if status != Status.PASSED:
        return [f"status is {str(status)!r}, not {Status.PASSED!r}"]
    try:
        k, eps = float(measures["k"]), float(measures["eps"])
    except (KeyError, TypeError, ValueError):
        return ["k and eps are not recorded"]
    if k > DEFAULT_K or eps > DEFAULT_EPS:
        problems.append(f"floor bound looser than the default (k {k} > {DEFAULT_K} or eps {eps} > {DEFAULT_EPS})")
    for step in measures.get("steps") or []:
        if _num(step.get("chain_bound")) is None or step["chain_bound"] > chain_bound(str(step.get("dtype"))):
            problems.append(f"step {step.get('index')} ({step.get('stream')}): chain bound missing or looser than "
                            "the default")
        slack = step.get("slack", 0.0)
        if _num(slack) is None or not 0.0 <= slack <= unit_roundoff(str(step.get("dtype"))):
            problems.append(f"step {step.get('index')} ({step.get('stream')}): slack {slack!r} is not one rounding "
                            f"to {step.get('dtype')} (at most its unit roundoff)")
    decode = measures.get("decode")
    if isinstance(decode, Mapping) and decode.get("psnr_mean_db") is not None:
        limits = decode.get("thresholds") or {}
        if (limits.get("psnr_mean_db") or 0) < PSNR_MEAN_DB or (limits.get("psnr_worst_db") or 0) < PSNR_WORST_DB:
            problems.append("decode check thresholds looser than the defaults")
    copy = {key: value for key, value in measures.items()}
    copy["steps"] = [dict(s) for s in measures.get("steps") or []]
    verdict = decide(copy)
    if verdict["status"] != Status.PASSED:
        problems.append(f"the recorded measurements fail: {verdict['reason']}")
    return problems




# -- the denoiser workloads of a trajectory's steps: their cases follow from the trajectory's ----------------

_SHARED = ("k", "eps", "fallback_tolerance", "attention", "level", "scheduler")
TRAJECTORY_PREFIX = "trajectory:"  # a trajectory case's definition: trajectory:<pipeline class>
TRAJECTORY = "trajectory"  # a case's record of measurements (a trajectory's, or one step's of it)


def steps_of(trajectory: Case) -> list[Case]:
    """The cases of the denoiser workloads a judged trajectory names, decided from its step measurements.

    Each holds the measurements of its step (every stream) under ``trajectory`` (with ``of``, the
    trajectory id), and the digests of its row's inputs and receipt's outputs, so import re-checks
    it like any case (:func:`recheck`).
    """
    measures = trajectory.record(TRAJECTORY) or {}
    found = []
    for workload in measures.get("workloads") or []:
        known = {key: workload[key] for key in ("axes", "input_digests", "expected_digests", "reference_digest")
                 if workload.get(key) is not None}
        case = Case(workload["definition"], workload["uuid"], Status.SKIPPED, **known, device=trajectory.device,
                    torch=trajectory.torch, seconds=0.0)
        if trajectory.status is Status.ERROR:
            found.append(case.with_(status=Status.ERROR, reason=f"its trajectory {trajectory.uuid[:12]} could not "
                                                              f"be replayed: {trajectory.reason}"))
            continue
        subset = {key: measures.get(key) for key in _SHARED}
        kind = workload.get("kind", "denoiser")  # a denoiser is judged by e, a scheduler step by its chain
        stream = workload.get("stream") if kind == "scheduler_step" else None
        subset.update(of=trajectory.uuid, index=workload["index"], part=kind,
                      steps=[dict(s) for s in measures.get("steps") or [] if s.get("index") == workload["index"]
                             and (stream is None or s.get("stream") == stream)])
        if (measures.get("schedule") or {}).get("stopped"):
            subset["schedule"] = measures["schedule"]
        verdict = decide(subset)
        reason = verdict["reason"] and f"step {workload['index']} of trajectory {trajectory.uuid[:12]}: {verdict['reason']}"
        found.append(case.with_(status=verdict["status"], reason=reason, records={TRAJECTORY: subset}))
    return found


OPERATOR_FACTS = ("metrics", "tolerance")  # what a scheduler-step workload's own reference measured


def keep_operator_facts(earlier: Case | None, step: Case) -> Case:
    """A step workload's case as its trajectory decides it, keeping what its own reference measured before (a
    scheduler-step definition's metrics and tolerance: shown on the report page). The trajectory's verdict
    governs: its chain check runs the reference scheduler on the reference schedule, which the workload's
    own scalars cannot."""
    if earlier is None:
        return step
    kept = {key: getattr(earlier, key) for key in OPERATOR_FACTS
            if getattr(earlier, key) is not None and getattr(step, key) is None}
    return step.with_(**kept) if kept else step


def regroup(report: Report) -> Report:
    """The report with the cases of denoiser workloads replaced by the ones their (judged) trajectory cases
    decide (a whole run, or shards combined)."""
    held = {case.uuid: case for case in report.cases}
    changed = []
    for case in report.cases:
        if not case.definition.startswith(TRAJECTORY_PREFIX):
            continue
        for step in steps_of(case):
            earlier = held.get(step.uuid)
            if earlier is None or earlier.definition != step.definition:
                continue  # another shard's workload
            step = keep_operator_facts(earlier, step)
            if earlier.to_json() != step.to_json():
                changed.append(step)
    return report.with_cases(changed)


__all__ = ["AUDIO_SNR_DB", "CHAIN_ULPS", "DEFAULT_EPS", "DEFAULT_K", "PSNR_CAP_DB", "PSNR_MEAN_DB", "PSNR_WORST_DB",
           "TRAJECTORY", "TRAJECTORY_PREFIX", "chain_bound", "decide", "keep_operator_facts", "recheck", "regroup", "step_bound",
           "steps_of", "unit_roundoff"]
