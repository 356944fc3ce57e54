"""Dataset statistics: definitions, workloads per definition, blobs, bytes and the dedup ratio."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field

from ikdata.core.dataset import Dataset, blob_paths
from ikdata.core.errors import IkdataError


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
    trajectories: dict = field(default_factory=dict)  # diffusion trajectories: counts (ops.trajectories.count)

    @property
    def dedup_ratio(self) -> float:
        return self.referenced_bytes / self.stored_bytes if self.stored_bytes else 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "dedup_ratio": round(self.dedup_ratio, 4)}


def compute(ds: Dataset) -> Stats:
    """Stats from one pass over the rows and receipts and a directory scan of the blobs.

    The scan runs on a second thread: it mostly waits on ``stat`` while the rows parse.
    """
    stats = Stats(ds.layout, definitions=len(ds.definitions))
    uses: Counter = Counter()  # blob path -> uses: one entry per blob, not per use (flat at 10M rows)
    from concurrent.futures import ThreadPoolExecutor  # here: it imports logging (~8 ms of start-up)

    with ThreadPoolExecutor(max_workers=1) as pool:
        scan = pool.submit(lambda: dict(ds.store.iter_blobs()))
        _count_records(ds, stats, uses)
        from ikdata.diffusion.trajectories import referenced_paths
        from ikdata.diffusion.views import count as count_trajectories

        uses.update(p for p in referenced_paths(ds.root)[0] if isinstance(p, str))  # trajectories, model weights
        stats.trajectories = count_trajectories(ds).to_dict()
        sizes: dict[str, int] = scan.result()
    stats.unique_blobs = len(sizes)
    stats.stored_bytes = sum(sizes.values())
    referenced = 0
    for where, count in uses.items():
        referenced += count * _size(ds, {"type": "safetensors", "path": where}, sizes)
    stats.referenced_bytes = referenced
    stats.problems = len(ds.problems)
    return stats


def _count_records(ds: Dataset, stats: Stats, uses: Counter) -> None:
    """Count rows per definition and receipts; count the uses of every blob path
    (:func:`ikdata.core.dataset.blob_paths`, the one rule of which descriptors are blobs)."""
    from ikdata.core import jsonl

    names: Counter = Counter()
    add_paths = uses.update
    for path in ds.workload_files():
        for _, record in jsonl.iter_records(path, ds.problems, display=ds.rel(path), dataset=ds.root):
            try:
                record["workload"]["inputs"].values()
                name = record["definition"]
            except (KeyError, TypeError, AttributeError):
                continue  # not a row: validate reports it
            try:
                names[name] += 1
            except TypeError:  # an unhashable definition: validate reports it
                names[repr(name)] += 1
            add_paths(blob_paths(record))
    stats.workloads = sum(names.values())
    for name, count in names.items():
        key = name if isinstance(name, str) else repr(name)
        stats.workloads_per_definition[key] = stats.workloads_per_definition.get(key, 0) + count
    for path in ds.receipt_files():
        for _, record in jsonl.iter_records(path, ds.problems, display=ds.rel(path), dataset=ds.root):
            stats.receipts += 1
            add_paths(blob_paths(record))


def _size(ds: Dataset, descriptor: dict, sizes: dict[str, int]) -> int:
    if descriptor.get("type") != "safetensors":
        return 0
    path = descriptor["path"]
    if not isinstance(path, str):
        return 0
    size = sizes.get(path)
    if size is None:
        try:
            size = os.stat(ds.resolve(path)).st_size
        except (OSError, IkdataError):
            size = 0  # missing or unsafe: validate reports it
        sizes[path] = size
    return size
