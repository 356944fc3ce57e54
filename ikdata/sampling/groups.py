"""Pool the sampling cases of one definition and decide them together (torch-free, so import can recheck).

Each replayed case of a sampling definition records what its own positions showed
(``case["sampling"]``): draws outside the kept set, the sums of the PIT's Legendre
terms over its single draws, and, for positions with a small kept set, each draw
(distribution key, slot, seed tag, u) with the distribution itself. :func:`decide`
pools every case of a definition:

- draws of one distribution (one key) from at least :data:`TV_MIN_DRAWS` distinct seeds
  form a TV test; draws sharing a seed tag count once (a repeated seed repeats the draw);
- every other judged draw joins one pooled PIT test;
- each test runs at alpha / (number of tests) (Bonferroni), so a correct sampler fails a
  definition with probability <= alpha;
- a case fails when one of its draws lies outside the kept set, or a test it joined
  fails; it is skipped when a test it joined is too small to judge (the report says how
  many draws are needed), or when every position was excluded; otherwise it passes.

The result only depends on the cases' records, so a resumed run, combined shards and a
later re-check give the same verdicts.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from ikdata.sampling.stats import (DEFAULT_ALPHA, TV_MIN_DRAWS, bonferroni, legendre, pit_test,
                                        temperature_moments, tv_test, tv_too_small)
from ikdata.core.status import Status

JUDGE = "sampling"
HIST_BINS = 10


def is_sampling_case(case: Mapping[str, Any]) -> bool:
    """Whether a report case was judged by the sampling judge."""
    tolerance = case.get("tolerance")
    return isinstance(tolerance, Mapping) and any(
        isinstance(spec, Mapping) and spec.get("judge") == JUDGE for spec in tolerance.values())


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


@dataclass
class DefinitionVerdict:
    """The pooled verdict of one definition, and each case's status and reason."""

    definition: str
    alpha: float
    tests: list[dict[str, Any]] = field(default_factory=list)
    statuses: dict[str, tuple[str, str | None, dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for status, _, _ in self.statuses.values():
            counts[str(status)] = counts.get(str(status), 0) + 1  # JSON keys: plain text
        verdict = Status.FAILED if counts.get(Status.FAILED) else (Status.PASSED if counts.get(Status.PASSED)
                                                                    else "too_small")
        return {"definition": self.definition, "alpha": self.alpha, "verdict": verdict, "cases": counts,
                "tests": self.tests}


def decide(definition: str, cases: Iterable[Mapping[str, Any]], *, alpha: float = DEFAULT_ALPHA) -> DefinitionVerdict:
    """Pool the sampling records of a definition's cases into its tests; the status of every case.

    Example:
        >>> verdict = decide("sampling_f32_v128", report["cases"])
        >>> verdict.statuses[uuid][0]
        'passed'
    """
    cases = sorted((c for c in cases if isinstance(c.get("sampling"), Mapping)), key=lambda c: str(c["uuid"]))
    result = DefinitionVerdict(definition, alpha)
    sums, n_pit, hist = np.zeros(4), 0, np.zeros(HIST_BINS, np.int64)
    moments, n_moments = None, 0
    joined: dict[str, set[str]] = {c["uuid"]: set() for c in cases}
    groups: dict[str, dict[str, tuple[int, float, str]]] = {}
    distributions: dict[str, list[float]] = {}
    for case in cases:
        record = case["sampling"]
        pit = record.get("pit") or {}
        if pit.get("n"):
            sums += np.asarray(pit["sums"], np.float64)
            n_pit += int(pit["n"])
            hist += np.asarray(pit.get("histogram") or np.zeros(HIST_BINS), np.int64)
            joined[case["uuid"]].add("pit")
        found = record.get("moments") or {}
        if found.get("n"):
            got = np.asarray(found["sums"], np.float64)
            moments = got if moments is None else moments + got
            n_moments += int(found["n"])
        distributions.update(record.get("distributions") or {})
        for i, (key, slot, tag, u) in enumerate(record.get("draws") or ()):
            tag = str(tag) if tag is not None else f"{case['uuid']}:{i}"
            groups.setdefault(key, {}).setdefault(tag, (int(slot), float(u), case["uuid"]))
    tv_keys = sorted(k for k, draws in groups.items() if len(draws) >= TV_MIN_DRAWS and k in distributions)
    # a distribution with too few draws for its TV test to see any shift joins the PIT test instead
    first_alpha = bonferroni(alpha, 1 + len(tv_keys))
    tv_keys = [k for k in tv_keys if not tv_too_small(np.asarray(distributions[k]), len(groups[k]),
                                                      alpha=first_alpha, seed=_seed(k))]
    pooled_keys = [k for k in sorted(groups) if k not in tv_keys]
    extra_u = [(u, uuid) for k in pooled_keys for (_, u, uuid) in groups[k].values()]
    if extra_u:
        us = np.array([u for u, _ in extra_u])
        sums += legendre(us).sum(axis=0)
        n_pit += len(us)
        hist += np.histogram(us, HIST_BINS, (0.0, 1.0))[0]
        for _, uuid in extra_u:
            joined[uuid].add("pit")
        rows = [distributions[k] for k in pooled_keys if k in distributions for _ in groups[k]]
        if rows:
            width = max(len(r) for r in rows)
            padded = np.zeros((len(rows), width))
            for j, r in enumerate(rows):
                padded[j, :len(r)] = r
            got = temperature_moments(padded)
            moments = got if moments is None else moments + got
            n_moments += len(rows)
    n_tests = (1 if n_pit else 0) + len(tv_keys)
    each = bonferroni(alpha, n_tests)
    outcome: dict[str, dict[str, Any]] = {}
    if n_pit:
        found = pit_test(sums, n_pit, moments if moments is not None else np.zeros((1, 4)), n_moments,
                         alpha=each, seed=_seed(definition)).to_dict()
        found.update(histogram=[int(v) for v in hist], sums=[float(v) for v in sums])
        outcome["pit"] = found
    for key in tv_keys:
        probs = np.asarray(distributions[key], np.float64)
        counts = _counts(groups[key], distributions[key])
        for _, _, uuid in groups[key].values():
            joined[uuid].add(f"tv:{key}")
        found = tv_test(counts, probs, alpha=each, seed=_seed(key)).to_dict()
        found.update(key=key, counts=[int(v) for v in counts])
        outcome[f"tv:{key}"] = found
    result.tests = list(outcome.values())
    for case in cases:
        result.statuses[case["uuid"]] = _case_status(case, joined[case["uuid"]], outcome, alpha, each)
    return result


def _counts(draws: Mapping[str, tuple[int, float, str]], probs: list[float]) -> np.ndarray:
    counts = np.zeros(len(probs), np.int64)
    for slot, _, _ in draws.values():
        counts[min(slot, len(probs) - 1)] += 1
    return counts


def _case_status(case: Mapping[str, Any], joined: set[str], outcome: Mapping[str, Mapping[str, Any]],
                 alpha: float, each: float) -> tuple[str, str | None, dict[str, Any]]:
    record = case["sampling"]
    tests = [outcome[name] for name in sorted(joined)]
    metrics: dict[str, Any] = {"positions": record.get("positions", 0), "judged": record.get("judged", 0),
                               "outside": record.get("outside", 0), "alpha": alpha, "alpha_per_test": each,
                               "tests": len(tests), "p_value": min((t["p_value"] for t in tests), default=None),
                               "too_small": any(t["too_small"] for t in tests)}
    if record.get("outside"):
        first = (record.get("outside_examples") or [{}])[0]
        return Status.FAILED, (f"workload {case['uuid']}: {record['outside']} drawn token(s) outside the kept set, "
                          f"e.g. token {first.get('token')} at position {first.get('position')} (kept "
                          f"{first.get('kept')} tokens)"), metrics
    failed = [t for t in tests if not t["too_small"] and t["p_value"] < t["alpha"]]
    if failed:
        return Status.FAILED, "; ".join(describe_test(t) for t in failed), metrics
    small = [t for t in tests if t["too_small"]]
    if small:
        return Status.SKIPPED, "too few draws to judge: " + "; ".join(describe_test(t) for t in small), metrics
    if not tests:
        excluded = record.get("excluded") or {}
        why = ", ".join(f"{k} {v}" for k, v in sorted(excluded.items())) or "greedy positions only"
        if record.get("greedy") and record.get("judged"):
            return Status.PASSED, None, metrics  # greedy: every draw was the argmax
        return Status.SKIPPED, f"no position could be judged ({why})", metrics
    return Status.PASSED, None, metrics


def describe_test(test: Mapping[str, Any]) -> str:
    """One line saying what a pooled test found: n, statistic, p-value vs alpha, null, detectable shift."""
    if test["test"] == "pit":
        shift = test.get("detectable_temperature_error")
        seen = f"detects a temperature error of {shift:.0%}" if shift else "cannot detect even a 50% temperature error"
        return (f"pooled PIT test over {test['n']} draws: p = {test['p_value']:.3g} vs alpha {test['alpha']:.3g} "
                f"({seen} with power 0.9)")
    shift = test.get("detectable_tv")
    seen = f"detects TV {shift:.3f}" if shift else "cannot detect any shift"
    need = f"; about {test['draws_for_tv_0.05']} draws detect TV 0.05" if test.get("draws_for_tv_0.05") else ""
    return (f"TV test of {test['n']} draws of distribution {test['key']}: TV {test['tv']:.4f} (expected "
            f"{test['expected_tv']:.4f}, threshold {test['threshold']:.4f}), p = {test['p_value']:.3g} vs alpha "
            f"{test['alpha']:.3g} ({seen} with power 0.9{need})")


def recheck_case(case: Mapping[str, Any], report: Mapping[str, Any], spec: Mapping[str, Any],
                 found: Mapping[str, Any], definition: Any = None) -> list[str]:
    """Why a sampling case's "passed" cannot be trusted (empty: it can), for :func:`ikdata.core.verdicts.recheck`.

    The recorded alpha may not be below the definition's (or the default), the order must be the
    definition's, no draw may lie outside the kept set, no test may be too small or below its
    alpha; and when the report holds the records of the definition's cases the pooled verdict is
    recomputed from them and must pass this case.
    """
    reasons = []
    judge = (definition.judge if definition is not None and isinstance(definition.judge, Mapping) else {}) or {}
    alpha = spec.get("alpha")
    allowed = float(judge.get("alpha", DEFAULT_ALPHA))
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha < allowed or alpha >= 1:
        reasons.append(f"alpha {alpha!r} is below the required {allowed} (a smaller alpha misses more)")
    if judge and spec.get("order") != judge.get("order", "any"):
        reasons.append(f"judged with cut order {spec.get('order')!r}, the definition declares "
                       f"{judge.get('order', 'any')!r}")
    if found.get("outside"):
        reasons.append(f"{found.get('outside')} drawn token(s) outside the kept set")
    if found.get("too_small"):
        reasons.append("too few draws to judge")
    p_value, each = found.get("p_value"), found.get("alpha_per_test")
    if found.get("tests"):
        if not isinstance(p_value, (int, float)) or not isinstance(each, (int, float)) or p_value < each:
            reasons.append(f"p-value {p_value!r} is below its alpha {each!r}")
    elif not found.get("judged"):
        reasons.append("no draw was judged")
    cases = [c for c in report.get("cases") or () if c.get("definition") == case.get("definition")
             and is_sampling_case(c) and isinstance(c.get("sampling"), Mapping)]
    if not reasons and isinstance(case.get("sampling"), Mapping) and cases:
        verdict = decide(str(case.get("definition")), cases, alpha=float(alpha))
        status, why, _ = verdict.statuses.get(case.get("uuid"), ("missing", "not in the pooled cases", {}))
        if status != Status.PASSED:
            reasons.append(f"recomputed from the report's cases: {status}" + (f" ({why})" if why else ""))
    return reasons


__all__ = ["DefinitionVerdict", "JUDGE", "decide", "describe_test", "is_sampling_case", "recheck_case"]
