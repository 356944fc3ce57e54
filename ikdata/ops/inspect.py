"""Describing one workload: its row, receipts and blob headers, for ``ikdata show``."""

from __future__ import annotations

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
        raise UsageError(f"{ds.root}: no workload with uuid {uuid!r}; list them with 'ikdata ls {ds.root}'")
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
