"""Re-judge what a source's report claims: a report from elsewhere is a claim, not a verdict.

Import admits a workload with expected outputs only on a passing validation, and that validation
comes from SRC (its replay report, or a receipt of an earlier import). The plan
(:mod:`ikdata.importing.plan`) already rechecks what can be checked without running anything: the
metrics against the tolerance and against the expected bytes, the digests judged, the reference
digest. What it cannot check is that the numbers came from running the reference at all: a wrong
engine output with a hand-written case of all-zero metrics passes every such check. So import runs
the trusted reference again on the admitted cases, through the replay loop
(:func:`ikdata.replay.runner.replay`, narrowed to the chosen workloads), and refuses the whole import
when a re-judged case does not pass.

Which cases: all of them when there are at most :func:`sample_size` (90), else a uniform random
sample of that many, drawn with the operating system's randomness so SRC cannot predict it: if at
least 5% of the claims were forged, a sample of 90 holds one with probability 1 - 0.95^90 > 99%.
Sampling definitions are judged per group (a pooled test over all of a definition's draws), so a
sampled draw brings its whole definition along. A case this machine judged before is taken from its
own reuse cache (:mod:`ikdata.replay.reuse`: written only by replays here, never read from a
dataset), so importing what was replayed here costs no second run; only under a key that matches in
full (the whole definition record in order, its entry and outputs' order included, every judging setting,
the blobs' digests, the judging code), so a verdict about another dataset's computation never answers
for SRC's.

A family that judges only whole runs (diffusion: a trajectory decides its denoiser and scheduler-step
workloads against its own noise floor and reference schedule) gets one: when SRC's claims include
such workloads, or the import carries trajectories, every claim is re-judged by one whole replay of
SRC, so a perturbed trajectory's workloads disagree and refuse the import.

Nothing here writes into SRC or DST: the report of the re-judging goes to a temporary folder.
"""

from __future__ import annotations

import math
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ikdata.core.problems import Problem
from ikdata.core.status import Status

CONFIDENCE = 0.99  # the chance that a sample holds a forged case, when at least FORGED of them are
FORGED = 0.05


def sample_size(total: int, *, confidence: float = CONFIDENCE, forged: float = FORGED) -> int:
    """How many of ``total`` claims to re-judge: the least n with 1 - (1 - forged)^n >= confidence
    (90 for 99% and 5%), or all of them when there are fewer."""
    return min(total, math.ceil(math.log(1 - confidence) / math.log(1 - forged)))


@dataclass(frozen=True)
class Rejudged:
    """What re-judging SRC's claims found.

    Attributes:
        claimed: workloads admitted on SRC's report (or its receipts' validations).
        judged: how many of them were re-judged here.
        sampled: whether ``judged`` is a random sample (else every claim was re-judged).
        reused: re-judged cases whose verdict came from this machine's reuse cache.
        disagreements: a problem per re-judged case that did not pass, naming the workload.
        disagreeing: the uuids of those workloads, in the same order.
        reasons: why each of them disagrees, in the same order (the problem's message without the workload).
        trusted: the user named SRC's reports as trusted (``--trust-reports``): nothing re-judged.
    """

    claimed: int
    judged: int = 0
    sampled: bool = False
    reused: int = 0
    disagreements: tuple[Problem, ...] = field(default_factory=tuple)
    trusted: bool = False
    disagreeing: tuple[str, ...] = field(default_factory=tuple)
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def agree(self) -> bool:
        return not self.disagreements

    def statement(self) -> str:
        """One line for the user: what was re-judged, how it was chosen, and what it found."""
        if self.trusted:
            return (f"reports trusted (--trust-reports): {self.claimed} case(s) admitted on SRC's report, "
                    "none re-judged")
        if not self.claimed:
            return "no verdict to re-judge"
        how = (f" (sample for {CONFIDENCE:.0%} confidence of catching \u2265{FORGED:.0%} forged)" if self.sampled
               else "")
        reused = f", {self.reused} from this machine's reuse cache" if self.reused else ""
        found = "all agree" if self.agree else f"{len(self.disagreements)} disagree"
        return f"re-judged {self.judged} of {self.claimed} cases{how}{reused}: {found}"

    def to_dict(self) -> dict[str, Any]:
        return {"claimed": self.claimed, "judged": self.judged, "sampled": self.sampled, "reused": self.reused,
                "trusted_reports": self.trusted, "confidence": CONFIDENCE, "forged_fraction": FORGED,
                "agree": self.agree, "disagreements": [str(p) for p in self.disagreements],
                "statement": self.statement()}


def rejudge(plan: Any, *, definitions: Sequence[Any] = (), trust: Sequence[str] = (), everything: bool = False,
            device: str = "cpu", rng: random.Random | None = None) -> Rejudged:
    """Run the trusted reference again on ``plan.claims`` (all, or a sample) and compare.

    ``plan`` is an :class:`ikdata.importing.plan.ImportPlan`; its claims' definitions are trusted
    (the plan refused the others). ``everything``: re-judge every claim, not a sample.

    Returns:
        A :class:`Rejudged`; its ``disagreements`` refuse the import (the caller raises).
    """
    claims = list(plan.claims)
    if plan.trust_reports:
        return Rejudged(len(claims), trusted=True)
    if not claims:
        return Rejudged(0)
    from ikdata.core.dataset import Dataset
    from ikdata.judging import families
    from ikdata.core.cases import read_report
    from ikdata.replay.runner import replay

    source = plan.source
    count = len(claims) if everything else sample_size(len(claims))
    chosen = set(claims) if count >= len(claims) else set((rng or random.SystemRandom()).sample(claims, count))
    ds = Dataset.open(source.root, definitions=[*definitions, *getattr(source, "extra_definitions", ())])
    _as_written(ds.definitions)
    definition_of = {uuid: source.rows[uuid]["definition"] for uuid in claims}
    pooled = {name for name in {definition_of[u] for u in chosen}  # a family that decides over a definition's cases
              if name in ds.definitions and _pools(families.owner(ds.definitions[name]))}
    chosen |= {u for u in claims if definition_of[u] in pooled}  # a group is judged whole
    wanted: set[str] | None = chosen | {row.uuid for row in ds.workloads() if row.definition in pooled}
    if _needs_whole_run(plan, ds, definition_of.values()):  # trajectories: their family judges the whole run
        chosen, wanted = set(claims), None
    with tempfile.TemporaryDirectory(prefix="ikdata-rejudge-") as folder:
        result = replay(ds, device=device, uuids=wanted, trust=trust, report_path=Path(folder) / "replay.json")
        cases = {case.uuid: case for case in read_report(result.report_path).cases}
    refused = {r.definition: r.message for r in result.refused}
    problems, disagreeing, reasons = [], [], []
    for uuid in sorted(chosen, key=lambda u: (definition_of[u], u)):
        case, name = cases.get(uuid), definition_of[uuid]
        if case is not None and case.passed:
            continue
        if case is None:
            found = f"it could not be re-judged: {refused.get(name, 'the replay gave no case for it')}"
        else:
            verb = {Status.FAILED: "fails", Status.ERROR: "errors"}.get(case.status, f"is {case.status}")
            found = f"re-judged here, it {verb}: {case.reason or 'no reason given'}"
        reason = f"SRC's report says it passed, but {found}"
        problems.append(Problem(source.where.get(uuid, str(source.named)), f"workload {uuid} ({name}): {reason}",
                                code="rejudged"))
        disagreeing.append(uuid)
        reasons.append(reason)
    reused = sum(1 for uuid in chosen if uuid in cases and cases[uuid].reused)
    return Rejudged(len(claims), len(chosen), len(chosen) < len(claims), reused, tuple(problems),
                    disagreeing=tuple(disagreeing), reasons=tuple(reasons))


def _needs_whole_run(plan: Any, ds: Any, names: Any) -> bool:
    """Whether a claim is decided by a family that judges only a whole run (diffusion trajectories decide
    their denoiser and scheduler-step workloads): a claim of a definition such a family owns, or trajectories
    the import carries. Then every claim is re-judged in one whole replay of SRC, the family's finish
    included (:func:`ikdata.judging.families.finish_all`)."""
    from ikdata.judging import families

    if getattr(getattr(plan, "carried", None), "added", None):
        return True
    return any(families.owner(ds.definitions[name]).needs_whole_run for name in set(names) if name in ds.definitions)


def _pools(family: Any) -> bool:
    """Whether a family decides a definition's cases together (sampling's pooled test), within a narrowed run."""
    return family.finish is not None and not family.needs_whole_run


def _as_written(definitions: dict[str, Any]) -> None:
    """Judge each definition as DST will hold it: import writes inputs and outputs in ``run``'s order
    (a seed capture's definitions list them sorted), which changes neither the digest nor the trust."""
    from ikdata.core.definitions import Definition, declared_record, is_declared_order

    for name, definition in list(definitions.items()):
        if not is_declared_order(definition.record):
            definitions[name] = Definition.from_dict(declared_record(definition.record), origin=definition.origin,
                                                     source=definition.source)


__all__ = ["CONFIDENCE", "FORGED", "Rejudged", "rejudge", "sample_size"]
