"""The manifest ``ikdata.json``: the dataset's commit marker and identity.

It lists the digest of every definition, workload, receipt and report file and
the digest of the blob set; its own canonical digest is the dataset id, and
``parents`` names the ids merged into it. Written last, atomically.

Only regular files inside the dataset are described (DESIGN.md contract 3, by
:mod:`ikdata.core.paths`): a record file or a blob that is a link leaving the dataset, or a
FIFO, a device or a socket, is a located problem and the manifest is not written, so push
(which publishes what the manifest lists) never sends a byte from outside the dataset.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import time
from pathlib import Path
from typing import Any

import orjson

from ikdata.core import schema
from ikdata.core.digest import canonical_json, record_digest
from ikdata.core.errors import ProblemsFound, RecordError
from ikdata.core.paths import PathResolver, TooLarge, open_regular, read_capped, special_kind
from ikdata.core.problems import Problem
from ikdata.core.record_kinds import RECORD_FILES, RECORD_TOPS, kind_of
from ikdata.core.store import BLOB_DIR, BlobStore, write_atomic

FORMAT = "ikdata/1"
MANIFEST = "ikdata.json"
TRACKED_TOP = RECORD_TOPS  # every record kind (ikdata.core.record_kinds), and nothing else
TRACKED_FILES = RECORD_FILES
# The most bytes a manifest may hold, checked before it is read: a manifest lists one digest per record file
# (about 100 bytes each), so 64 MiB is half a million record files; one padded past it is refused unread.
MAX_BYTES = 64 << 20


def tracked_files(root: Path) -> list[str]:
    """Every file the manifest lists, as sorted dataset-relative paths (refused ones left out: see
    :func:`scan_files`)."""
    return scan_files(root)[0]


def scan_files(root: Path) -> tuple[list[str], list[Problem]]:
    """The record files the manifest may list (sorted), and a problem for each one it may not: a
    link that leaves the dataset, a FIFO, a device or a socket, or a record folder linked outside.
    Links that stay inside the dataset are followed, as every reader follows them."""
    root = Path(root)
    paths = PathResolver(root)
    found: list[str] = []
    problems: list[Problem] = []

    def take(path: Path, *, plain: bool) -> None:
        refusal = None if plain else paths.record_file_refusal(path)
        if refusal is None:
            found.append(path.relative_to(root).as_posix())
        else:
            problems.append(refusal.problem())

    for name in TRACKED_FILES:
        path = root / name
        if path.is_symlink() or path.exists():
            take(path, plain=False)
    for top in TRACKED_TOP:
        folder = root / top
        if not (folder.is_symlink() or folder.is_dir()):
            continue
        refusal = paths.record_file_refusal(folder, folder=True)
        if refusal is not None:
            problems.append(refusal.problem())
            continue
        stack = [folder]
        while stack:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    path = Path(entry.path)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(path)
                    elif entry.name.startswith(".tmp-") or kind_of(path.relative_to(root).as_posix()) is None:
                        continue
                    elif entry.is_symlink() and os.path.isdir(path):  # a linked folder: not descended
                        refusal = paths.record_file_refusal(path, folder=True)
                        if refusal is not None:
                            problems.append(refusal.problem())
                    else:  # a regular file needs no check; a link or a special file does
                        take(path, plain=entry.is_file(follow_symlinks=False))
    return sorted(found), problems


def _file_digest(path: Path) -> str:
    with open(open_regular(path), "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def _count_lines(path: Path) -> int:
    with open(open_regular(path), "rb") as stream:
        return sum(1 for line in stream if line.strip())  # line by line: memory stays flat at 10M rows


def blob_set(root: Path, problems: list[Problem] | None = None) -> dict[str, Any]:
    """Count, bytes and digest (sha256 over sorted blob paths, one per line) of the stored blobs.

    ``problems``: where a FIFO, device or socket under ``blob/``, a blob linked outside the dataset,
    or a ``blob/`` folder that is such a link, is said; none of them is counted as a blob.
    """
    root = Path(root)
    special: list[str] = []
    links: list[str] = []
    blobs = sorted(BlobStore(root).iter_blobs(special=special, links=links))
    if problems is not None:
        paths = PathResolver(root)
        problems += [Problem(rel, f"{rel!r} is {_kind(root / rel)}, not a blob; remove it, or put the real blob "
                             "there", code="unsafe-path") for rel in special]
        refused = {rel: found for rel in [BLOB_DIR, *links] if (found := paths.refusal(rel)) is not None}
        problems += [found.problem() for found in refused.values()]
        blobs = [] if BLOB_DIR in refused else [(rel, size) for rel, size in blobs if rel not in refused]
    digest = hashlib.sha256("".join(p + "\n" for p, _ in blobs).encode()).hexdigest()
    return {"count": len(blobs), "bytes": sum(size for _, size in blobs), "digest": digest}


def _kind(path: Path) -> str:
    try:
        return special_kind(os.lstat(path).st_mode) or "not a regular file"
    except OSError:
        return "a special file"


def build(root: str | os.PathLike, *, name: str | None = None, description: str | None = None,
          parents: list[dict] | None = None, problems: list[Problem] | None = None) -> dict[str, Any]:
    """The manifest that describes the files as they are now (parents carried from the old one).

    Args:
        problems: where files it may not describe are said (a link out of the dataset, a special
            file); they are left out. Without it, such a file is an error.

    Raises:
        ProblemsFound: (without ``problems``) a record file or blob is a link that leaves the dataset,
            or a FIFO, a device or a socket; every one is named, and nothing is described.
    """
    root = Path(root)
    old = read(root) or {}
    files, refused = scan_files(root)
    blobs = blob_set(root, refused)
    if problems is not None:
        problems += refused
    elif refused:
        raise ProblemsFound(refused, f"{root}: {len(refused)} file(s) are not regular files inside the dataset, so "
                            "the manifest cannot describe them (and push would publish what lies elsewhere); "
                            "remove them or put the real files there, then run the command again")
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "name": name or old.get("name") or root.resolve().name,
        "counts": {
            "definitions": sum(1 for f in files if f.startswith("definitions/")),
            "workloads": sum(_count_lines(root / f) for f in files if f.startswith("workloads/")),
            "receipts": sum(_count_lines(root / f) for f in files if f == "receipts.jsonl"),
            "blobs": blobs["count"],
        },
        "files": {f: _file_digest(root / f) for f in files},
        "blobs": blobs,
        "parents": list(old.get("parents", [])) + list(parents or []),
    }
    if description or old.get("description"):
        manifest["description"] = description or old["description"]
    return manifest


def dataset_id(manifest: dict[str, Any]) -> str:
    """The dataset id: sha256 of the manifest's canonical JSON."""
    return record_digest(manifest)


def read(root: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest as written, or None if the dataset has none.

    Raises:
        RecordError: the manifest is not valid JSON or breaks its schema.
    """
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = orjson.loads(read_capped(path, MAX_BYTES, what="manifest", display=MANIFEST))
    except TooLarge as exc:
        raise RecordError(f"{exc.size:,} bytes, more than the {MAX_BYTES:,} a manifest may hold; refused unread "
                          f"(rebuild it with 'ikdata manifest {shlex.quote(str(root))}')", path=MANIFEST) from exc
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON: {exc}", path=MANIFEST) from exc
    problems = schema.check("manifest", manifest, path=MANIFEST)
    if problems:
        raise RecordError("; ".join(f"{p.pointer} {p.message}" for p in problems), path=MANIFEST)
    return manifest


def read_parent(source: object) -> dict[str, Any] | None:
    """The manifest of a local folder a parent record names (``parents[].source``), or None when there is no
    readable one there: not a folder, no manifest, larger than :data:`MAX_BYTES` (refused before a byte is read),
    not JSON or off its schema. A parent's folder is only a hint (lineage follows it when it still holds the id),
    so what cannot be read there makes the parent a leaf, never an error of the dataset that names it."""
    if not isinstance(source, str) or not source or "\0" in source:
        return None
    try:
        if not Path(source).is_dir():
            return None
        return read(source)
    except (RecordError, OSError, ValueError):
        return None


def write(root: str | os.PathLike, *, name: str | None = None, description: str | None = None,
          parent: dict[str, Any] | None = None) -> str:
    """Rebuild the manifest from the files and write it atomically; return the new dataset id.

    The caller holds the dataset lock when others may write.
    """
    root = Path(root)
    parents = None
    if parent is not None:
        parents = [dict(parent, at=parent.get("at", time.time()))]
    manifest = build(root, name=name, description=description, parents=parents)
    write_atomic(root / MANIFEST, [canonical_json(manifest) + b"\n"])
    return dataset_id(manifest)


def record_file(root: str | os.PathLike, relative: str) -> str | None:
    """List one tracked file that a writer just finished (a replay's report) in the manifest, with
    its digest, changing nothing else: any other disagreement stays for ``validate`` to report.

    Returns the new dataset id, or None when the dataset has no manifest or the file is not one
    the manifest tracks.
    """
    from ikdata.core.locking import dataset_lock

    root = Path(root)
    path = root / relative
    tracked = relative in TRACKED_FILES or (relative.split("/", 1)[0] in TRACKED_TOP and "/" in relative
                                            and path.suffix in (".json", ".jsonl") and not path.name.startswith(".tmp-"))
    if not tracked or not path.is_file() or PathResolver(root).record_file_refusal(path) is not None:
        return None  # a link out of the dataset is never listed: validate names it
    with dataset_lock(root, exclusive=True):
        manifest = read(root)
        if manifest is None:
            return None
        files = dict(manifest["files"], **{relative: _file_digest(path)})
        manifest["files"] = dict(sorted(files.items()))
        write_atomic(root / MANIFEST, [canonical_json(manifest) + b"\n"])
    return dataset_id(manifest)


def current_id(root: str | os.PathLike) -> str | None:
    manifest = read(root)
    return dataset_id(manifest) if manifest else None


def check_manifest(ds: Any) -> list[Problem]:
    """Every way the manifest disagrees with the files it describes."""
    try:
        manifest = read(ds.root)
    except RecordError as exc:
        return [Problem(MANIFEST, str(exc).split(": ", 1)[-1], code="manifest")]
    if manifest is None:
        return []
    problems: list[Problem] = []
    actual = build(ds.root, problems=problems)  # files it may not describe: said first, then left out
    rebuild = f"run 'ikdata manifest {shlex.quote(str(ds.root))}'"
    listed, present = manifest["files"], actual["files"]
    refused = {p.path for p in problems}
    for path in sorted(set(listed) | set(present)):
        if path not in present and path in refused:
            continue  # said above: a link out of the dataset or a special file
        if path not in present:
            problems.append(Problem(MANIFEST, f"lists {path}, which does not exist", pointer=f"/files/{path}",
                                    code="manifest"))
        elif path not in listed:
            problems.append(Problem(MANIFEST, f"does not list {path}; call commit() on the DatasetWriter that "
                                    f"added it, or {rebuild} after changing files by hand",
                                    pointer="/files", code="manifest"))
        elif listed[path] != present[path]:
            problems.append(Problem(MANIFEST, f"digest of {path} is {present[path]}, manifest says {listed[path]}",
                                    pointer=f"/files/{path}", code="manifest"))
    if manifest["blobs"] != actual["blobs"]:
        problems.append(Problem(MANIFEST, _blob_set_change(manifest["blobs"], actual["blobs"], rebuild),
                                pointer="/blobs", code="manifest"))
    if manifest["counts"] != actual["counts"]:
        problems.append(Problem(MANIFEST, f"counts are {actual['counts']}, manifest says {manifest['counts']}",
                                pointer="/counts", code="manifest"))
    return problems


def _blob_set_change(recorded: dict[str, Any], actual: dict[str, Any], rebuild: str) -> str:
    """What is stale about the blob set, in words: how many blobs and bytes came or went."""
    count = actual["count"] - recorded.get("count", 0)
    size = actual["bytes"] - recorded.get("bytes", 0)
    if count:
        change = f"{abs(count)} blob(s) {'more' if count > 0 else 'fewer'} than recorded ({size:+d} bytes)"
    elif size:
        change = f"as many blobs as recorded, but {size:+d} bytes: some blob was rewritten"
    else:
        change = "as many blobs and bytes as recorded, but other blob names: some blobs were swapped"
    return (f"blob set is {actual['count']} blobs, {actual['bytes']} bytes; manifest says {recorded.get('count')} "
            f"blobs, {recorded.get('bytes')} bytes: {change}. If blobs were added or removed on purpose, "
            f"{rebuild}; if they were lost, restore them (see 'ikdata validate --deep')")
