"""Every kind of record file a dataset may hold, declared once.

A record kind names where its files live (a folder of ``.json``/``.jsonl`` files, or one file at the
top), the schema its records follow and whether a file holds one record or one per line. The
manifest, the remote manifest check of clone and pull, push, gc and validate read this list; a kind
added here is carried by every one of them. Blobs are not records: they live under ``blob/`` and are
named by their digest (:mod:`ikdata.core.store`), packs under ``packs/`` (:mod:`ikdata.core.packs`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ikdata.core import features
from ikdata.core.features import RecordKind


# A capture run's name, as its census file names it (census/<run>.jsonl) and its receipts do (capture_run):
# letters, digits, '.', '_' and '-', never a folder, a control character or an escape.
RUN_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
RUN_FIELD = "capture_run"  # the receipt field naming the capture run that made its workload

_CORE: tuple[RecordKind, ...] = (
    RecordKind("definitions", "definitions", ".json", "definition", imported="create"),
    RecordKind("workload rows", "workloads", ".jsonl", "workload", imported="append"),
    RecordKind("receipts", "receipts.jsonl", ".jsonl", "receipt", folder=False, imported="append"),
    RecordKind("receipts' shared validations", "reports/shared", ".json", "validation", imported="create",
               pattern=r"reports/shared/[0-9a-f]{64}\.json"),
    RecordKind("replay reports", "reports", ".json", "report", imported=None),
    RecordKind("capture census", "census", ".jsonl", "census", imported="create",
               pattern=rf"census/{RUN_NAME}\.jsonl"),
)


# Core's own kinds, then every kind a feature declares (diffusion's trajectories and model records), read live.
KINDS: Sequence[RecordKind] = features.Live(lambda: _CORE + features.kinds())

# Files ikdata's own writers leave beside record files that are no records themselves: lines a repair set aside
# (``FILE.rejected``), a running replay's journal of cases (``reports/<report>.json.journal``, read back by
# :mod:`ikdata.replay.report`). Temporary files follow one rule of their own (:mod:`ikdata.core.temp`).
BESIDE_RECORDS: tuple[str, ...] = (r".+\.rejected", r"reports/[^/]+\.json\.journal")

RECORD_TOPS: Sequence[str] = features.Live(lambda: tuple(dict.fromkeys(k.top.split("/")[0] for k in KINDS if k.folder)))
RECORD_FILES: Sequence[str] = features.Live(lambda: tuple(k.top for k in KINDS if not k.folder))


def kind_of(relative: str) -> RecordKind | None:
    """The record kind a dataset-relative path belongs to, or None when it is no record file."""
    return next((kind for kind in KINDS if kind.owns(relative)), None)


def describe() -> str:
    """The record files, in words, for messages that refuse a path."""
    folders = ", ".join(f"{t}/" for t in RECORD_TOPS)
    return f"{' or '.join(RECORD_FILES)} or a .json/.jsonl file under {folders}"


__all__ = ["BESIDE_RECORDS", "KINDS", "RECORD_FILES", "RECORD_TOPS", "RUN_FIELD", "RUN_NAME", "RecordKind", "describe", "kind_of"]
