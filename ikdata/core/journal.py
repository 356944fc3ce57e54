"""The import journal: the commit point of an import, and its roll-forward after a kill.

A journal (``.ikdata-import/journal.json``) lists idempotent steps, each moving a staged
file into the dataset: ``blob`` (rename into the store), ``append`` (extend a JSONL file
whose first ``base_size`` bytes must still hash to ``base_digest``), ``create`` (a new
definition file). :func:`recover` rolls a committed journal forward or drops uncommitted
staging; import, gc and repair call it before they do anything else.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson

from ikdata.core import manifest
from ikdata.core.digest import bytes_digest
from ikdata.core.errors import StoreError
from ikdata.core.faults import checkpoint
from ikdata.core.locking import dataset_lock
from ikdata.core.store import write_atomic

STAGING = ".ikdata-import"
JOURNAL = "journal.json"
FORMAT = "ikdata-import-journal/1"


def write_journal(dst: Path, parent: dict, steps: list[dict]) -> None:
    """Write the journal atomically: from here on the import is committed and will be rolled forward."""
    write_atomic(dst / STAGING / JOURNAL, [orjson.dumps({"format": FORMAT, "parent": parent, "steps": steps})])


def recover(dst: str | os.PathLike, *, locked: bool = False) -> str | None:
    """Finish an import that was killed: roll a committed journal forward, drop uncommitted staging.

    Returns:
        "rolled-forward", "discarded", or None when there was nothing to recover.
    """
    dst = Path(dst)
    staging = dst / STAGING
    if not staging.exists():
        return None
    if not locked:
        with dataset_lock(dst, exclusive=True):
            return recover(dst, locked=True)
    if (staging / JOURNAL).is_file():
        roll_forward(dst)
        return "rolled-forward"
    shutil.rmtree(staging, ignore_errors=True)
    return "discarded"


def roll_forward(dst: Path) -> str:
    """Step 4-5: apply every journal step (each idempotent), write the manifest, remove staging."""
    staging = dst / STAGING
    journal = orjson.loads((staging / JOURNAL).read_bytes())
    for number, step in enumerate(journal["steps"]):
        staged, target = dst / step["staged"], dst / step["target"]
        if step["kind"] == "blob":
            if staged.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists():
                    staged.unlink()
                else:
                    os.replace(staged, target)
        elif step["kind"] == "append":
            _apply_append(dst, step)
        elif step["kind"] == "create" and staged.exists():
            data = staged.read_bytes()
            if target.exists() and target.read_bytes() != data:
                raise StoreError(f"{target}: cannot finish the interrupted import, the file changed meanwhile; "
                                 f"remove {staging} to abandon it", path=str(target))
            write_atomic(target, [data])
            staged.unlink()
        if number == 0:
            checkpoint("rolled-partly")
    parent = journal["parent"]
    held = manifest.read(dst) or {}
    recorded = any(p["id"] == parent["id"] and p["at"] == parent["at"] for p in held.get("parents", []))
    dataset_id = manifest.write(dst, parent=None if recorded else parent)
    checkpoint("manifest-written")
    shutil.rmtree(staging)
    return dataset_id


def _apply_append(dst: Path, step: dict) -> None:
    staged, target = dst / step["staged"], dst / step["target"]
    payload = staged.read_bytes()
    current = target.read_bytes() if target.is_file() else b""
    base = step["base_size"]
    if len(current) < base or bytes_digest(current[:base]) != step["base_digest"]:
        raise StoreError(f"{target}: cannot finish the interrupted import, the file was rewritten meanwhile; "
                         f"remove {dst / STAGING} to abandon the import, then run it again", path=str(target))
    if current[base:base + len(payload)] == payload:
        return  # already applied
    # Lines a capture appended after the kill stay; the import's lines go after them.
    tail = current[base:]
    if tail and not tail.endswith(b"\n"):
        tail += b"\n"
    write_atomic(target, [current[:base], tail, payload])


__all__ = ["FORMAT", "JOURNAL", "STAGING", "recover", "roll_forward", "write_journal"]
