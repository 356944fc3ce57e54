"""Pool the sampling cases of one definition and decide them together (torch-free, so import can recheck).

Each replayed case of a sampling definition records what its own positions showed
(``case["sampling"]``): draws outside the kept set, the sums of the PIT's Legendre
terms over its single draws, and, for positions with a small kept set, each draw
(distribution key, slot, seed tag, u) with the distribution itself. :func:`decide`
pools every case of a definition:

- draws of one distribution (one key) from at least :data:`TV_MIN_DRAWS` distinct seeds
  form a TV test; draws sharing a seed tag count once (a repeated seed repeats the draw);
- every other judged draw joins one pooled PIT test;
- per stratum of tokens a penalty touches (:mod:`ikdata.sampling.aimed`), an aimed test of how
  many draws hit those tokens; and one test of independence over pairs of draws that must be
  independent (:mod:`ikdata.sampling.independence`);
- draws from a request's own generator (:mod:`ikdata.sampling.seeded`): a draw that differs from its
  replay from the seed fails, rows sharing a generator state and identical logits that drew different tokens
  fail, and each generator state joins the pooled tests once (draws sharing it are equal by design);
- each test runs at alpha / (number of tests) (Bonferroni, stated in the verdict), so a correct
  sampler fails a definition with probability <= alpha;
- a case fails when one of its draws lies outside the kept set, or a test it joined
  fails; it is skipped when a test it joined is too small to judge (the report says how
  many draws are needed), or when every position was excluded; otherwise it passes.

The result only depends on the cases' records, so a resumed run, combined shards and a
later re-check give the same verdicts.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple

import numpy as np

from ikdata.sampling import aimed as aimed_tests
from ikdata.sampling import independence
from ikdata.sampling.stats import (DEFAULT_ALPHA, TV_MIN_DRAWS, bonferroni, chi2_isf_even, legendre, ncx2_sf_even,
                                   pit_test, temperature_moments, tv_test, tv_too_small)
from ikdata.core.status import Status
from ikdata.core.cases import TOO_SMALL, Case

JUDGE = "sampling"
HIST_BINS = 10


def is_sampling_case(case: Case | Mapping[str, Any]) -> bool:
    """Whether a report case was judged by the sampling judge."""
    return judged_by_sampling(case.tolerance if isinstance(case, Case) else case.get("tolerance"))


def judged_by_sampling(tolerance: Any) -> bool:
    """Whether a case's tolerance (by output) names the sampling judge for some output."""
    return isinstance(tolerance, Mapping) and any(
        isinstance(spec, Mapping) and spec.get("judge") == JUDGE for spec in tolerance.values())


class Draws(NamedTuple):
    """What the pooled tests read of one case: its uuid and its sampling record (None when it has none)."""

    uuid: str
    record: Any

    @classmethod
    def of(cls, case: Case | Mapping[str, Any]) -> Draws:
        """A case's draws; a bare JSON object needs only ``uuid`` and ``sampling`` (tests build such)."""
        if isinstance(case, Case):
            return cls(case.uuid, case.record(JUDGE))
        return cls(str(case["uuid"]), case.get(JUDGE))


def _seed(text: str) -> int:
    return zlib.crc32(text.encode())


@dataclass
class DefinitionVerdict:
    """The pooled verdict of one definition, and each case's status and reason."""

    definition: str
    alpha: float
    tests: list[dict[str, Any]] = field(default_factory=list)
    statuses: dict[str, tuple[str, str | None, dict[str, Any]]] = field(default_factory=dict)
    not_judged: list[str] = field(default_factory=list)  # what could not be judged, and what it would need
    not_checked: str | None = None  # positions under processors the definition accepts
    degenerate: str | None = None  # draws of one-token distributions: no test has power there
    alpha_split: str | None = None  # how alpha is split over the tests (stated in the verdict)
    processors: list[str] = field(default_factory=list)  # each undeclared processor, what it did, whether accepted
    seeded: str | None = None  # draws from requests' own generators: replayed, equal by design

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for status, _, _ in self.statuses.values():
            counts[str(status)] = counts.get(str(status), 0) + 1  # JSON keys: plain text
        verdict = Status.FAILED if counts.get(Status.FAILED) else (Status.PASSED if counts.get(Status.PASSED)
                                                                    else TOO_SMALL)
        found = {"definition": self.definition, "alpha": self.alpha, "verdict": verdict, "cases": counts,
                 "tests": self.tests}
        not_judged = [t.get("not_judged") for t in self.tests if t.get("too_small") and t.get("not_judged")]
        not_judged += self.not_judged
        if not_judged:
            found["not_judged"] = not_judged  # no power is claimed there: replay --strict fails on it
        if self.not_checked:
            found["not_checked"] = self.not_checked
        if self.degenerate:
            found["degenerate"] = self.degenerate
        if self.alpha_split:
            found["alpha_split"] = self.alpha_split
        if self.processors:
            found["processors"] = self.processors
        if self.seeded:
            found["seeded"] = self.seeded
        if verdict == TOO_SMALL and not not_judged:
            found["not_judged"] = [(f"{self.not_checked}: not checked, by the definition's choice"
                                    if self.not_checked else None) or self.degenerate
                                   or "no draw could be judged (every position excluded, greedy or degenerate)"]
        return found


def decide(definition: str, cases: Iterable[Case | Mapping[str, Any]], *, alpha: float = DEFAULT_ALPHA) -> DefinitionVerdict:
    """Pool the sampling records of a definition's cases into its tests; the status of every case (by uuid).

    Example:
        >>> verdict = decide("sampling_f32_v128", report["cases"])
        >>> verdict.statuses[uuid][0]
        'passed'
    """
    cases = sorted((d for d in map(Draws.of, cases) if isinstance(d.record, Mapping)), key=lambda d: d.uuid)
    result = DefinitionVerdict(definition, alpha)
    sums, n_pit, hist = np.zeros(4), 0, np.zeros(HIST_BINS, np.int64)
    moments, n_moments = None, 0
    joined: dict[str, set[str]] = {c.uuid: set() for c in cases}
    groups: dict[str, dict[str, tuple[int, float, str]]] = {}
    distributions: dict[str, list[float]] = {}
    strata: dict[str, tuple[list[float], int, set[str]]] = {}
    states_seen: set[str] = set()
    equal_by_design = 0
    seed_failures, result.seeded = seed_checks(cases)
    for case in cases:
        record = case.record
        for name, entry in sorted((record.get("aimed") or {}).items()):
            ps, hits, members = strata.setdefault(name, ([], 0, set()))
            ps.extend(float(v) for v in entry.get("p") or ())
            strata[name] = (ps, hits + int(entry.get("hits", 0)), members | {case.uuid})
        pit = record.get("pit") or {}
        if pit.get("n"):
            sums += np.asarray(pit["sums"], np.float64)
            n_pit += int(pit["n"])
            hist += np.asarray(pit.get("histogram") or np.zeros(HIST_BINS), np.int64)
            joined[case.uuid].add("pit")
        found = record.get("moments") or {}
        if found.get("n"):
            got = np.asarray(found["sums"], np.float64)
            moments = got if moments is None else moments + got
            n_moments += int(found["n"])
        distributions.update(record.get("distributions") or {})
        for state, u in record.get("pit_shared") or ():
            if state in states_seen:
                equal_by_design += 1  # the same noise as a draw already counted: not an independent draw
                continue
            states_seen.add(state)
            sums += legendre(np.asarray([float(u)])).sum(axis=0)
            n_pit += 1
            hist += np.histogram([float(u)], HIST_BINS, (0.0, 1.0))[0]
            joined[case.uuid].add("pit")
        for i, (key, slot, tag, u) in enumerate(record.get("draws") or ()):
            tag = str(tag) if tag is not None else f"{case.uuid}:{i}"
            if tag.startswith("generator "):
                state = tag[len("generator "):]
                if state in states_seen:
                    equal_by_design += 1
                    continue
                states_seen.add(state)
            groups.setdefault(key, {}).setdefault(tag, (int(slot), float(u), case.uuid))
    degenerate = sorted(k for k in groups if len(distributions.get(k) or ()) == 1)
    if degenerate:  # one kept token: only the outside check can judge its draws; no test has power there
        count = sum(len(groups[k]) for k in degenerate)
        result.degenerate = (f"{count} draw(s) from a one-token distribution: degenerate, judged only by the "
                             "outside check (no number of draws gives a test power there)")
        for k in degenerate:
            del groups[k]
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
    aimed_names = [name for name in sorted(strata) if strata[name][0]]
    pairs, pair_sum, paired = independence.pool((c.uuid, c.record.get("independence") or {}) for c in cases)
    n_tests = (1 if n_pit else 0) + len(tv_keys) + len(aimed_names) + (1 if pairs else 0)
    each = bonferroni(alpha, n_tests)
    result.alpha_split = (f"alpha {alpha:g} split over {n_tests} test(s) (" + ", ".join(
        part for part in (("pooled PIT" if n_pit else ""), (f"{len(tv_keys)} TV" if tv_keys else ""),
                          (f"{len(aimed_names)} aimed: " + ", ".join(aimed_names) if aimed_names else ""),
                          ("independence" if pairs else ""))
        if part) + f"): {each:.3g} each (Bonferroni)") if n_tests else None
    outcome: dict[str, dict[str, Any]] = {}
    if n_pit:
        found = pit_test(sums, n_pit, moments if moments is not None else np.zeros((1, 4)), n_moments,
                         alpha=each, seed=_seed(definition)).to_dict()
        if found["too_small"] and not rejects(found):
            need = pit_draws_needed(moments, n_moments, each)
            found["not_judged"] = (f"pooled PIT test over {n_pit} draws cannot see a 50% temperature error: not "
                                   "judged" + (f"; about {need} draws would" if need else
                                               "; these distributions give it no power at any n"))
        found.update(histogram=[int(v) for v in hist], sums=[float(v) for v in sums])
        outcome["pit"] = found
    for key in tv_keys:
        probs = np.asarray(distributions[key], np.float64)
        counts = _counts(groups[key], distributions[key])
        for _, _, uuid in groups[key].values():
            joined[uuid].add(f"tv:{key}")
        found = tv_test(counts, probs, alpha=each, seed=_seed(key)).to_dict()
        if found["too_small"] and not rejects(found):
            need = tv_draws_needed(probs, each, _seed(key), len(groups[key]))
            found["not_judged"] = (f"TV test of {len(groups[key])} draws of distribution {key} cannot see any shift: "
                                   "not judged" + (f"; about {need} draws would" if need else ""))
        found.update(key=key, counts=[int(v) for v in counts])
        outcome[f"tv:{key}"] = found
    for name in aimed_names:
        ps, hits, members = strata[name]
        outcome[f"aimed:{name}"] = aimed_tests.aimed_test(name, ps, hits, alpha=each)
        for uuid in members:
            joined[uuid].add(f"aimed:{name}")
    if pairs:
        outcome["independence"] = independence.independence_test(pairs, pair_sum, alpha=each,
                                                                 seed=_seed(definition + ":independence"))
        for uuid in paired:
            joined[uuid].add("independence")
    result.tests = list(outcome.values())
    if result.seeded and equal_by_design:
        result.seeded += (f"; {equal_by_design} draw(s) share a generator state with a draw already counted: equal by "
                          "design (the same noise, as the seed asks), counted once in the pooled tests")
    for case in cases:
        if case.uuid in seed_failures:
            result.statuses[case.uuid] = (Status.FAILED, seed_failures[case.uuid],
                                          {"positions": case.record.get("positions", 0), "alpha": alpha})
            continue
        result.statuses[case.uuid] = _case_status(case, joined[case.uuid], outcome, alpha, each)
    result.processors = processor_lines(cases)
    accepted = sorted({n for c in cases for n in c.record.get("not_checked") or ()})
    if accepted:
        positions = sum(int(c.record.get("positions", 0)) for c in cases if c.record.get("not_checked"))
        result.not_checked = f"{positions} position(s) not checked: processor(s) {', '.join(accepted)} accepted"
    return result


def seed_checks(cases: Iterable[Draws]) -> tuple[dict[str, str], str | None]:
    """The exact checks of draws from requests' own generators (:mod:`ikdata.sampling.seeded`): per failing case
    why (a draw that differs from its replay from the seed; rows of one generator state with identical logits
    that drew different tokens), and a line saying what was checked (None: no seeded draw)."""
    failures: dict[str, str] = {}
    by_state: dict[tuple[str, str], list[tuple[str, int]]] = {}
    replays = {"match": 0, "mismatch": 0, "unclear": 0}
    rows = 0
    for case in cases:
        for entry in case.record.get("seeded") or ():
            position, state, key, token, replayed = entry
            rows += 1
            by_state.setdefault((str(state), str(key)), []).append((case.uuid, int(token)))
            if replayed in replays:
                replays[replayed] += 1
            if replayed == "mismatch":
                failures.setdefault(case.uuid, (
                    f"workload {case.uuid}: seeded draw {token} at position {position} differs from its replay from "
                    f"the seed (generator {state}): the sampler did not draw with the request's seed"))
    conflicts = 0
    for (state, _), drew in sorted(by_state.items()):
        tokens = sorted({t for _, t in drew})
        if len(tokens) > 1:
            conflicts += 1
            for uuid, token in drew:
                failures.setdefault(uuid, (
                    f"workload {uuid}: {len(drew)} row(s) share generator state {state} and identical logits but drew "
                    f"different tokens ({', '.join(map(str, tokens[:5]))}): the same seed must give the same draw"))
    if not rows:
        return failures, None
    states = len({state for state, _ in by_state})
    line = (f"{rows} draw(s) from requests' own generators ({states} generator state(s)): "
            f"{replays['match']} replayed from their seed and matched, {replays['mismatch']} differ"
            + (f", {replays['unclear']} tie(s) at float precision not replayed" if replays["unclear"] else "")
            + (f"; {conflicts} state(s) with identical logits drew different tokens" if conflicts else ""))
    return failures, line


def processor_lines(cases: Iterable[Draws]) -> list[str]:
    """One line per processor the declared settings do not imply, over a definition's cases: the positions it
    ran at, the mass of the distribution before it that it removed and the TV it moved (mean over positions,
    and the most at one), and whether the definition accepts it (then its part is not checked)."""
    found: dict[tuple[str, str, bool], dict[str, float]] = {}
    for case in cases:
        record = case.record
        n = int(record.get("positions", 0))
        for accepted, listed in ((False, record.get("unknown_processors")), (True, record.get("accepted_processors"))):
            for proc in listed or ():
                entry = found.setdefault((str(proc.get("name")), str(proc.get("digest")), accepted),
                                         {"n": 0, "removed": 0.0, "removed_max": 0.0, "tv": 0.0, "tv_max": 0.0,
                                          "measured": 0})
                entry["n"] += n
                for key, name in (("removed", "removed_mass"), ("tv", "moved_tv")):
                    value = proc.get(name)
                    if isinstance(value, Mapping):
                        entry[key] += float(value.get("mean", 0.0)) * n
                        entry[f"{key}_max"] = max(entry[f"{key}_max"], float(value.get("max", 0.0)))
                        entry["measured"] += n if key == "removed" else 0
    lines = []
    for (name, digest, accepted), e in sorted(found.items()):
        if e["measured"]:
            did = (f"removed {e['removed'] / e['measured']:.1%} of the mass before it on average "
                   f"({e['removed_max']:.1%} at most) and moved TV {e['tv'] / e['measured']:.3f} on average "
                   f"({e['tv_max']:.3f} at most)")
        else:
            did = "what it removed was not measured at capture"
        state = ("accepted by the definition (judge.accept_processors): its part is not checked" if accepted else
                 "not declared by the settings and not accepted: judged as if absent")
        lines.append(f"processor {name} (source {digest}) at {e['n']} position(s): {did}; {state}")
    return lines


def rejects(test: Mapping[str, Any]) -> bool:
    """Whether a test rejects at its alpha: a failure, whatever its power (power only decides "not judged" for a
    test that does not reject)."""
    p_value = test.get("p_value")
    return isinstance(p_value, (int, float)) and p_value < float(test["alpha"])


def _counts(draws: Mapping[str, tuple[int, float, str]], probs: list[float]) -> np.ndarray:
    counts = np.zeros(len(probs), np.int64)
    for slot, _, _ in draws.values():
        counts[min(slot, len(probs) - 1)] += 1
    return counts


def _case_status(case: Draws, joined: set[str], outcome: Mapping[str, Mapping[str, Any]],
                 alpha: float, each: float) -> tuple[str, str | None, dict[str, Any]]:
    record = case.record
    tests = [outcome[name] for name in sorted(joined)]
    metrics: dict[str, Any] = {"positions": record.get("positions", 0), "judged": record.get("judged", 0),
                               "outside": record.get("outside", 0), "alpha": alpha, "alpha_per_test": each,
                               "tests": len(tests), "p_value": min((t["p_value"] for t in tests), default=None),
                               "too_small": any(t["too_small"] for t in tests)}
    if record.get("outside"):
        first = (record.get("outside_examples") or [{}])[0]
        return Status.FAILED, (f"workload {case.uuid}: {record['outside']} drawn token(s) outside the kept set, "
                          f"e.g. token {first.get('token')} at position {first.get('position')} (kept "
                          f"{first.get('kept')} tokens){processors_note(record)}"), metrics
    failed = [t for t in tests if rejects(t)]  # a rejection is a failure whatever the power computation says
    if failed:
        return Status.FAILED, "; ".join(describe_test(t) for t in failed) + processors_note(record), metrics
    if record.get("not_checked"):
        return Status.SKIPPED, (f"distribution not checked: processor(s) {', '.join(record['not_checked'])} "
                                "accepted by the definition (judge.accept_processors)"), metrics
    small = [t for t in tests if t["too_small"]]  # none of them rejects (else failed above)
    if small:
        return Status.SKIPPED, "too few draws to judge: " + "; ".join(describe_test(t) for t in small), metrics
    if not tests:
        excluded = record.get("excluded") or {}
        why = ", ".join(f"{k} {v}" for k, v in sorted(excluded.items())) or "greedy positions only"
        if record.get("greedy") and record.get("judged"):
            return Status.PASSED, None, metrics  # greedy: every draw was the argmax
        if record.get("replayed"):
            return Status.PASSED, None, metrics  # every random draw replayed exactly from its seed
        return Status.SKIPPED, f"no position could be judged ({why})", metrics
    return Status.PASSED, None, metrics


def processors_note(record: Mapping[str, Any]) -> str:
    """What a failure adds about processors the declared settings do not imply (empty when there are none)."""
    unknown = record.get("unknown_processors") or ()
    if not unknown:
        return ""
    def effect(p: Mapping[str, Any]) -> str:
        removed, moved = p.get("removed_mass"), p.get("moved_tv")
        if not isinstance(removed, Mapping) or not isinstance(moved, Mapping):
            return ""
        return (f"; removed {float(removed.get('mean', 0)):.1%} of the mass before it on average, moved TV "
                f"{float(moved.get('mean', 0)):.3f}")

    names = ", ".join(f"{p.get('name')} (source {p.get('digest')}{effect(p)})" for p in unknown)
    return (f"; processors present that the declared settings do not imply: {names} (if one is meant, name it in "
            "the definition's judge.accept_processors: its part is then not checked)")


def pit_draws_needed(moments: Any, n_sampled: int, alpha: float) -> int | None:
    """About how many single draws like these the PIT test needs to see a 50% temperature error (None: never)."""
    if moments is None or n_sampled <= 0:
        return None
    crit = chi2_isf_even(alpha, 4)
    best = max(float(((np.asarray(m) / n_sampled) ** 2).sum()) for m in np.asarray(moments, np.float64)[[0, -1]])
    if best <= 1e-12:
        return None
    lo, hi = 0.0, 1.0
    while ncx2_sf_even(crit, 4, hi) < 0.9:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ncx2_sf_even(crit, 4, mid) < 0.9 else (lo, mid)
    return int(np.ceil(hi / best))


def tv_draws_needed(probs: np.ndarray, alpha: float, seed: int, n: int) -> int | None:
    """About how many draws of one distribution its TV test needs to see the largest movable mass."""
    if np.count_nonzero(probs) < 2:
        return None
    size = max(n, 1)
    while size < 1 << 20:
        size *= 2
        if not tv_too_small(probs, size, alpha=alpha, seed=seed):
            return size
    return None


def describe_test(test: Mapping[str, Any]) -> str:
    """One line saying what a pooled test found: n, statistic, p-value vs alpha, null, detectable shift."""
    if test["test"] == "aimed":
        return aimed_tests.describe(test)
    if test["test"] == "independence":
        return independence.describe(test)
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


def recheck_case(case: Case, report: Report | None, spec: Mapping[str, Any], found: Mapping[str, Any],
                 definition: Any = None) -> list[str]:
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
    cases = [c for c in (report.cases if report is not None else ()) if c.definition == case.definition
             and is_sampling_case(c) and isinstance(c.record(JUDGE), Mapping)]
    if not reasons and isinstance(case.record(JUDGE), Mapping) and cases:
        verdict = decide(case.definition, cases, alpha=float(alpha))
        status, why, _ = verdict.statuses.get(case.uuid, ("missing", "not in the pooled cases", {}))
        if status != Status.PASSED:
            reasons.append(f"recomputed from the report's cases: {status}" + (f" ({why})" if why else ""))
    return reasons


def recheck(case: Case, report: Report | None, definition: Any = None) -> list[str] | None:
    """The sampling family's re-check of a report case (:func:`ikdata.core.verdicts.recheck`): why its "passed"
    cannot be trusted (empty: it can); None when no output of the case was judged by the sampling judge.

    The case's common facts (status, metrics and tolerance per output, the definition's outputs and
    reference) are checked as for any case; each sampling output by :func:`recheck_case`.
    """
    if not is_sampling_case(case):
        return None
    from ikdata.core.verdicts import recheck_outputs

    def judged(output: str, spec: Mapping[str, Any], found: Mapping[str, Any]) -> list[str] | None:
        if spec.get("judge") != JUDGE:
            return None
        return recheck_case(case, report, spec, found, definition)

    return recheck_outputs(case, definition, judged=judged)


__all__ = ["DefinitionVerdict", "Draws", "JUDGE", "decide", "describe_test", "is_sampling_case", "judged_by_sampling", "pit_draws_needed",
           "processor_lines", "processors_note", "recheck", "recheck_case", "rejects", "tv_draws_needed"]
