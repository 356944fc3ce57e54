"""Judge families, declared in one place: how each finishes a replay and how it combines shards.

A family is a way of judging that reaches beyond one workload: operators are judged one case at a time
(nothing to finish), sampling definitions by a pooled statistical test over all their draws, diffusion
trajectories per pipeline call against their own noise floor. Every path that produces a report (a
local replay, a shard, a Ray driver) calls :func:`finish_all` once its cases are in, and
``replay-combine`` calls :func:`regroup_all` on the joined cases, so no path can forget a family: a
family left out is a family the report never decides, and that shows as ``skipped`` cases, never as a
pass. The replay command asks every family for its settings (:func:`settings_from`) and its part of the end
summary (:func:`summaries`); a report lists the group verdicts of the families that decide over groups
(:func:`grouped`). A family names its functions by module path, so this module loads no torch and no feature.

The families are read from the registry (:mod:`ikdata.core.features`) each time, never copied: a family
registered after this module was imported is on every path (``FAMILIES`` is computed on each read too).
"""

from __future__ import annotations

from typing import Any, Mapping

from ikdata.core import features
from ikdata.core.features import Family
from ikdata.core.cases import Report


OPERATORS = Family("operators")  # judged case by case: the last family, taking what no declared family owns


def every() -> tuple[Family, ...]:
    """Every registered family in declaration order, then operators."""
    return (*features.families(), OPERATORS)


def __getattr__(name: str) -> Any:
    if name == "FAMILIES":  # read live, so no holder of the name keeps a registry of its own
        return every()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def owner(definition: Any) -> Family:
    """The family that judges a definition's workloads (operators when no other claims it)."""
    if definition is not None:
        for family in every():
            owns = family.hook("owns")
            if owns is not None and owns(definition):
                return family
    return OPERATORS


def vouched(definition: Any) -> bool:
    """Whether a family judges ``definition``'s workloads with its own code only (:attr:`Family.vouches`)."""
    for family in every():
        vouches = family.hook("vouches")
        if vouches is not None and vouches(definition):
            return True
    return False


def finish_all(run: Any, *, shard: Any = None, narrowed: bool = False,
               settings: Mapping[str, Any] | None = None) -> None:
    """Let every family decide what it judges over many cases, in declaration order."""
    for family in every():
        finish = family.hook("finish")
        if finish is None or (narrowed and family.needs_whole_run):
            continue
        finish(run, shard=shard, settings=(settings or {}).get(family.name))


def finish_blobs(ds: Any) -> list[str]:
    """Every blob the families' ``finish`` will load from ``ds``."""
    paths: set[str] = set()
    for family in every():
        blobs = family.hook("blobs")
        if blobs is not None:
            paths |= set(blobs(ds))
    return sorted(paths)


def grouped() -> tuple[Family, ...]:
    """The families that decide verdicts over groups of cases (:attr:`Family.judges`): a report lists each
    one's group verdicts under the family's name."""
    return tuple(family for family in every() if family.judges)


def settings_from(options: Mapping[str, Any]) -> dict[str, Any]:
    """Each family's replay settings from the replay command's options (by parameter name), by family name.

    Raises:
        UsageError: an option a family refuses (an unknown attention name, a negative bound).
    """
    found = {}
    for family in every():
        make = family.hook("settings")
        if make is not None:
            found[family.name] = make(options)
    return found


def summaries(report: Report) -> list[Any]:
    """Every family's part of replay's end summary, in declaration order: lines and
    :class:`ikdata.judging.summary_table.SummaryTable` blocks, each from the family's ``summary`` hook handed
    the :class:`~ikdata.core.cases.Report`."""
    found: list[Any] = []
    for family in every():
        summary = family.hook("summary")
        if summary is not None:
            found += summary(report)
    return found


def regroup_all(report: Report) -> Report:
    """Decide every family's groups again over the combined cases of shards: the report each family's
    ``regroup`` hook gives back, in declaration order (a hook that gives None changed nothing)."""
    for family in every():
        regroup = family.hook("regroup")
        if regroup is not None:
            report = regroup(report) or report
    return report


__all__ = ["FAMILIES", "Family", "OPERATORS", "every", "finish_all", "finish_blobs", "grouped", "owner", "regroup_all",
           "settings_from", "summaries", "vouched"]
