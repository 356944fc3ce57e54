"""Import (merge) a validated dataset into another, all or nothing.

:func:`import_dataset` plans the import read-only (:mod:`ikdata.importing.plan`), then
applies it under DST's exclusive lock through a journal:

1. every blob DST lacks is hardlinked (same filesystem) or copied into the staging
   folder ``DST/.ikdata-import/`` (fsynced);
2. the bytes each changed file gains (new rows, new receipts, new definition files)
   are staged there too;
3. ``journal.json`` is written atomically: the commit point;
4. the journal is rolled forward: blobs are renamed into ``blob/sha256/``, the staged
   lines are appended to each JSONL file by an atomic rewrite, new definition files
   are renamed into place, the manifest is rewritten with SRC as a parent;
5. the staging folder is removed.

A kill before step 3 leaves DST's tracked files exactly as they were (the staging
folder is ignored and removed by the next import or gc). A kill after step 3 is
**rolled forward** by the next ``ikdata import`` or ``ikdata gc`` of DST
(:func:`ikdata.core.journal.recover`): each journal step is idempotent, and a JSONL file is only
extended, so lines a capture appended meanwhile are kept.

Crash tests stop it at named checkpoints (:mod:`ikdata.core.faults`): ``blobs-staged``,
``files-staged``, ``journal-written``, and in the roll-forward ``rolled-partly``,
``manifest-written``.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import orjson

from ikdata.core import manifest
from ikdata.core.dataset import Dataset, detect_layout, IKDATA
from ikdata.core.digest import bytes_digest, file_prefix_digest
from ikdata.core.errors import IkdataError, ProblemsFound, UsageError
from ikdata.importing.foreign import LeftOut
from ikdata.core.faults import checkpoint
from ikdata.core.journal import JOURNAL, STAGING, recover, roll_forward, write_journal
from ikdata.core.locking import LOCK_FILE, dataset_lock
from ikdata.importing.plan import ImportPlan, plan_import, raise_refusals
from ikdata.importing.rejudge import Rejudged, rejudge
from ikdata.core.safetensors_format import encode_header
from ikdata.core.progress import Progress, ProgressCallback
from ikdata.core.store import blob_path, write_atomic



@dataclass(frozen=True)
class ImportResult:
    """What an import did (or, with ``dry_run``, would do).

    Attributes:
        added: uuids of the workloads brought in.
        skipped: uuids DST already held with the same content.
        refused: workloads that stop the import (unvalidated), with reasons; non-empty
            only in a dry run, since a real import raises instead.
        left_out: workloads left out on purpose (``only_passed``, ``random`` inputs).
        conflicts: messages of conflicts (dry run only; a real import raises MergeConflict).
        definitions_added: DST paths of new definition files.
        blobs_linked, blobs_copied: blobs brought in by hardlink or by copy.
        blobs_present: blobs DST already held (neither copied nor rehashed).
        blobs_new: blobs brought in (or, in a dry run, that would be).
        bytes_in: bytes of tensor data brought in.
        dataset_id: DST's id afterwards (None in a dry run).
        parent_id: SRC's id, now a parent of DST.
        rejudged: what re-judging SRC's claimed verdicts found (:class:`~ikdata.importing.rejudge.Rejudged`).
    """

    src: str
    dst: str
    added: tuple[str, ...]
    skipped: tuple[str, ...]
    refused: tuple[LeftOut, ...]
    left_out: tuple[LeftOut, ...]
    conflicts: tuple[str, ...]
    definitions_added: tuple[str, ...]
    blobs_linked: int
    blobs_copied: int
    blobs_present: int
    bytes_in: int
    dataset_id: str | None
    parent_id: str
    dry_run: bool
    blobs_new: int = 0
    rejudged: Rejudged | None = None

    def to_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "dry_run": self.dry_run, "added": list(self.added),
                "skipped": list(self.skipped), "refused": [r.to_dict() for r in self.refused],
                "left_out": [r.to_dict() for r in self.left_out], "conflicts": list(self.conflicts),
                "definitions_added": list(self.definitions_added), "blobs_linked": self.blobs_linked,
                "blobs_copied": self.blobs_copied, "blobs_present": self.blobs_present, "blobs_new": self.blobs_new,
                "bytes_in": self.bytes_in, "dataset_id": self.dataset_id, "parent_id": self.parent_id,
                "rejudged": self.rejudged.to_dict() if self.rejudged is not None else None}


def import_dataset(src: str | os.PathLike, dst: str | os.PathLike, *, only_passed: bool = False,
                   dry_run: bool = False, how: str = "import", source: str | None = None,
                   definitions: Sequence[str | os.PathLike] = (), keep_random: bool = False,
                   progress: ProgressCallback | None = None, trust_reports: bool = False,
                   trust: Sequence[str] = (), rejudge_all: bool = False, device: str = "cpu") -> ImportResult:
    """Merge the validated workloads of SRC into DST, all or nothing.

    SRC's report is a claim: the trusted reference is run again on the workloads it admits (all, or a
    random sample sized for 99% confidence of catching 5% forged; :mod:`ikdata.importing.rejudge`),
    and one that does not pass refuses the whole import. A verdict whose reference may not run here
    (contract 6) or that a trajectory decided cannot be re-judged, so it is not admitted, unless
    ``trust_reports``.

    Args:
        src: the dataset to import (ikdata, seed or FlashInfer Trace layout); never written.
        dst: the ikdata dataset to merge into; created if it does not exist.
        only_passed: import the validated subset and list the rest in ``left_out``
            instead of refusing the whole import.
        dry_run: plan only; write nothing (not even DST's folder).
        how: how DST's manifest records SRC as a parent ("import", "pull").
        source: where SRC came from, for the parent record (default: SRC's path).
        definitions: extra definition folders (the seed layout needs them).
        keep_random: keep FlashInfer rows with ``random`` inputs, without expected output.
        progress: called with :class:`~ikdata.core.progress.Progress` as blobs are rehashed
            ("rehash") and staged ("stage"); the library never draws.
        trust_reports: take SRC's verdicts on their word (they are still rechecked against their
            tolerance, digests, reference and bytes), re-judging none.
        trust: definition digests whose references may run to re-judge (as ``replay --trust``).
        rejudge_all: re-judge every admitted workload, not a sample.
        device: where references run when re-judging.

    Returns:
        An :class:`ImportResult`.

    Raises:
        MergeConflict: a uuid or a definition name with different content in SRC and DST.
        ProblemsFound: SRC is not fully validated, inconsistent, has a corrupt blob, or a verdict
            it claims does not hold when re-judged.
        UsageError: SRC is DST, or DST is not an ikdata dataset.

    Example:
        >>> import tempfile, ikdata
        >>> from ikdata.core.layout import init_dataset
        >>> work = tempfile.mkdtemp()
        >>> _ = init_dataset(work + "/host-a")
        >>> result = ikdata.import_dataset(work + "/host-a", work + "/shared")  # paths or Datasets alike
        >>> len(result.added), ikdata.open(work + "/shared").layout
        (0, 'ikdata')
    """
    src, dst = (Path(p.root if isinstance(p, Dataset) else p) for p in (src, dst))  # a path or a Dataset alike
    if not src.is_dir():
        raise UsageError(f"{src}: no such dataset folder")
    if dst.exists() and src.resolve() == dst.resolve():
        raise UsageError(f"{src}: SRC and DST are the same folder")
    empty = not dst.exists() or all(p.name == LOCK_FILE for p in dst.iterdir())
    if not empty and detect_layout(dst) != IKDATA:
        raise UsageError(f"{dst}: DST is not an ikdata dataset; import into an ikdata dataset or a new folder")
    hop = {"how": how, "source": source or str(src), "at": time.time()}
    planned = dict(only_passed=only_passed, definitions=definitions, keep_random=keep_random, hop=hop,
                   progress=progress, trust_reports=trust_reports, trust=trust)
    judging = dict(definitions=definitions, trust=trust, everything=rejudge_all, device=device)
    if dry_run:
        plan = plan_import(src, dst, **planned)
        rejudged = rejudge(plan, **judging) if not plan.refused and not plan.conflicts else None
        if rejudged is not None and rejudged.disagreements:  # what would refuse it, per workload
            plan.refused += [LeftOut(uuid, plan.source.rows[uuid]["definition"], reason, code="rejudged")
                             for uuid, reason in zip(rejudged.disagreeing, rejudged.reasons)]
            plan.added = [uuid for uuid in plan.added if uuid not in set(rejudged.disagreeing)]
        return _result(plan, src, dst, dry_run=True, rejudged=rejudged)
    created = not dst.exists()
    if empty:
        from ikdata.core.layout import init_dataset

        init_dataset(dst)
    try:
        with dataset_lock(dst, exclusive=True):
            recover(dst, locked=True)
            plan = plan_import(src, dst, **planned)
            raise_refusals(plan)
            rejudged = rejudge(plan, **judging)
            raise_disagreements(plan, rejudged)
            if plan.is_noop:
                return _result(plan, src, dst, dataset_id=manifest.current_id(dst), rejudged=rejudged)
            parent = {"id": plan.source.dataset_id, **hop}
            try:
                linked, copied = _stage_and_commit(plan, dst, parent, progress)
            except BaseException:  # disk full, size limit...: before the commit point, leave nothing behind
                if not (dst / STAGING / JOURNAL).is_file():
                    shutil.rmtree(dst / STAGING, ignore_errors=True)
                raise
            dataset_id = roll_forward(dst)
    except IkdataError:
        if created and _untouched(dst):  # a refused import leaves no empty dataset behind
            shutil.rmtree(dst, ignore_errors=True)
        raise
    return _result(plan, src, dst, linked=linked, copied=copied, dataset_id=dataset_id, rejudged=rejudged)


def _untouched(dst: Path) -> bool:
    """Whether DST is still the empty dataset this import made: no rows, no blobs, nothing staged."""
    try:
        counts = orjson.loads((dst / manifest.MANIFEST).read_bytes()).get("counts", {})
    except (OSError, ValueError, AttributeError):
        return False
    return not (dst / STAGING).exists() and not any(counts.values())


def raise_disagreements(plan: ImportPlan, rejudged: Rejudged) -> None:
    """Refuse the whole import when a re-judged claim does not hold: SRC's report cannot be believed."""
    if rejudged.disagreements:
        raise ProblemsFound(list(rejudged.disagreements),
                            f"{plan.source.named}: {rejudged.statement()}; SRC's report claims verdicts that do not "
                            "hold here, so nothing was imported (not even with --only-passed). Replay SRC "
                            f"('ikdata replay {plan.source.named}') to see its real verdicts")


def _result(plan: ImportPlan, src: Path, dst: Path, *, dry_run: bool = False, linked: int = 0, copied: int = 0,
            dataset_id: str | None = None, rejudged: Rejudged | None = None) -> ImportResult:
    return ImportResult(str(src), str(dst), tuple(plan.added), tuple(plan.skipped), tuple(plan.refused),
                        tuple(plan.left_out), tuple(plan.conflicts), tuple(plan.definitions),
                        linked, copied, plan.blobs_present, plan.bytes_in, dataset_id,
                        plan.source.dataset_id, dry_run, len(plan.blobs), rejudged)


def _stage_and_commit(plan: ImportPlan, dst: Path, parent: dict,
                      progress: ProgressCallback | None = None) -> tuple[int, int]:
    """Steps 1-3: stage blobs and new bytes, then write the journal (the commit point)."""
    staging = dst / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "blob").mkdir(parents=True)
    steps: list[dict] = []
    linked = copied = 0
    for digest, tensor in plan.blobs.items():
        staged = staging / "blob" / f"{digest}.safetensors"
        if tensor.canonical and _try_link(tensor.path, staged):
            linked += 1
        elif tensor.canonical:
            write_atomic(staged, _chunks(tensor.path, 0, None))
            copied += 1
        else:  # a tensor inside another file: write it as a one-tensor canonical blob
            entry = tensor.entry
            write_atomic(staged, [encode_header(entry.dtype, entry.shape, entry.nbytes),
                                  *_chunks(tensor.path, entry.start, entry.end)])
            copied += 1
        steps.append({"kind": "blob", "staged": staged.relative_to(dst).as_posix(), "target": blob_path(digest)})
        if progress:
            progress(Progress("stage", len(steps), len(plan.blobs)))
    checkpoint("blobs-staged")
    appends = {**plan.rows, **plan.carried.appends}
    if plan.receipts:
        appends["receipts.jsonl"] = plan.receipts
    for number, (target, records) in enumerate(sorted(appends.items())):
        payload = b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in records)
        staged = staging / f"append-{number}.part"
        write_atomic(staged, [payload])
        base_size, base_digest = file_prefix_digest(dst / target) if (dst / target).is_file() \
            else (0, bytes_digest(b""))
        steps.append({"kind": "append", "staged": staged.relative_to(dst).as_posix(), "target": target,
                      "base_size": base_size, "base_digest": base_digest})
    for number, (target, data) in enumerate(sorted({**plan.definitions, **plan.carried.files}.items())):
        staged = staging / f"definition-{number}.part"
        write_atomic(staged, [data])
        steps.append({"kind": "create", "staged": staged.relative_to(dst).as_posix(), "target": target})
    for number, (target, data) in enumerate(sorted(plan.shared.items())):  # receipts' shared contexts
        staged = staging / f"shared-{number}.part"
        write_atomic(staged, [data])
        steps.append({"kind": "create", "staged": staged.relative_to(dst).as_posix(), "target": target})
    checkpoint("files-staged")
    write_journal(dst, parent, steps)
    checkpoint("journal-written")
    return linked, copied


def _try_link(path: Path, staged: Path) -> bool:
    try:
        os.link(path, staged)
        return True
    except OSError:  # another filesystem (EXDEV), or links not allowed: copy instead
        return False


def _chunks(path: Path, start: int, end: int | None, size: int = 1 << 22):
    with open(path, "rb") as stream:
        stream.seek(start)
        left = None if end is None else end - start
        while left is None or left > 0:
            chunk = stream.read(size if left is None else min(size, left))
            if not chunk:
                break
            if left is not None:
                left -= len(chunk)
            yield chunk


__all__ = ["ImportResult", "import_dataset"]
