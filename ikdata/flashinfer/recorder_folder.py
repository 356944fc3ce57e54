"""Whether a folder is what FlashInfer's flight recorder wrote: the source's ``recognises`` hook.

A command given such a folder as a dataset says to import it first instead of "not a dataset". Pure
``pathlib``: it runs on every folder that is not a dataset, before anything else loads.
"""

from __future__ import annotations

from pathlib import Path

WHAT = "FlashInfer's flight-recorder output"


def recognises(root: Path) -> str | None:
    """:data:`WHAT` when ``root`` holds call folders with ``metadata.jsonl`` (at its top or under ``dumps/``),
    or a recorder session file, else None."""
    if (root / "session.jsonl").is_file() or (root / "metadata.jsonl").is_file():
        return WHAT
    for folder in (root, root / "dumps"):
        try:
            if any((p / "metadata.jsonl").is_file() for p in folder.iterdir() if p.is_dir()):
                return WHAT
        except OSError:
            continue
    return None
