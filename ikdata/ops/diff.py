"""Compare two datasets: workloads added, removed and changed per definition, definitions changed, and
the records that tie workloads together: diffusion trajectories (pipeline calls, with their seed, noise
and model) and model records.

Rows are compared by content, with each tensor named by its digest rather than its
path, so the same workload in the seed layout and in ikdata's compares equal. Trajectories are
named by their content id; one call in A and one in B of the same pipeline are paired, and what
differs between them (seed, noise digest, model, scheduler, steps, request) is listed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ikdata.core.dataset import Dataset
from ikdata.core.errors import ProblemsFound
from ikdata.core.records import TensorRef
from ikdata.core.store import digest_from_path


@dataclass(frozen=True)
class DefinitionChanges:
    """Workload uuids of one definition: in B only, in A only, in both with different content."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"added": list(self.added), "removed": list(self.removed), "changed": list(self.changed)}


@dataclass(frozen=True)
class TrajectoryChange:
    """One pipeline call's trajectory in A paired with one in B (None: only on one side), and what differs."""

    pipeline: str
    a: str | None
    b: str | None
    differs: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # field -> (A's value, B's value)

    def to_dict(self) -> dict:
        return {"pipeline": self.pipeline, "a": self.a, "b": self.b,
                "differs": {k: {"a": v[0], "b": v[1]} for k, v in sorted(self.differs.items())}}


@dataclass(frozen=True)
class DatasetDiff:
    """What turns dataset A into dataset B."""

    workloads: dict[str, DefinitionChanges] = field(default_factory=dict)
    definitions_added: tuple[str, ...] = ()
    definitions_removed: tuple[str, ...] = ()
    definitions_changed: tuple[str, ...] = ()
    trajectories: tuple[TrajectoryChange, ...] = ()
    models_added: tuple[str, ...] = ()
    models_removed: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.workloads or self.definitions_added or self.definitions_removed or self.definitions_changed
                    or self.trajectories or self.models_added or self.models_removed)

    def to_dict(self) -> dict:
        return {"workloads": {k: v.to_dict() for k, v in sorted(self.workloads.items())},
                "definitions": {"added": list(self.definitions_added), "removed": list(self.definitions_removed),
                                "changed": list(self.definitions_changed)},
                "trajectories": [t.to_dict() for t in self.trajectories],
                "models": {"added": list(self.models_added), "removed": list(self.models_removed)}}


def _descriptor(d: Any) -> Any:
    if isinstance(d, TensorRef):
        digest = digest_from_path(d.path)
        return {"digest": digest} if digest and d.tensor_key == "tensor" else {"path": d.path, "key": d.tensor_key}
    return d.to_dict()


def _contents(ds: Dataset) -> dict[str, tuple[str, Any]]:
    """uuid -> (definition, comparable content of the row and its receipt's expected outputs).

    Records are schema-checked first: a malformed one (a JSON array, a bare string, a row
    without a uuid) is a problem, never a ``KeyError``.

    Raises:
        ProblemsFound: some record cannot be read; the dataset cannot be compared as it is.
    """
    receipts = {r.uuid: {k: _descriptor(v) for k, v in r.expected_output.items()}
                for r in ds.receipts(validate=True)}
    contents = {row.uuid: (row.definition, (row.axes, {k: _descriptor(v) for k, v in row.inputs.items()},
                                            receipts.get(row.uuid)))
                for row in ds.workloads(validate=True)}
    if ds.problems:
        raise ProblemsFound(ds.problems, f"{ds.root}: cannot compare, {len(ds.problems)} record(s) cannot be "
                            f"read; run 'ikdata validate {ds.root}' and fix them (or 'ikdata repair')")
    return contents


def diff(a: str | os.PathLike, b: str | os.PathLike) -> DatasetDiff:
    """Compare dataset A with dataset B (any layouts).

    Example:
        >>> changes = diff("shared/gemm@monday", "shared/gemm")
        >>> changes.workloads["gemm_n4096_k4096"].added
    """
    left, right = Dataset.open(a), Dataset.open(b)
    rows_a, rows_b = _contents(left), _contents(right)
    by_definition: dict[str, dict[str, list[str]]] = {}

    def note(definition: str, kind: str, uuid: str) -> None:
        by_definition.setdefault(definition, {"added": [], "removed": [], "changed": []})[kind].append(uuid)

    for uuid, (definition, content) in rows_b.items():
        if uuid not in rows_a:
            note(definition, "added", uuid)
        elif rows_a[uuid] != (definition, content):
            note(definition, "changed", uuid)
    for uuid, (definition, _) in rows_a.items():
        if uuid not in rows_b:
            note(definition, "removed", uuid)
    trajectories, models_added, models_removed = _trajectory_changes(left, right)
    defs_a = {n: d.digest for n, d in left.definitions.items()}
    defs_b = {n: d.digest for n, d in right.definitions.items()}
    return DatasetDiff(
        {name: DefinitionChanges(*(tuple(sorted(v[k])) for k in ("added", "removed", "changed")))
         for name, v in by_definition.items()},
        tuple(sorted(set(defs_b) - set(defs_a))), tuple(sorted(set(defs_a) - set(defs_b))),
        tuple(sorted(n for n in set(defs_a) & set(defs_b) if defs_a[n] != defs_b[n])),
        trajectories, models_added, models_removed)


def _summary(record: dict) -> dict[str, Any]:
    """What a user asks first when two calls of one pipeline differ."""
    noise, model = record.get("noise") or {}, record.get("model") or {}
    request = {k: v for k, v in (record.get("request") or {}).items() if k not in ("seed", "generator")}
    return {"seed": noise.get("seed"), "noise": noise.get("digest"), "model": model.get("digest"),
            "scheduler": (record.get("scheduler") or {}).get("class"),
            "steps": (record.get("request") or {}).get("steps"), "request": request}


def _trajectory_changes(left: Dataset, right: Dataset) -> tuple[tuple[TrajectoryChange, ...], tuple[str, ...],
                                                                  tuple[str, ...]]:
    from ikdata.diffusion import trajectories as traj_mod

    found = {}
    for side, ds in (("a", left), ("b", right)):
        read = traj_mod.read_all(ds.root)
        if read.problems:
            raise ProblemsFound(read.problems, f"{ds.root}: cannot compare, {len(read.problems)} trajectory "
                                f"line(s) cannot be read; run 'ikdata validate {ds.root}'")
        found[side] = {t.id: t.record for t in read.trajectories}
    only_a = [found["a"][i] for i in sorted(set(found["a"]) - set(found["b"]))]
    only_b = [found["b"][i] for i in sorted(set(found["b"]) - set(found["a"]))]
    changes = []
    for pipeline in sorted({r["pipeline"]["class"] for r in only_a + only_b}):
        side_a = [r for r in only_a if r["pipeline"]["class"] == pipeline]
        side_b = [r for r in only_b if r["pipeline"]["class"] == pipeline]
        for i in range(max(len(side_a), len(side_b))):
            a = side_a[i] if i < len(side_a) else None
            b = side_b[i] if i < len(side_b) else None
            differs = {}
            if a is not None and b is not None:
                sa, sb = _summary(a), _summary(b)
                differs = {k: (sa[k], sb[k]) for k in sa if sa[k] != sb[k]}
            changes.append(TrajectoryChange(pipeline, a and a["trajectory"], b and b["trajectory"], differs))
    models = {side: {(r.get("model") or {}).get("digest") for r in found[side].values()} - {None}
              for side in found}
    return tuple(changes), tuple(sorted(models["b"] - models["a"])), tuple(sorted(models["a"] - models["b"]))


__all__ = ["DatasetDiff", "DefinitionChanges", "TrajectoryChange", "diff"]
