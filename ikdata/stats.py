"""Dataset statistics: definitions, workloads per definition, blobs, bytes and the dedup ratio."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from ikdata.dataset import Dataset


@dataclass
class Stats:
    """What a dataset holds.

    ``referenced_bytes`` counts a blob once per use (as a store without
    deduplication would hold it); ``dedup_ratio`` is referenced over stored.
    """

    layout: str
    definitions: int = 0
    workloads: int = 0
    receipts: int = 0
    workloads_per_definition: dict[str, int] = field(default_factory=dict)
    unique_blobs: int = 0
    stored_bytes: int = 0
    referenced_bytes: int = 0
    problems: int = 0

    @property
    def dedup_ratio(self) -> float:
        return self.referenced_bytes / self.stored_bytes if self.stored_bytes else 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "dedup_ratio": round(self.dedup_ratio, 4)}


def compute(ds: Dataset) -> Stats:
    """Stats from one pass over the rows and receipts and a directory scan of the blobs."""
    stats = Stats(ds.layout, definitions=len(ds.definitions))
    sizes: dict[str, int] = {}
    for rel, size in ds.store.iter_blobs():
        sizes[rel] = size
    stats.unique_blobs = len(sizes)
    stats.stored_bytes = sum(sizes.values())
    per = stats.workloads_per_definition
    referenced = 0
    for path in ds.workload_files():
        for _, record in ds.read_workload_file(path):
            stats.workloads += 1
            name = record.get("definition")
            per[name] = per.get(name, 0) + 1
            for descriptor in record["workload"]["inputs"].values():
                referenced += _size(ds, descriptor, sizes)
    for path in ds.receipt_files():
        from ikdata import jsonl

        content = jsonl.read(path, display=ds.rel(path))
        ds.problems += content.problems
        for _, record in content.records:
            stats.receipts += 1
            expected = record.get("expected_output") or {}
            for descriptor in ([expected] if "type" in expected else expected.values()):
                referenced += _size(ds, descriptor, sizes)
    if ds.layout == "flashinfer":  # blobs live beside workloads, not under blob/sha256
        stats.stored_bytes = sum(sizes.values())
        stats.unique_blobs = len(sizes)
    stats.referenced_bytes = referenced
    stats.problems = len(ds.problems)
    return stats


def _size(ds: Dataset, descriptor: dict, sizes: dict[str, int]) -> int:
    if descriptor.get("type") != "safetensors":
        return 0
    path = descriptor["path"]
    size = sizes.get(path)
    if size is None:
        try:
            size = os.stat(ds.root / path).st_size
        except OSError:
            size = 0
        sizes[path] = size
    return size
