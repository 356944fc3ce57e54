"""Compare two datasets: workloads added, removed and changed per definition, definitions changed, and
what every family's own records differ in (its declared ``diff`` hook: diffusion's trajectories and
model records).

Rows are compared by content, with each tensor named by its digest rather than its
path, so the same workload in the seed layout and in ikdata's compares equal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ikdata.core.dataset import Dataset
from ikdata.core.features import hooks as family_hooks
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
class DatasetDiff:
    """What turns dataset A into dataset B."""

    workloads: dict[str, DefinitionChanges] = field(default_factory=dict)
    definitions_added: tuple[str, ...] = ()
    definitions_removed: tuple[str, ...] = ()
    definitions_changed: tuple[str, ...] = ()
    families: tuple[Any, ...] = ()  # each family's own diff (its ``diff`` hook): to_dict(), is_empty, lines()

    @property
    def is_empty(self) -> bool:
        return not (self.workloads or self.definitions_added or self.definitions_removed or self.definitions_changed
                    or not all(f.is_empty for f in self.families))

    def to_dict(self) -> dict:
        return {"workloads": {k: v.to_dict() for k, v in sorted(self.workloads.items())},
                "definitions": {"added": list(self.definitions_added), "removed": list(self.definitions_removed),
                                "changed": list(self.definitions_changed)},
                **{k: v for f in self.families for k, v in f.to_dict().items()}}


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
    families = tuple(family_diff(left, right) for family_diff in family_hooks("diff"))
    defs_a = {n: d.digest for n, d in left.definitions.items()}
    defs_b = {n: d.digest for n, d in right.definitions.items()}
    return DatasetDiff(
        {name: DefinitionChanges(*(tuple(sorted(v[k])) for k in ("added", "removed", "changed")))
         for name, v in by_definition.items()},
        tuple(sorted(set(defs_b) - set(defs_a))), tuple(sorted(set(defs_a) - set(defs_b))),
        tuple(sorted(n for n in set(defs_a) & set(defs_b) if defs_a[n] != defs_b[n])),
        families)


__all__ = ["DatasetDiff", "DefinitionChanges", "diff"]
