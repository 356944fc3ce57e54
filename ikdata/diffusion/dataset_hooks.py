"""Diffusion's records in the dataset operations, reached through the family declaration (:mod:`.feature`).

validate, gc/pull/stats (``references``), import (``carried``), lineage, diff, stats and show call these
functions by the ``"module:function"`` strings the diffusion family declares, never by name. Cheap to import
(no torch, no other diffusion module at module level), and each returns at once when the dataset holds none
of diffusion's record kinds (trajectories, model records), so a dataset without them pays nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


def _holds(root: str | os.PathLike) -> bool:
    """Whether the dataset at ``root`` holds any of diffusion's record kinds (trajectories, model records)."""
    from ikdata.diffusion.models import MODELS_DIR
    from ikdata.diffusion.trajectories import TRAJECTORIES_DIR

    return any(os.path.lexists(Path(root) / top) for top in (TRAJECTORIES_DIR, MODELS_DIR))


# -- validate, gc, pull, stats ----------------------------------------------------------------------------


@dataclass
class Validated:
    """What validate learns from diffusion's records.

    Attributes:
        problems: every problem of the trajectories and model records.
        uses: the blob uses validate checks like any other, as ``(where, line, pointer, ref, dtype, shape,
            context)``.
        counted: what the validation report counts for the family (``{"trajectories": n}``).
    """

    problems: list = field(default_factory=list)
    uses: list = field(default_factory=list)
    counted: dict[str, int] = field(default_factory=lambda: {"trajectories": 0})


def validate(ds: Any, workload_uuids: Any) -> Validated:
    """Validate's check of the trajectories and model records of ``ds`` (``workload_uuids``: every row's uuid)."""
    if not _holds(ds.root):
        return Validated()
    from ikdata.diffusion.views import validate_trajectories

    problems, uses, count = validate_trajectories(ds, workload_uuids)
    return Validated(problems, uses, {"trajectories": count})


def references(root: str | os.PathLike) -> tuple[list[str], list]:
    """Every blob path the trajectories and stored model records name, once per use, and the unreadable lines
    met (what gc keeps, a pull fetches and stats counts, beside the rows and receipts)."""
    if not _holds(root):
        return [], []
    from ikdata.diffusion.trajectories import referenced_paths

    return referenced_paths(root)


SHOWN_IDS = 10  # trajectory ids ``ikdata stats`` prints; --json lists every one


@dataclass
class TrajectoryStats:
    """What ``ikdata stats`` (and ``ikdata capture``'s summary) says about a dataset's trajectories."""

    root: Path
    counts: dict[str, Any]
    ids: frozenset[str] = frozenset()

    @property
    def counted(self) -> dict[str, Any]:
        """The figures for the stats JSON document."""
        return {"trajectories": {**self.counts, "ids": sorted(self.ids)}}

    def lines(self) -> list[str]:
        """The stats line for a person, none when the dataset has no trajectories."""
        counts = self.counts
        if not counts.get("trajectories"):
            return []
        per = ", ".join(f"{k} {v}" for k, v in sorted(counts["per_pipeline"].items()))
        shown = sorted(self.ids)[:SHOWN_IDS]
        more = len(self.ids) - len(shown)
        ids = ", ".join(i[:12] for i in shown) + (f" and {more} more ('ikdata stats --json' lists all)" if more else "")
        return [f"trajectories {counts['trajectories']} ({per}) · steps {counts['steps']} · "
                f"incomplete {counts['incomplete']} · models {counts['models']}",
                f"trajectory ids: {ids} ('ikdata show DS ID' shows one)"]

    def since(self, earlier: TrajectoryStats) -> list[str]:
        """One line per trajectory added after ``earlier`` was taken (for a capture's summary)."""
        if self.ids <= earlier.ids:
            return []
        from ikdata.diffusion.views import capture_summary

        return capture_summary(self.root, set(earlier.ids))


def stats(root: str | os.PathLike) -> TrajectoryStats:
    """The trajectory counts of the dataset (folder) at ``root``; zeros when it holds none (or does not exist)."""
    from_root = Path(root)
    if not _holds(from_root):
        return TrajectoryStats(from_root, {"trajectories": 0, "incomplete": 0, "steps": 0, "per_pipeline": {},
                                           "models": 0})
    from ikdata.diffusion.views import count, ids

    return TrajectoryStats(from_root, count(from_root).to_dict(), frozenset(ids(from_root)))


# -- show, lineage, diff ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Described:
    """A trajectory as ``ikdata show`` gives it: the JSON document and its printing for a person."""

    document: dict[str, Any]

    def show(self, out: Any) -> None:
        """Print it with the command line's output module ``out`` (handed in: the feature imports no CLI)."""
        from ikdata.diffusion.views import print_trajectory

        print_trajectory(self.document, out)


def describe(ds: Any, key: str) -> Described | None:
    """The trajectory whose id starts with ``key`` (for ``ikdata show``), or None when none does.

    Raises:
        UsageError: the prefix matches several trajectories.
    """
    if not _holds(ds.root):
        return None
    from ikdata.diffusion.views import describe as describe_trajectory

    document = describe_trajectory(ds, key)
    return Described(document) if document is not None else None


@dataclass(frozen=True)
class TrajectoryLineage:
    """Lineage through trajectories: the workloads of a step, and the pipeline call each workload was a step of."""

    root: Path

    def chains(self, key: str, trace: Callable[[Any, str], list]) -> list | None:
        """The chains of the workloads of ``TRAJECTORY[:STEP[:STREAM]]``, or None when ``key`` names no trajectory.

        Raises:
            UsageError: the step or stream is not in the trajectory, or the prefix is ambiguous.
        """
        from ikdata.diffusion.views import step_chains

        return step_chains(self.root, key, trace)

    def calls(self, uuids: set[str]) -> dict[str, dict[str, Any]]:
        """uuid -> the pipeline call it was a step of (trajectory, pipeline, step, stream, seed, request)."""
        from ikdata.diffusion.views import calls_of

        return calls_of(self.root, uuids)

    @staticmethod
    def line(call: dict[str, Any]) -> str:
        """One call (from :meth:`calls`) in words, for ``ikdata lineage``."""
        return (f"pipeline call: {call['pipeline']} trajectory {call['trajectory'][:12]} ({call['where']}), "
                f"step {call['step']} {call['stream']} ({call['role']}), seed {call['seed']}")


def lineage(root: str | os.PathLike) -> TrajectoryLineage | None:
    """Lineage through the trajectories of the dataset at ``root``; None when it holds none."""
    if not _holds(root):
        return None
    from ikdata.diffusion.trajectories import files

    return TrajectoryLineage(Path(root)) if files(Path(root)) else None


def diff(left: Any, right: Any) -> Any:
    """What the trajectories and model records of datasets ``left`` and ``right`` differ in
    (:class:`ikdata.diffusion.trajectory_changes.TrajectoryDiff`).

    Raises:
        ProblemsFound: a trajectory line of either cannot be read.
    """
    from ikdata.diffusion.trajectory_changes import TrajectoryDiff, compare

    if not (_holds(left.root) or _holds(right.root)):
        return TrajectoryDiff()
    return compare(left, right)


# -- import -----------------------------------------------------------------------------------------------


def carried(src: Path, dst: Path, admitted: set[str], into: Any) -> None:
    """Add to ``into`` (an :class:`ikdata.importing.carried.Carried`) the trajectories of SRC whose workloads all
    get into DST (``admitted``), with the model records they name and every blob either references."""
    if not _holds(src):
        return
    from ikdata.diffusion.trajectory_carrying import carry

    carry(src, dst, admitted, into)


__all__ = ["Described", "TrajectoryLineage", "TrajectoryStats", "Validated", "carried", "describe", "diff",
           "lineage", "references", "stats", "validate"]
