"""The import journal: the commit point of an import, and its roll-forward after a kill.

A journal (``.ikdata-import/journal.json``) lists idempotent steps, each moving a staged
file into the dataset: ``blob`` (rename into the store), ``append`` (extend a JSONL file
whose first ``base_size`` bytes must still hash to ``base_digest``), ``create`` (a new
definition file). :func:`recover` rolls a committed journal forward or drops uncommitted
staging; import, gc and repair call it before they do anything else.

Whatever wrote the journal, every step is checked before the first one is applied
(:func:`check_steps`): a staged file lies under ``.ikdata-import/``, a ``blob`` target is a
content-addressed blob path, an ``append`` target a row or receipts file, a ``create``
target a definition file, and no path leaves the dataset (:mod:`ikdata.core.paths`). A
journal that breaks this is refused whole, with a message, and nothing is applied.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
from pathlib import Path

import orjson

from ikdata.core import manifest
from ikdata.core.digest import bytes_digest, file_prefix_digest
from ikdata.core.errors import RecordError, StoreError
from ikdata.core.faults import checkpoint
from ikdata.core.locking import dataset_lock
from ikdata.core.record_kinds import KINDS, kind_of
from ikdata.core.paths import PathResolver, record_path_refusal, text_refusal
from ikdata.core.store import blob_path, digest_from_path, write_atomic

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


def check_steps(dst: Path, journal: object) -> list[dict]:
    """The journal's steps, each confined to the dataset by the path rule.

    Raises:
        RecordError: naming the step (``/steps/N/...``) that is malformed or reaches outside
            the dataset, its state or its record files; nothing has been applied.
    """
    where = f"{STAGING}/{JOURNAL}"
    if not isinstance(journal, dict) or not isinstance(journal.get("steps"), list) \
            or not isinstance(journal.get("parent"), dict) or not isinstance(journal["parent"].get("id"), str):
        raise RecordError(f"not an ikdata import journal (expected {FORMAT} with 'parent' and 'steps'); it was not "
                          f"applied. Remove {dst / STAGING} to abandon it", path=where)
    paths = PathResolver(dst)
    steps = journal["steps"]
    for number, step in enumerate(steps):
        reason = _step_refusal(paths, step)
        if reason:
            raise RecordError(f"{reason}; the journal was not written by ikdata's import, so none of it was "
                              f"applied. Remove {dst / STAGING} after reading it", path=where,
                              pointer=f"/steps/{number}")
    return steps


def _step_refusal(paths: PathResolver, step: object) -> str | None:
    if not isinstance(step, dict) or step.get("kind") not in ("blob", "append", "create") \
            or not isinstance(step.get("staged"), str) or not isinstance(step.get("target"), str):
        return "a step must be an object with kind blob, append or create, and 'staged' and 'target' paths"
    kind, staged, target = step["kind"], step["staged"], step["target"]
    found = text_refusal(staged)
    if found is None and not staged.startswith(STAGING + "/"):
        return f"staged file {staged!r} is not under {STAGING}/"
    found = found or paths.refusal(staged) or text_refusal(target)
    if found is not None:
        return found.reason
    if kind == "blob":
        digest = digest_from_path(target)
        if digest is None or target != blob_path(digest):
            return f"blob target {target!r} is not a content-addressed blob path"
    else:
        found = record_path_refusal(target)
        if found is not None:
            return found.reason
        record_kind = kind_of(target)
        if record_kind is None or record_kind.imported != kind:
            allowed = ", ".join(k.name for k in KINDS if k.imported == kind)
            return f"{kind} target {target!r} is not a file an import may {kind} ({allowed})"
        if record_kind.pattern is not None and not re.fullmatch(record_kind.pattern, target):
            return (f"{kind} target {target!r} is not a file of {record_kind.name} "
                    f"({record_kind.top}/<digest>{record_kind.suffix})")
        if kind == "append" and not (isinstance(step.get("base_size"), int) and step["base_size"] >= 0
                                     and isinstance(step.get("base_digest"), str)):
            return "an append step needs an integer 'base_size' and a 'base_digest'"
    found = paths.refusal(target)
    return found.reason if found is not None else None


def roll_forward(dst: Path) -> str:
    """Step 4-5: check every step (:func:`check_steps`), apply each (idempotent), write the manifest,
    remove staging."""
    staging = dst / STAGING
    try:
        journal = orjson.loads((staging / JOURNAL).read_bytes())
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON ({exc}); it was not applied. Remove {staging} to abandon the import",
                          path=f"{STAGING}/{JOURNAL}") from exc
    for number, step in enumerate(check_steps(dst, journal)):
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
    payload = staged.read_bytes()  # the import's own lines; the target (a whole dataset's) is streamed
    size = target.stat().st_size if target.is_file() else 0
    base = step["base_size"]
    if size < base or (file_prefix_digest(target, base) if size else (0, bytes_digest(b""))) != (
            base, step["base_digest"]):  # the file's first base_size bytes must be what the import saw
        raise StoreError(f"{target}: cannot finish the interrupted import, the file was rewritten meanwhile; "
                         f"remove {dst / STAGING} to abandon the import, then run it again", path=str(target))
    if size >= base + len(payload) and _read_at(target, base, len(payload)) == payload:
        return  # already applied
    # Lines a capture appended after the kill stay; the import's lines go after them.
    newline = [b"\n"] if size > base and _read_at(target, size - 1, 1) != b"\n" else []
    write_atomic(target, itertools.chain(_blocks(target, size), newline, [payload]))


def _read_at(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as stream:
        stream.seek(offset)
        return stream.read(length)


def _blocks(path: Path, size: int, block: int = 1 << 20):
    """The first ``size`` bytes of ``path``, a block at a time (nothing when ``size`` is 0)."""
    if not size:
        return
    with open(path, "rb") as stream:
        while size > 0:
            chunk = stream.read(min(block, size))
            if not chunk:
                return
            size -= len(chunk)
            yield chunk


__all__ = ["FORMAT", "JOURNAL", "STAGING", "check_steps", "recover", "roll_forward", "write_journal"]
