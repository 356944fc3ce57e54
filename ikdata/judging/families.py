"""Judge families, declared in one place: how each finishes a replay and how it combines shards.

A family is a way of judging that reaches beyond one workload: operators are judged one case at a time
(nothing to finish), sampling definitions by a pooled statistical test over all their draws, diffusion
trajectories per pipeline call against their own noise floor. Every path that produces a report (a
local replay, a shard, a Ray driver) calls :func:`finish_all` once its cases are in, and
``replay-combine`` calls :func:`regroup_all` on the joined cases, so no path can forget a family: a
family left out is a family the report never decides, and that shows as ``skipped`` cases, never as a
pass. A family names its functions by module path, so this module loads no torch and no feature.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Family:
    """One judge family.

    Attributes:
        name: as the report and the messages call it.
        finish: ``"module:function"`` called as ``f(run, shard=..., settings=...)`` after every workload
            case of a run (or shard, or Ray driver) is in ``run.out``: decides group verdicts and adds or
            updates cases. None when cases are decided one by one.
        regroup: ``"module:function"`` called as ``f(report)`` on the cases of combined shards (a dict
            report, changed in place). None when a combined case needs nothing more.
        needs_whole_run: finish only when the run was not narrowed to named definitions.
        owns: ``"module:function"`` called as ``f(definition)``: whether this family judges the definition's
            workloads (the first family that owns a definition takes it; operators take the rest).
        settle: ``f(run, row, case)``: a case decided before any tensor loads (e.g. a denoiser step waits for
            its trajectory), or None to go on as operators do.
        execute: ``f(run, row, pending)``: judge one case of an owned definition once its reference is known.
        blobs: ``f(ds)``: the blobs ``finish`` loads, so a driver reading a URL fetches them first.
        capture: a module with ``install(capturer)`` (and optionally ``uninstall()``) that ``ikdata capture``
            installs after the operator adapters: the family's own hooks (HF's sampler, Diffusers pipelines).
        vouches: ``f(definition)``: whether the family judges the definition's workloads with its own code only,
            never running the definition's reference (diffusion's discovered denoiser calls), so re-judging
            them needs no trust in the definition.
    """

    name: str
    finish: str | None = None
    regroup: str | None = None
    needs_whole_run: bool = False
    owns: str | None = None
    settle: str | None = None
    execute: str | None = None
    blobs: str | None = None
    capture: str | None = None
    vouches: str | None = None

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The family's function ``name`` ("finish", "regroup", "owns", "settle", "execute"), or None."""
        return _resolve(getattr(self, name))


@functools.cache
def _resolve(spec: str | None) -> Callable[..., Any] | None:
    if spec is None:
        return None
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function)


FAMILIES: tuple[Family, ...] = (
    Family("sampling", owns="ikdata.sampling.judge:is_sampling", execute="ikdata.sampling.judge:execute_case",
           finish="ikdata.sampling.judge:finish", regroup="ikdata.sampling.judge:regroup",
           capture="ikdata.sampling.capture"),
    Family("diffusion", owns="ikdata.diffusion.replay:is_denoiser", settle="ikdata.diffusion.replay:settle_step",
           finish="ikdata.diffusion.replay:finish", regroup="ikdata.diffusion.verdicts:regroup",
           blobs="ikdata.diffusion.replay:blob_paths", capture="ikdata.diffusion.capture", needs_whole_run=True,
           vouches="ikdata.diffusion.discovery:vouches"),
    Family("operators"),  # judged case by case by closeness or a metric judge: the replay loop itself
)
OPERATORS = FAMILIES[-1]


def owner(definition: Any) -> Family:
    """The family that judges a definition's workloads (operators when no other claims it)."""
    if definition is not None:
        for family in FAMILIES:
            owns = family.hook("owns")
            if owns is not None and owns(definition):
                return family
    return OPERATORS


def vouched(definition: Any) -> bool:
    """Whether a family judges ``definition``'s workloads with its own code only (:attr:`Family.vouches`)."""
    for family in FAMILIES:
        vouches = family.hook("vouches")
        if vouches is not None and vouches(definition):
            return True
    return False


def finish_all(run: Any, *, shard: Any = None, narrowed: bool = False,
               settings: Mapping[str, Any] | None = None) -> None:
    """Let every family decide what it judges over many cases, in declaration order."""
    for family in FAMILIES:
        finish = family.hook("finish")
        if finish is None or (narrowed and family.needs_whole_run):
            continue
        finish(run, shard=shard, settings=(settings or {}).get(family.name))


def finish_blobs(ds: Any) -> list[str]:
    """Every blob the families' ``finish`` will load from ``ds``."""
    paths: set[str] = set()
    for family in FAMILIES:
        blobs = family.hook("blobs")
        if blobs is not None:
            paths |= set(blobs(ds))
    return sorted(paths)


def capture_modules() -> list[str]:
    """The modules whose ``install(capturer)`` capture runs after the operator adapters, in family order."""
    return [family.capture for family in FAMILIES if family.capture]


def regroup_all(report: dict[str, Any]) -> None:
    """Decide every family's groups again over the combined cases of shards."""
    for family in FAMILIES:
        regroup = family.hook("regroup")
        if regroup is not None:
            regroup(report)


__all__ = ["FAMILIES", "Family", "OPERATORS", "capture_modules", "finish_all", "finish_blobs", "owner", "regroup_all",
           "vouched"]
