"""Dataset statistics: definitions, workloads per definition, blobs, bytes and the dedup ratio.

Answered from the SQLite index (:mod:`ikdata.core.index`) when the dataset has one: it is
refreshed first (appended lines are indexed, rewritten files indexed again), and a file it does not
hold wholly and cleanly (a torn or unreadable line) sends stats back to reading every row, which is
also what a dataset without an index gets. Both give the same figures.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field

from ikdata.core.dataset import Dataset, blob_paths
from ikdata.core.features import hooks as family_hooks
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
    families: tuple = ()  # each family's figures (its ``stats`` hook): ``counted`` (JSON) and ``lines()``

    @property
    def dedup_ratio(self) -> float:
        return self.referenced_bytes / self.stored_bytes if self.stored_bytes else 1.0

    def lines(self) -> list[str]:
        """The families' figures in words (one line for diffusion's trajectories), for a person."""
        return [line for family in self.families for line in family.lines()]

    def to_dict(self) -> dict:
        figures = {k: v for k, v in asdict(self).items() if k != "families"}
        counted = {k: v for family in self.families for k, v in family.counted.items()}
        return {**figures, **counted, "dedup_ratio": round(self.dedup_ratio, 4)}


def compute(ds: Dataset, *, use_index: bool = True) -> Stats:
    """Stats from the index where it can answer (:func:`_from_index`), else from one pass over the
    rows and receipts and a directory scan of the blobs.

    The scan runs on a second thread: it mostly waits on ``stat`` while the rows parse.
    """
    if use_index:
        found = _from_index(ds)
        if found is not None:
            return found
    stats = Stats(ds.layout, definitions=len(ds.definitions))
    uses: Counter = Counter()  # blob path -> uses: one entry per blob, not per use (flat at 10M rows)
    from concurrent.futures import ThreadPoolExecutor  # here: it imports logging (~8 ms of start-up)

    with ThreadPoolExecutor(max_workers=1) as pool:
        scan = pool.submit(lambda: dict(ds.store.iter_blobs()))
        _count_records(ds, stats, uses)
        uses.update(_family_references(ds))  # every family's own records (trajectories, model weights)
        stats.families = _family_stats(ds)
        sizes: dict[str, int] = scan.result()
    stats.unique_blobs = len(sizes)
    stats.stored_bytes = sum(sizes.values())
    referenced = 0
    for where, count in uses.items():
        referenced += count * _size(ds, {"type": "safetensors", "path": where}, sizes)
    stats.referenced_bytes = referenced
    stats.problems = len(ds.problems)
    return stats


def _from_index(ds: Dataset) -> Stats | None:
    """Stats from the dataset's index, refreshed first; None when there is no index yet (stats does
    not build one: ``ikdata index``, ``show`` and ``lineage`` do), it cannot be used, or a record file
    holds something only a read reports (the caller then reads every row)."""
    import sqlite3

    from ikdata.core.errors import ProblemsFound
    from ikdata.core.index import INDEX_FILE, open_index, record_files

    if type(ds) is not Dataset or ds.layout != "ikdata" or not os.path.lexists(ds.root / INDEX_FILE):
        return None
    workload_files = [ds.rel(p) for p in ds.workload_files()]
    receipt_files = [ds.rel(p) for p in ds.receipt_files()]
    try:
        index, _ = open_index(ds.root, files=record_files(ds))
    except (ProblemsFound, OSError, sqlite3.Error):
        return None  # a refused, unwritable or broken index: the read says nothing about it either
    try:
        with index:
            unique, stored = index.blob_totals(ds.store)  # first: the uses are summed against these sizes
            totals = index.record_totals(workload_files, receipt_files)
            if totals is None:
                return None
            extra: Counter = Counter(_family_references(ds))
            sizes: dict[str, int] = {}
            for where, _n in totals.unsized + list(extra.items()):
                if where not in sizes:
                    size = index.blob_size(where)
                    if size is not None:
                        sizes[where] = size
    except sqlite3.Error:
        return None
    referenced = totals.referenced_bytes
    for where, count in totals.unsized + list(extra.items()):
        referenced += count * _size(ds, {"type": "safetensors", "path": where}, sizes)
    return Stats(ds.layout, definitions=len(ds.definitions), workloads=totals.workloads, receipts=totals.receipts,
                 workloads_per_definition=dict(totals.per_definition), unique_blobs=unique, stored_bytes=stored,
                 referenced_bytes=referenced, problems=len(ds.problems), families=_family_stats(ds))


def _family_references(ds: Dataset) -> list[str]:
    """The blob paths every family's own records name, once per use (unreadable lines are left to validate)."""
    return [p for references in family_hooks("references", ds.root)
            for p in references(ds.root)[0] if isinstance(p, str)]


def _family_stats(ds: Dataset) -> tuple:
    """Every family's figures (each hook says zero for a dataset without its records)."""
    return tuple(stats(ds.root) for stats in family_hooks("stats"))


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
