"""The sampling judge in replay: judge each sampler call's draws, then decide each definition's cases together.

A definition names it with ``"judge": {"name": "sampling", "order": "any", "alpha": 0.001}``.
Its engine output is ``samples`` (the drawn token ids); its inputs are either full raw
logits with per-row settings (``logits``, ``temperature``, ``top_k``, ``top_p``, ``min_p``,
``seed``: what capture at the sampler records) or a server's top-K list with n seeded
draws (``logprobs``, the settings as scalars, ``vocab_size``, ``seeds``: what
``ikdata import`` of completions writes). The distribution the draws must come from is
computed by :mod:`ikdata.sampling.distribution` from those inputs under the declared cut order; the
definition's reference returns the same post-cut probabilities for other tools.

Per case (:func:`execute`): a draw outside the kept set fails the case at once, naming the
workload; otherwise the case waits (``skipped``, "awaiting ...") for :func:`decide_all`, the
post-pass that pools every case of the definition in the report (resumed ones included)
and sets each case's final status (:mod:`ikdata.sampling.groups`). The pooled tests
are listed under the report's ``"sampling"``.
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Callable, Mapping

import numpy as np

from ikdata.core.errors import DefinitionError, RecordError
from ikdata.sampling.distribution import ANY, DEFAULT_TOL, LOGPROB_TOL, ORDERS, Settings
from ikdata.sampling.groups import JUDGE, decide, describe_test, judged_by_sampling, processors_note
from ikdata.sampling.pipeline import Extras
from ikdata.sampling.records import record_logits, record_top_logprobs
from ikdata.sampling.stats import DEFAULT_ALPHA
from ikdata.core.status import Status
from ikdata.core.cases import Case, Group, Report

AWAITING = "awaiting the pooled test of its definition (run replay to the end)"


def is_sampling(definition: Any) -> bool:
    """Whether a definition is judged by the sampling judge."""
    return isinstance(definition.judge, Mapping) and definition.judge.get("name") == JUDGE


ENGINE = "engine"  # the order is the engine's, recorded in each receipt (sampler.order)


def engine_orders() -> dict[str, str]:
    """Each registered capture source's sampler cut order by its name (:attr:`ikdata.core.features.Source.order`):
    the order a receipt that names its engine but no order was drawn in."""
    from ikdata.core import features

    return {source.name: source.order for source in features.sources() if source.order is not None}


def judge_settings(definition: Any) -> tuple[str, float, float | None]:
    """(order, alpha, tol) from the definition's judge, checked.

    Raises:
        DefinitionError: an unknown order or an alpha outside (0, 1).
    """
    judge = definition.judge
    order = judge.get("order", ANY)
    alpha = float(judge.get("alpha", DEFAULT_ALPHA))
    if order not in (ANY, ENGINE) and order not in ORDERS:
        raise DefinitionError(f"judge 'sampling': order {order!r} is unknown; expected 'engine', 'any' or one of "
                              f"{', '.join(ORDERS)}", definition=definition.name)
    if not 0 < alpha < 1:
        raise DefinitionError(f"judge 'sampling': alpha {alpha} must lie in (0, 1)", definition=definition.name)
    tol = judge.get("tol")
    return order, alpha, float(tol) if tol is not None else None


def receipt_order(receipt: Any) -> str:
    """The cut order a receipt declares (``sampler.order``, else its engine's); ``any`` when it says nothing."""
    provenance = getattr(receipt, "provenance", None) or {}
    sampler = provenance.get("sampler") if isinstance(provenance.get("sampler"), Mapping) else {}
    order = sampler.get("order")
    if order in ORDERS:
        return order
    return engine_orders().get(str(provenance.get("engine")), ANY)


def unknown_processors(receipt: Any) -> list[dict[str, Any]]:
    """The processors a receipt lists that its declared settings do not imply (name and source digest)."""
    provenance = getattr(receipt, "provenance", None) or {}
    sampler = provenance.get("sampler") if isinstance(provenance.get("sampler"), Mapping) else {}
    return [{"name": str(p.get("name")), "digest": str(p.get("digest", ""))[:16],
             **{k: dict(p[k]) for k in ("removed_mass", "moved_tv") if isinstance(p.get(k), Mapping)}}
            for p in sampler.get("processors") or () if isinstance(p, Mapping) and not p.get("declared")]


def receipt_generators(receipt: Any, n: int) -> list[Mapping[str, Any] | None] | None:
    """Per row, what its seed fixes (``sampler.generator`` for one row, ``sampler.generators`` for several:
    :mod:`ikdata.sampling.seeded`); None when the receipt says nothing."""
    provenance = getattr(receipt, "provenance", None) or {}
    sampler = provenance.get("sampler") if isinstance(provenance.get("sampler"), Mapping) else {}
    found = sampler.get("generators")
    if found is None and isinstance(sampler.get("generator"), Mapping):
        found = [sampler["generator"]]
    if not isinstance(found, list) or len(found) != n:
        return None
    return [g if isinstance(g, Mapping) else None for g in found]


def _extras(values: Mapping[str, Any], n: int) -> Extras:
    """Penalties, bans and extra warpers from a ``sampling_logits_f32`` workload's inputs."""
    def get(name: str, default: Any) -> Any:
        return values.get(name, default)

    words, word = [], []
    for t in np.asarray(get("bad_words", [-1]), np.int64).reshape(-1).tolist():
        if t < 0:
            if word:
                words.append(word)
            word = []
        else:
            word.append(t)
    return Extras.of(n, context=np.asarray(values["context"], np.int64).reshape(n, -1), pad=get("pad", 0),
                     generated=get("generated", 0), repetition_penalty=get("repetition_penalty", 1.0),
                     presence_penalty=get("presence_penalty", 0.0), frequency_penalty=get("frequency_penalty", 0.0),
                     no_repeat_ngram=get("no_repeat_ngram", 0), min_new_tokens=get("min_new_tokens", 0),
                     min_length=get("min_length", 0), typical_p=get("typical_p", 1.0), epsilon=get("epsilon", 0.0),
                     eta=get("eta", 0.0), eos=np.asarray(get("eos", [-1]), np.int64).reshape(-1).tolist(),
                     bad_words=words)


def _numpy(value: Any) -> Any:
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value


def execute(run: Any, row: Any, pending: Any, load_all: Callable[..., tuple[dict, dict]]) -> Case:
    """Judge one sampling workload's draws; the case (failed at once, or awaiting the pooled test)."""
    case, definition, receipt, started = pending.case, pending.definition, pending.receipt, pending.started
    order, alpha, tol = judge_settings(definition)
    inputs, input_digests = load_all(run, definition.inputs, row.inputs, f"{row.source}:{row.line}")
    expected, expected_digests = load_all(run, definition.outputs, receipt.expected_output,
                                          f"{receipt.source}:{receipt.line}")
    values = {k: _numpy(v) for k, v in inputs.items()}
    if any(str(t).startswith("ikdata:flashinfer=") for t in definition.record.get("tags") or ()):
        from ikdata.flashinfer.sampling import sampler_inputs  # FlashInfer's sampling APIs, read by their names

        values = sampler_inputs(values)
    samples = np.asarray(_numpy(expected["samples"]), np.int64).reshape(-1)
    seed = zlib.crc32(row.uuid.encode())
    declared_order = order
    if order == ENGINE:
        order = receipt_order(receipt)
    unknown = unknown_processors(receipt)
    accepted = {str(n) for n in definition.judge.get("accept_processors") or ()}
    if "logits" in values:
        logits = np.asarray(values["logits"], np.float32)
        n = logits.shape[0]
        settings = Settings(*(np.broadcast_to(np.asarray(values[k], dtype), (n,)).copy() for k, dtype in (
            ("temperature", np.float64), ("top_k", np.int64), ("top_p", np.float64), ("min_p", np.float64))))
        problem = settings.problem()
        if problem:
            raise RecordError(problem, path=f"{row.source}:{row.line}")
        seeds = np.broadcast_to(np.asarray(values.get("seed", -1), np.int64), (n,))
        extras = _extras(values, n) if "context" in values else None
        record = record_logits(logits, settings, samples, seeds, order=order, tol=tol or DEFAULT_TOL, seed=seed,
                               extras=extras, generators=receipt_generators(receipt, n))
        if unknown and {p["name"] for p in unknown} <= accepted:  # the user means them: not checked, said so
            record = not_checked(record, unknown)
    elif "logprobs" in values:
        record = record_top_logprobs(
            np.asarray(values["logprobs"], np.float64).reshape(-1).tolist(), samples.tolist(),
            np.asarray(values.get("seeds", np.full(len(samples), -1)), np.int64).reshape(-1).tolist(),
            temperature=float(values["temperature"]), top_k=int(values.get("top_k", 0)),
            top_p=float(values.get("top_p", 1.0)), min_p=float(values.get("min_p", 0.0)),
            vocab_size=int(values.get("vocab_size", 0)), order=order, tol=tol or LOGPROB_TOL, seed=seed)
    else:
        raise DefinitionError("a sampling definition needs the input 'logits' (full raw logits) or 'logprobs' "
                              "(a top-K list)", definition=definition.name)
    if unknown and not record.get("not_checked"):
        record["unknown_processors"] = unknown  # named in any failure: they may be what changed the distribution
    case = case.with_(  # the verdict depends on the definition's other cases: never reused alone (no reuse key)
        reuse_key=None, input_digests=input_digests, expected_digests=expected_digests,
        records={**case.records, JUDGE: record},
        tolerance={"samples": {"dtype": "int64", "judge": JUDGE, "alpha": alpha, "order": declared_order}},
        metrics={"samples": {"positions": record["positions"], "judged": record["judged"],
                             "outside": record["outside"], "alpha": alpha}},
        seconds=time.perf_counter() - started)
    mismatch = next((e for e in record.get("seeded") or () if e[4] == "mismatch"), None)
    if mismatch is not None and not record["outside"]:
        return case.with_(status=Status.FAILED, reason=f"workload {row.uuid}: seeded draw {mismatch[3]} at position "
                          f"{mismatch[0]} differs from its replay from the seed (generator {mismatch[1]}): the "
                          "sampler did not draw with the request's seed")
    if record["outside"]:
        first = record["outside_examples"][0]
        return case.with_(status=Status.FAILED, reason=f"workload {row.uuid}: {record['outside']} drawn token(s) "
                          f"outside the kept set, e.g. token {first['token']} at position {first['position']} "
                          f"(kept {first['kept']} tokens){processors_note(record)}")
    return case.with_(status=Status.SKIPPED, reason=AWAITING)


def not_checked(record: dict[str, Any], unknown: list[dict[str, Any]]) -> dict[str, Any]:
    """A record whose positions ran through processors the user accepts: nothing is judged, and it says so."""
    names = sorted({p["name"] for p in unknown})
    n = record["positions"]
    return {**record, "judged": 0, "greedy": 0, "outside": 0, "outside_examples": [], "draws": [],
            "distributions": {}, "pit": {"n": 0, "sums": [0.0] * 4, "histogram": [0] * 10}, "moments": {},
            "excluded": {"processor_accepted": n}, "not_checked": names, "aimed": {}, "independence": {},
            "accepted_processors": unknown}


def execute_case(run: Any, row: Any, pending: Any) -> Case:
    """The sampling family's judge of one case (:mod:`ikdata.judging.families`)."""
    from ikdata.replay.api import load_all

    return execute(run, row, pending, load_all)


def decide_all(out: Any) -> list[Group]:
    """Pool the sampling cases of every definition in the report; record each changed case and the report's
    "sampling" group verdicts.

    ``out`` is the :class:`ikdata.replay.report.ReportFile` being written: changed cases are journaled.
    """
    changed, groups = regrouped(out.typed())
    for case in changed:
        out.add(case)
    if groups:
        out.set_groups(JUDGE, groups)
    return groups


def finish(run: Any, *, shard: Any = None, settings: Any = None) -> None:
    """The sampling family's post-pass (:mod:`ikdata.judging.families`): pool every definition's draws."""
    decide_all(run.out)


def regroup(report: Report) -> Report:
    """The sampling family's ``regroup`` hook: the report with its sampling definitions decided again (a whole
    run, or shards combined): changed cases and the "sampling" group verdicts."""
    changed, groups = regrouped(report)
    report = report.with_cases(changed)
    return report.with_groups(JUDGE, groups) if groups else report


def regrouped(report: Report) -> tuple[list[Case], list[Group]]:
    """Decide every sampling definition of a report over all its cases: the cases whose verdict changed, and
    each definition's group verdict (sorted by definition)."""
    by_definition: dict[str, list[Case]] = {}
    for case in report.cases:
        if judged_by_sampling(case.tolerance) and isinstance(case.record(JUDGE), Mapping):
            by_definition.setdefault(case.definition, []).append(case)
    groups, changed = [], []
    for name in sorted(by_definition):
        cases = by_definition[name]
        alpha = max(float(c.tolerance["samples"].get("alpha", DEFAULT_ALPHA)) for c in cases)
        verdict = decide(name, cases, alpha=alpha)
        for case in cases:
            status, reason, metrics = verdict.statuses[case.uuid]
            updated = case.with_(status=Status(status), metrics={"samples": metrics})
            updated = updated.with_(reason=reason) if reason else updated.without("reason")
            if updated.to_json() != case.to_json():
                changed.append(updated)
        groups.append(Group.from_json(verdict.to_dict()))
    return changed, groups


def verdict_lines(groups: list[Mapping[str, Any]]) -> list[str]:
    """Human lines for the report's "sampling": each definition's verdict, alpha, and every test it ran."""
    lines = []
    for group in groups:
        cases = ", ".join(f"{v} {k}" for k, v in sorted((group.get("cases") or {}).items()))
        # alpha only where a statistical test ran: a verdict of exact checks alone (greedy draws) claims no level
        level = f"at alpha {group['alpha']:g}" if group.get("tests") else "with no statistical test"
        lines.append(f"{group['definition']}: sampling verdict {group['verdict']} {level} ({cases})")
        lines += [f"  {describe_test(t)}" for t in group.get("tests") or ()]
        lines += [f"  not judged: {why}" for why in group.get("not_judged") or ()]
        if group.get("alpha_split"):
            lines.append(f"  {group['alpha_split']}")
        if group.get("seeded"):
            lines.append(f"  {group['seeded']}")
        if group.get("degenerate"):
            lines.append(f"  {group['degenerate']}")
        if group.get("not_checked"):
            lines.append(f"  {group['not_checked']}: the distribution was not checked for that part")
        lines += [f"  {line}" for line in group.get("processors") or ()]
        if not group.get("tests"):
            lines.append("  no test ran: every draw was greedy, excluded, or a repeat of a seed")
    return lines


def summary_lines(report: Report | Mapping[str, Any]) -> list[str]:
    """The sampling family's part of replay's end summary (its ``summary`` hook, handed the
    :class:`~ikdata.core.cases.Report`; its JSON is read too): each definition's pooled verdict with alpha, p-values and detectable shifts."""
    return verdict_lines([group.to_json() for group in Report.of(report).groups.get(JUDGE, ())])


__all__ = ["summary_lines", "verdict_lines", "AWAITING", "decide_all", "execute", "execute_case", "finish", "is_sampling", "judge_settings", "regroup", "regrouped"]
