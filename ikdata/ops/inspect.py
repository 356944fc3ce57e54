"""Describing one workload: its row, receipts and blob headers, and the census of the run that made it, for
``ikdata show``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ikdata.core.dataset import Dataset
from ikdata.core.errors import ProblemsFound, StoreError, UsageError
from ikdata.core.index import lookup
from ikdata.core.records import TensorRef
from ikdata.core.store import read_entries


def describe_workload(ds: Dataset, uuid: str) -> dict[str, Any]:
    """Row, source, inputs (with dtype and shape from blob headers) and receipts of one workload.

    Raises:
        UsageError: no workload, or more than one, matches the uuid prefix.
        ProblemsFound: none matches among the files read, and some files were refused.
    """
    indexed = lookup(ds, uuid)  # the index: a few B-tree lookups, whatever the number of rows
    matches = indexed[0] if indexed is not None else [r for r in ds.workloads() if r.uuid.startswith(uuid)]
    if not matches:
        if ds.problems:  # the workload may be in a file that was refused (a link out of the dataset)
            raise ProblemsFound(ds.problems, f"{ds.root}: no workload with uuid {uuid!r} in the files that "
                                "could be read")
        raise UsageError(f"{ds.root}: no workload with uuid {uuid!r}; list them with 'ikdata ls {ds.root}' "
                         f"(the ids of a family's own records, such as trajectories: 'ikdata stats {ds.root}')")
    if len({r.uuid for r in matches}) > 1:
        raise UsageError(f"{uuid!r} matches {len(matches)} workloads; give more of the uuid")
    row = matches[0]
    inputs = {}
    for name, descriptor in row.inputs.items():
        entry: dict[str, Any] = {"descriptor": descriptor.to_dict()}
        if isinstance(descriptor, TensorRef):
            try:
                path = ds.resolve(descriptor.path)
                packed = None if path.is_file() else ds.store.packed_ref(descriptor)  # in a pack (core.packs)
                found = [packed] if packed else [e for e in read_entries(path) if e.key == descriptor.tensor_key]
                if found:
                    entry.update(dtype=found[0].dtype, shape=list(found[0].shape))
            except (StoreError, OSError) as exc:
                entry["error"] = str(exc)
            except Exception as exc:  # an unsafe path: reported, not followed
                entry["error"] = str(exc)
        inputs[name] = entry
    receipts = [r.to_dict() for r in (indexed[1] if indexed is not None else ds.receipts()) if r.uuid == row.uuid]
    return {"source": f"{row.source}:{row.line}", "row": row.to_dict(), "inputs": inputs, "receipts": receipts}


@dataclass(frozen=True)
class ShownCensus:
    """The census ``show`` prints beside a workload: that of the capture runs its receipts name, nothing else.

    Attributes:
        runs: the capture runs it covers (named by the workload's receipts, ``capture_run``, with records kept).
        summary: those runs' records merged (:class:`ikdata.capture.census.Summary`).
        matched: always True: a census is shown only for the run that made the workload (kept for the JSON).
    """

    runs: tuple[str, ...]
    summary: Any
    matched: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"runs": list(self.runs), "matched": self.matched, **self.summary.to_json()}

    def lines(self) -> list[str]:
        """The census in words, headed by the runs it covers."""
        head = f"census of the run that captured it ({', '.join(self.runs)}):"
        return [head, *(f"  {line}" for line in self.summary.lines())]


def census_beside(root: str | os.PathLike, document: dict[str, Any]) -> ShownCensus | None:
    """The capture census to show beside one workload (``document``: :func:`describe_workload`): the records of
    the capture runs its receipts name (``capture_run``), each read from that run's own file
    (``census/<run>.jsonl``) and only the records of that run in it, streamed. None when no receipt names a run
    or the dataset keeps none of its records (unreadable lines are left to validate).

    A process id and a host never choose a census: both repeat across machines and runs, and a census carried in
    from another dataset may name them, so it could speak for this dataset's workloads. A dataset without census
    records loads nothing of capture."""
    from ikdata.core.record_kinds import KINDS, RUN_FIELD

    place = next((kind.top for kind in KINDS if kind.schema == "census"), None)
    if place is None or not os.path.isdir(os.path.join(root, place)):
        return None
    runs = {r.get(RUN_FIELD) for r in document.get("receipts") or () if isinstance(r.get(RUN_FIELD), str)}
    if not runs:
        return None
    from ikdata.capture import census

    summary, kept = census.of_runs(root, runs)
    return ShownCensus(kept, summary) if kept else None
