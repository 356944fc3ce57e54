"""Creating dataset folders, and repairing what a killed writer left in one.

:func:`repair_dataset` finishes every writer, under the exclusive dataset lock, in this order:

1. an import: its committed journal is rolled forward, uncommitted staging dropped (:mod:`ikdata.core.journal`);
2. torn and malformed JSONL lines are set aside into ``FILE.rejected`` (:func:`ikdata.core.jsonl.repair`);
3. receipts whose workload row never landed (a writer killed between its two appends) are set
   aside into ``receipts.jsonl.rejected``: a receipt without its row is the incomplete part;
4. a gc killed mid-deletion (its marker ``.ikdata-gc.json``, written before the first unlink)
   is finished: the blobs it chose that nothing references now are deleted;
5. the manifest, the commit marker, is rolled forward when the files differ from it only as
   writers change them: lines appended to JSONL files (a capture whose commit never ran), new
   definition, workload and report files, reports rewritten (replay), blobs added or collected.
   A listed file rewritten or deleted otherwise, or a blob set that lost blobs (without gc's
   marker) or holds a rewritten or swapped blob, is nobody's unfinished work: repair leaves the
   manifest alone and says why, so ``validate`` keeps showing the change (``ikdata manifest DIR``
   accepts it when it was meant).

:func:`pending_repair` is the read-only half: what ``validate`` names when it says "run ikdata repair".
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from ikdata.core import features, jsonl, manifest
from ikdata.core.dataset import IKDATA, RECEIPTS, Dataset, detect_layout
from ikdata.core.digest import line_prefix_digests
from ikdata.core.errors import FileSystemError, ProblemsFound, RecordError, UsageError
from ikdata.core.locking import dataset_lock, refuse_remote
from ikdata.core.paths import TooLarge, read_capped
from ikdata.core.record_kinds import KINDS
from ikdata.core.store import write_atomic

GC_MARKER = ".ikdata-gc.json"
GC_FORMAT = "ikdata-gc/1"
_BLOB_PATH = re.compile(r"^blob/sha256/[0-9a-f]{2}/[0-9a-f]{64}\.safetensors$")
_REWRITTEN_BY_WRITERS = ("reports/",)  # replay rewrites its report atomically; nothing else rewrites a file


def init_dataset(path: str | os.PathLike, *, name: str | None = None, description: str | None = None) -> str:
    """Create the folders and the manifest of an empty dataset; return its id.

    Raises:
        UsageError: the folder exists and is not empty, or cannot be created.
    """
    root = Path(path)
    refuse_remote(root)  # before any folder is made in it
    if root.exists() and any(p.name != ".ikdata.lock" for p in root.iterdir()) and not (root / manifest.MANIFEST).exists():
        raise UsageError(f"{root}: folder exists and is not an ikdata dataset; choose an empty folder")
    try:
        for sub in ("definitions", "workloads", "blob/sha256"):
            (root / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):  # the path itself cannot be a folder
            raise UsageError(f"{root}: cannot create the dataset: {exc.strerror}") from exc
        # the OS said no (read-only, full, permission): a problem, exit 1, as every such refusal (docs/validate.md)
        raise FileSystemError(exc, operation="create the dataset") from exc
    with dataset_lock(root, exclusive=True):
        return manifest.write(root, name=name, description=description)


# -- gc's marker ------------------------------------------------------------------------------------


def mark_gc(root: Path, blobs: Iterable[str]) -> None:
    """Record the blobs a gc is about to delete, before the first unlink (gc holds the exclusive lock)."""
    write_atomic(root / GC_MARKER, [orjson.dumps({"format": GC_FORMAT, "blobs": sorted(blobs)})])


def clear_gc_mark(root: Path) -> None:
    """gc finished (its manifest is written): forget the marker."""
    (root / GC_MARKER).unlink(missing_ok=True)


_MAX_MARKER_BYTES = 1 << 30  # a gc marker lists the blobs it chose: ten million paths


def _finish_gc(root: Path) -> int | None:
    """Delete what a killed gc chose and nothing references now; None when no gc was interrupted."""
    marker = root / GC_MARKER
    if not marker.is_file():
        return None
    try:
        chosen = orjson.loads(read_capped(marker, _MAX_MARKER_BYTES, what="gc marker")).get("blobs", [])
    except (orjson.JSONDecodeError, AttributeError, TooLarge):
        chosen = []  # a marker gc never finished writing (it had deleted nothing yet), or none of gc's
    references = Dataset(root, IKDATA).blob_references()
    deleted = 0
    if not references.problems:  # unreadable lines might name a chosen blob: delete nothing then
        used = {os.path.normpath(p).replace(os.sep, "/") for p in references.paths}
        for rel in chosen:
            if isinstance(rel, str) and _BLOB_PATH.match(rel) and rel not in used:
                try:
                    (root / rel).unlink()
                    deleted += 1
                except FileNotFoundError:
                    pass
    marker.unlink()
    return deleted


# -- receipts without rows --------------------------------------------------------------------------


def _orphan_receipt_lines(root: Path) -> list[int]:
    """Lines of ``receipts.jsonl`` whose uuid no workload row holds."""
    path = root / RECEIPTS
    if not path.is_file():
        return []
    uuids = set()
    for rows in sorted((root / "workloads").rglob("*.jsonl")) if (root / "workloads").is_dir() else []:
        for _, record in jsonl.iter_records(rows, []):  # streamed: bad lines are repair's other work
            workload = record.get("workload") if isinstance(record, dict) else None
            if isinstance(workload, dict):
                uuids.add(workload.get("uuid"))
    return [line for line, record in jsonl.iter_records(path, [])
            if isinstance(record, dict) and record.get("uuid") not in uuids]


def _disagreeing_receipt_lines(root: Path) -> list[int]:
    """Lines of ``receipts.jsonl`` after the first receipt of a uuid whose outputs they contradict
    (:mod:`ikdata.core.repeats`): set aside, the first capture stays."""
    from ikdata.core.repeats import Repeats

    path = root / RECEIPTS
    if not path.is_file():
        return []
    seen, later = Repeats(), []
    for line, record in jsonl.iter_records(path, []):
        if isinstance(record, dict) and isinstance(record.get("uuid"), str) \
                and isinstance(record.get("expected_output"), dict):
            if not seen.see(record["uuid"], record["expected_output"], RECEIPTS, line):
                later.append((record["uuid"], line))
    return [line for uuid, line in later if uuid in seen.found]


def _set_aside_lines(path: Path, numbers: list[int]) -> jsonl.RepairResult:
    """Move the given lines, verbatim, to ``FILE.rejected`` and rewrite the file without them."""
    drop = set(numbers)
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        lines = os.pread(fd, os.fstat(fd).st_size, 0).split(b"\n")
        tail = lines.pop()  # b"" after a final newline (repair ran before: no torn tail is left)
        kept = [raw + b"\n" for n, raw in enumerate(lines, 1) if n not in drop]
        gone = [raw + b"\n" for n, raw in enumerate(lines, 1) if n in drop]
        sidecar = path.with_name(path.name + ".rejected")
        with open(sidecar, "ab") as stream:
            stream.write(b"".join(gone))
            stream.flush()
            os.fsync(stream.fileno())
        write_atomic(path, kept + ([tail] if tail else []))
    finally:
        os.close(fd)
    return jsonl.RepairResult(str(path), tuple(sorted(drop)), str(sidecar))


# -- the manifest -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestState:
    """How the manifest stands against the files.

    Attributes:
        stale: the manifest is missing (in an ikdata dataset with content) or disagrees with the files.
        refusals: why the difference is not a writer's unfinished work (then repair does not touch it).
    """

    stale: bool
    refusals: tuple[str, ...] = ()

    @property
    def can_roll_forward(self) -> bool:
        return self.stale and not self.refusals


def manifest_state(root: str | os.PathLike) -> ManifestState:
    """Compare the manifest with the files, and say whether bringing it up to date finishes a writer."""
    root = Path(root)
    try:
        old = manifest.read(root)
    except RecordError as exc:
        return ManifestState(True, (f"{manifest.MANIFEST} is unreadable ({exc}); rebuild it with "
                                    f"'ikdata manifest {root}'",))
    if old is None:
        has_content = bool(manifest.tracked_files(root)) or any(True for _ in Dataset(root, IKDATA).store.iter_blobs())
        return ManifestState(detect_layout(root) == IKDATA and has_content)
    try:
        actual = manifest.build(root)
    except ProblemsFound as exc:  # a link out of the dataset or a special file: never listed by repair
        return ManifestState(True, tuple(str(p) for p in exc.problems))
    if all(actual[k] == old.get(k) for k in ("files", "blobs", "counts")):
        return ManifestState(False)
    refusals = []
    for path, digest in sorted(old["files"].items()):
        if actual["files"].get(path) == digest or path.startswith(_REWRITTEN_BY_WRITERS):
            continue
        if path not in actual["files"]:
            refusals.append(f"{path} is listed in {manifest.MANIFEST} but gone")
        elif not (path.endswith(".jsonl") and _grew_from(root / path, digest)):
            refusals.append(f"{path} was changed, not only appended to, since the manifest was written")
    blobs = _blob_set_refusal(root, old["blobs"], actual["blobs"])
    if blobs:
        refusals.append(blobs)
    return ManifestState(True, tuple(refusals))


def _blob_set_refusal(root: Path, recorded: dict, actual: dict) -> str | None:
    """Why the blob set changed in a way no writer changes it, or None. Writers add blobs (capture,
    pull, import); gc deletes them with its marker in place; packing keeps the set as it is. A blob
    lost without that marker, or rewritten or swapped in place, is not a writer's unfinished work."""
    if recorded == actual or (root / GC_MARKER).is_file():
        return None
    count = actual["count"] - recorded.get("count", 0)
    size = actual["bytes"] - recorded.get("bytes", 0)
    if count > 0 and size > 0:
        return None
    if count < 0:
        what = f"{-count} blob(s) fewer than recorded, and no gc was interrupted: blobs were lost or deleted"
    elif count == 0 and size:
        what = f"as many blobs as recorded but {size:+d} bytes: a blob was rewritten"
    elif count == 0:
        what = "as many blobs and bytes as recorded but other names: blobs were swapped"
    else:
        what = f"{count} blob(s) more than recorded but {size:+d} bytes: a blob was rewritten"
    return (f"the blob set changed in a way no writer changes it ({what}); if that was meant, run "
            f"'ikdata manifest {root}'; if not, restore the blobs ('ikdata validate --deep {root}' names them)")


def _grew_from(path: Path, digest: str) -> bool:
    """True when the file is the version with this digest plus appended lines."""
    return any(found == digest for _, found in line_prefix_digests(path.read_bytes()))


# The record folders of JSON Lines files whose torn and malformed lines repair sets aside: every kind of one
# record per line kept in a folder (workload rows, capture census, a family's trajectories).
_LINE_FOLDERS = features.Live(lambda: tuple(dict.fromkeys(k.top for k in KINDS if k.folder and k.suffix == ".jsonl")))


# -- repair -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepairReport:
    """What ``repair`` did.

    Attributes:
        lines: torn, malformed and orphaned lines set aside, per file.
        import_recovery: "rolled-forward", "discarded", or None.
        receipts_set_aside: receipts whose row never landed, moved to ``receipts.jsonl.rejected``.
        gc_deleted: blobs deleted to finish a killed gc (None: no gc was interrupted).
        manifest: "rolled-forward" (brought up to date), "written" (a dataset that had none), or None.
        refusals: why the manifest was left as it is although it disagrees with the files.
        definitions_reordered: definition files rewritten in ``run``'s order (same digest;
            :func:`ikdata.core.definitions.reorder_definitions`).
    """

    lines: tuple[jsonl.RepairResult, ...]
    import_recovery: str | None  # "rolled-forward", "discarded", or None
    receipts_set_aside: int = 0
    gc_deleted: int | None = None
    manifest: str | None = None
    refusals: tuple[str, ...] = ()
    definitions_reordered: tuple[str, ...] = ()
    pack_indexes: tuple[str, ...] = ()  # pack indexes rebuilt from their packs (ikdata.core.packs)
    disagreeing_set_aside: int = 0  # later receipts contradicting a uuid's first (ikdata.core.repeats)
    temps_removed: tuple[str, ...] = ()  # killed writers' temp files (ikdata.core.paths.sweep_temps)
    unknown: tuple[str, ...] = ()  # files no record kind describes: left alone, for the user to move out

    @property
    def changed(self) -> bool:
        return bool(self.lines or self.import_recovery or self.gc_deleted is not None or self.manifest
                    or self.definitions_reordered or self.pack_indexes or self.temps_removed)

    @property
    def ok(self) -> bool:
        """Everything found was finished (nothing refused, no file left that ikdata cannot vouch for)."""
        return not self.refusals and not self.unknown

    def notes(self) -> list[str]:
        """One line per thing done or refused beyond imports and torn lines (those have their own)."""
        notes = []
        if self.receipts_set_aside:
            notes.append(f"set aside {self.receipts_set_aside} receipt(s) whose workload row was never written "
                         f"(into {RECEIPTS}.rejected)")
        if self.disagreeing_set_aside:
            notes.append(f"set aside {self.disagreeing_set_aside} receipt(s) whose expected outputs contradict an "
                         f"earlier receipt of the same workload (into {RECEIPTS}.rejected; the first capture stays)")
        if self.gc_deleted is not None:
            notes.append(f"finished a gc that was killed mid-deletion ({self.gc_deleted} more blob(s) deleted)")
        if self.manifest == "rolled-forward":
            notes.append(f"brought {manifest.MANIFEST} up to date with what writers added since it was written "
                         "(a capture, replay or gc that did not commit)")
        elif self.manifest == "written":
            notes.append(f"wrote the missing {manifest.MANIFEST}")
        notes += [f"left {manifest.MANIFEST} as it is: {reason}" for reason in self.refusals]
        notes += [f"rebuilt {rel} from its pack" for rel in self.pack_indexes]
        if self.temps_removed:
            notes.append(f"removed {len(self.temps_removed)} temporary file(s) of killed writers "
                         f"({', '.join(self.temps_removed[:5])}{', ...' if len(self.temps_removed) > 5 else ''})")
        notes += [f"{rel}: no record kind describes it and no writer of ikdata makes it; repair leaves it alone: "
                  "move it out of the dataset (or delete it), then run 'ikdata validate'" for rel in self.unknown]
        return notes

    def to_dict(self) -> dict:
        return {"changed": self.changed, "ok": self.ok, "import_recovery": self.import_recovery,
                "lines": [{"path": r.path, "removed_lines": list(r.removed_lines), "set_aside": r.set_aside}
                          for r in self.lines],
                "receipts_set_aside": self.receipts_set_aside,
                "disagreeing_set_aside": self.disagreeing_set_aside, "gc_deleted": self.gc_deleted,
                "manifest": self.manifest, "refusals": list(self.refusals), "notes": self.notes(),
                "definitions_reordered": list(self.definitions_reordered), "pack_indexes": list(self.pack_indexes),
                "temps_removed": list(self.temps_removed), "unknown": list(self.unknown)}


def repair_dataset(path: str | os.PathLike) -> RepairReport:
    """Finish every killed writer (import, capture, replay, gc) and set aside what cannot be finished.

    Returns:
        What was done, and why the manifest was left alone where it was (``refusals``).

    Raises:
        UsageError: no such folder.

    Example:
        >>> report = repair_dataset("runs/gemm")
        >>> report.notes()
    """
    from ikdata.core.definitions import reorder_definitions
    from ikdata.core.journal import recover
    from ikdata.core.paths import sweep_temps
    from ikdata.core.record_checks import unknown_files

    root = Path(path)
    if not root.is_dir():
        raise UsageError(f"{root}: no such dataset folder")
    with dataset_lock(root, exclusive=True):
        recovery = recover(root, locked=True)
        from ikdata.core.pack_writer import repair_packs

        pack_indexes = repair_packs(root)  # derived data: rebuilt first, so the blob set is judged through good indexes
        state = manifest_state(root)  # judged on the files as the writers left them, before any other repair
        temps = sweep_temps(root, recursive=True)  # killed writers' temp files, by the one rule (core.paths)
        files = [f for top in _LINE_FOLDERS for f in (sorted((root / top).rglob("*.jsonl"))
                                                       if (root / top).is_dir() else [])]
        files += [root / f for f in (RECEIPTS, "results/captures.jsonl", "captures.jsonl") if (root / f).is_file()]
        results = [r for r in (jsonl.repair(f) for f in files) if r.removed_lines]
        orphans = _orphan_receipt_lines(root) if detect_layout(root) == IKDATA else []
        disagreeing = _disagreeing_receipt_lines(root) if detect_layout(root) == IKDATA else []
        if orphans or disagreeing:
            results.append(_set_aside_lines(root / RECEIPTS, sorted(set(orphans) | set(disagreeing))))
        gc_deleted = _finish_gc(root)
        reordered = reorder_definitions(root) if detect_layout(root) == IKDATA else ()
        has_manifest = (root / manifest.MANIFEST).exists()
        written = None
        if state.can_roll_forward or (has_manifest and not state.refusals
                                      and (results or gc_deleted is not None or reordered or pack_indexes)):
            manifest.write(root)
            written = "rolled-forward" if has_manifest else "written"
        unknown = tuple(p.path for p in unknown_files(root)) if detect_layout(root) == IKDATA else ()
    return RepairReport(tuple(results), recovery, len(orphans), gc_deleted, written, state.refusals,
                        tuple(reordered), pack_indexes, len(disagreeing), tuple(t.replace(os.sep, "/") for t in temps),
                        unknown)


def pending_repair(root: str | os.PathLike, *, manifest_stale: bool | None = None) -> list[str]:
    """What a killed writer left that :func:`repair_dataset` would finish, in words (read-only, no lock).

    ``manifest_stale=False`` (the caller has just found the manifest in agreement with the files)
    skips comparing them again.
    """
    from ikdata.core.journal import JOURNAL, STAGING

    root = Path(root)
    found = []
    if (root / STAGING / JOURNAL).is_file():  # staging without a journal changes nothing: not reported
        found.append("an import was killed after its commit point")
    if (root / GC_MARKER).is_file():
        found.append("a gc was killed mid-deletion")
    state = manifest_state(root) if manifest_stale is not False else ManifestState(False)
    if state.can_roll_forward:
        found.append(f"{manifest.MANIFEST} does not yet list what a capture, replay, gc or a DatasetWriter "
                     "(before its commit()) wrote after it"
                     if (root / manifest.MANIFEST).exists() else
                     f"the dataset has no {manifest.MANIFEST} (a DatasetWriter writes it on commit())")
    return found


def repair_hint(root: str | os.PathLike, *, manifest_stale: bool | None = None) -> str | None:
    """The sentence ``validate`` adds when :func:`pending_repair` finds something, naming the real folder."""
    import shlex

    found = pending_repair(root, manifest_stale=manifest_stale)
    if not found:
        return None
    return f"{'; '.join(found)}: run 'ikdata repair {shlex.quote(str(root))}' to finish it"


__all__ = ["GC_MARKER", "ManifestState", "RepairReport", "clear_gc_mark", "init_dataset", "manifest_state",
           "mark_gc", "pending_repair", "repair_dataset", "repair_hint"]
