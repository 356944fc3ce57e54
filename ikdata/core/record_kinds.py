"""Every kind of record file a dataset may hold, declared once.

A record kind names where its files live (a folder of ``.json``/``.jsonl`` files, or one file at the
top), the schema its records follow and whether a file holds one record or one per line. The
manifest, the remote manifest check of clone and pull, push, gc and validate read this list; a kind
added here is carried by every one of them. Blobs are not records: they live under ``blob/`` and are
named by their digest (:mod:`ikdata.core.store`), packs under ``packs/`` (:mod:`ikdata.core.packs`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordKind:
    """One kind of record file.

    Attributes:
        name: what a user calls it ("workload rows", "trajectories").
        top: the folder under the dataset root holding its files, or the one top-level file.
        suffix: ``.json`` (one record per file) or ``.jsonl`` (one per line).
        schema: the schema in ``schemas/`` a record follows, or None where the file's own reader checks it.
        folder: ``top`` is a folder (searched recursively) rather than one file.
        imported: how an import's journal may write it: ``"append"`` (lines added), ``"create"`` (a new
            file, never overwritten), or None (an import never writes it).
    """

    name: str
    top: str
    suffix: str
    schema: str | None
    folder: bool = True
    imported: str | None = None

    def owns(self, relative: str) -> bool:
        """Whether a dataset-relative path is a file of this kind (by its text alone)."""
        if not self.folder:
            return relative == self.top
        return relative.startswith(self.top + "/") and relative.endswith(self.suffix)


KINDS: tuple[RecordKind, ...] = (
    RecordKind("definitions", "definitions", ".json", "definition", imported="create"),
    RecordKind("workload rows", "workloads", ".jsonl", "workload", imported="append"),
    RecordKind("receipts", "receipts.jsonl", ".jsonl", "receipt", folder=False, imported="append"),
    RecordKind("receipts' shared validations", "reports/shared", ".json", "validation", imported="create"),
    RecordKind("replay reports", "reports", ".json", "report"),
    RecordKind("report journals", "reports", ".jsonl", None),
    RecordKind("diffusion trajectories", "trajectories", ".jsonl", "trajectory", imported="append"),
    RecordKind("model records", "models", ".json", "model", imported="create"),
    RecordKind("capture census", "census", ".jsonl", "census", imported="create"),
)

RECORD_TOPS: tuple[str, ...] = tuple(dict.fromkeys(k.top.split("/")[0] for k in KINDS if k.folder))
RECORD_FILES: tuple[str, ...] = tuple(k.top for k in KINDS if not k.folder)


def kind_of(relative: str) -> RecordKind | None:
    """The record kind a dataset-relative path belongs to, or None when it is no record file."""
    return next((kind for kind in KINDS if kind.owns(relative)), None)


def describe() -> str:
    """The record files, in words, for messages that refuse a path."""
    folders = ", ".join(f"{t}/" for t in RECORD_TOPS)
    return f"{' or '.join(RECORD_FILES)} or a .json/.jsonl file under {folders}"


__all__ = ["KINDS", "RECORD_FILES", "RECORD_TOPS", "RecordKind", "describe", "kind_of"]
