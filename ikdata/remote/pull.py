"""Pull and clone: fetch what the local dataset lacks, verify every byte, then let it in.

A remote is untrusted input. Its manifest may list only record files
(:func:`ikdata.core.paths.record_path_refusal`: definitions, rows, receipts, reports;
never ikdata's own state such as an import journal), and a remote snapshot is
assembled in a staging folder beside the target (``.ikdata-pull-<name>-<id>``):
every small file is checked against the sha256 the manifest gives it, every blob is
downloaded to a temp file, rehashed and renamed only if its tensor digest matches its
name; a blob an interrupted run left in the staging folder is rehashed again. A clone then renames the staging
folder into place; a pull into a dataset with data merges it with
:func:`ikdata.importing.apply.import_dataset` (validated, deduped, conflicts refused). The
staging folder survives an interruption, so a rerun fetches only what is left.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ikdata.core import manifest as manifest_mod
from ikdata.core.dataset import IKDATA, Dataset
from ikdata.core.digest import file_prefix_digest
from ikdata.core.errors import RemoteError, UsageError
from ikdata.core.manifest import dataset_id
from ikdata.remote.backend import BLOB_PREFIX, Backend, file_object
from ikdata.remote.local_dataset import open_source
from ikdata.remote.backend import parse_remote_manifest
from ikdata.core.packs import PACK_DIR, cached_packs
from ikdata.remote.packs import IndexCache, Landed, fetch_members, find_remote_packs
from ikdata.remote.transfer import DEFAULT_JOBS, Progress, ProgressCallback, run_parallel
from ikdata.remote.url import RemoteOptions
from ikdata.core.store import BLOB_DIR, blob_path, digest_from_path, link_or_copy, make_temp, rehash_file, rehash_files

_SHOWN = 10


@dataclass(frozen=True)
class PullResult:
    """What a pull or clone did.

    Attributes:
        how: "clone", "pull" (merged into existing data) or "up-to-date".
        dataset_id: the local dataset's id afterwards.
        remote_id: the id of the remote dataset that was fetched.
        blobs_fetched / bytes_fetched: what was downloaded (and verified).
        blobs_present: blobs the local side already had.
        files_fetched: definition/row/receipt/report files downloaded.
        added: workloads a merge brought in (pull into existing data).
        rejudged: how a merge took the remote's verdicts (re-judged here, or trusted), in a line.
        cache_ignored: per-user cache entries of remote pack indexes that were damaged or not this
            remote's ("path: why"); ignored (the index was read from the remote).
    """

    url: str
    how: str
    dataset_id: str
    remote_id: str
    blobs_fetched: int = 0
    bytes_fetched: int = 0
    blobs_present: int = 0
    files_fetched: int = 0
    added: int = 0
    rejudged: str | None = None
    cache_ignored: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        found = {"url": self.url, "how": self.how, "dataset_id": self.dataset_id, "remote_id": self.remote_id,
                 "blobs_fetched": self.blobs_fetched, "bytes_fetched": self.bytes_fetched,
                 "blobs_present": self.blobs_present, "files_fetched": self.files_fetched, "added": self.added}
        if self.rejudged is not None:
            found["rejudged"] = self.rejudged
        if self.cache_ignored:
            found["cache_ignored"] = list(self.cache_ignored)
        return found


@dataclass(frozen=True)
class Snapshot:
    """A verified copy of a remote dataset in a folder."""

    root: Path
    manifest: dict[str, Any]
    manifest_data: bytes
    remote_id: str
    files_fetched: int
    blobs_fetched: int
    bytes_fetched: int
    blobs_present: int
    cache_ignored: tuple[str, ...] = ()


def read_remote(backend: Backend) -> tuple[dict[str, Any], bytes, str]:
    """The remote manifest, its bytes and its id.

    Raises:
        RemoteError: no dataset there, or a damaged manifest.
    """
    state = backend.read_manifest()
    if state.data is None:
        raise backend.fail(f"no ikdata dataset here (no {manifest_mod.MANIFEST}); publish one with "
                           f"'ikdata push DIR {backend.url}'")
    manifest = parse_remote_manifest(backend, state.data)
    return manifest, state.data, dataset_id(manifest)


def fetch_files(backend: Backend, manifest: dict[str, Any], target: Path, *, jobs: int = DEFAULT_JOBS,
                listed: dict[str, int] | None = None) -> int:
    """Download every file the manifest lists into ``target``, each checked against its sha256.

    ``listed``: the remote's listing when the caller has it (else ``files/`` is listed).

    Raises:
        RemoteError: a file is missing on the remote, or its bytes do not match the manifest.
    """
    todo = []
    for path, digest in sorted(manifest["files"].items()):  # paths checked by parse_remote_manifest
        dest = target / path
        if dest.is_file() and file_prefix_digest(dest)[1] == digest:
            continue
        todo.append((path, digest))
    if listed is None:
        listed = backend.list_objects("files/") if todo else {}
    missing = [path for path, digest in todo if file_object(digest) not in listed]
    if missing:
        raise backend.fail(f"{len(missing)} file(s) the manifest lists are missing on the remote: "
                           f"{_names(missing)}; the remote is damaged, push it again from a complete copy")

    def one(item: tuple[str, str]) -> str | None:
        path, digest = item
        data = backend.read(file_object(digest))
        if hashlib.sha256(data).hexdigest() != digest:
            return path
        from ikdata.core.store import write_atomic

        write_atomic(target / path, [data])
        return None

    bad = [p for p in run_parallel("download", todo, one, size_of=lambda _: 0, jobs=jobs) if p]
    if bad:
        raise backend.fail(f"{len(bad)} file(s) do not match the sha256 the manifest gives them: {_names(bad)}; "
                           "nothing of them was kept")
    return len(todo)


def referenced_blobs(root: Path) -> set[str]:
    """Every blob path the rows and receipts of a fetched snapshot name (:meth:`Dataset.blob_references`)."""
    return Dataset(root, IKDATA).blob_references().paths


def is_blob_path(rel: str) -> bool:
    """Whether ``rel`` is exactly the content-addressed path of the digest its name carries."""
    digest = digest_from_path(rel)
    return digest is not None and rel == blob_path(digest)


def fetch_blobs(backend: Backend, wanted: set[str], target: Path, *, have: Path | None = None,
                jobs: int = DEFAULT_JOBS, progress: ProgressCallback | None = None,
                listed: dict[str, int] | None = None, cache: IndexCache | None = None) -> tuple[int, int, int]:
    """Bring every wanted blob into ``target``, verified; return (fetched, bytes, present).

    Blobs already in ``target`` (from an interrupted run) or in ``have`` (linked) are not downloaded.
    Blobs in remote packs come from them (:mod:`ikdata.remote.packs`: the whole pack when most of it is
    wanted, else byte ranges) and stay packed in ``target``; the others come as loose objects.

    Raises:
        RemoteError: blobs missing on the remote, or whose bytes do not match their digest;
            nothing of those is kept, every verified one is.
    """
    unsafe = sorted(p for p in wanted if not is_blob_path(p))
    if unsafe:
        raise backend.fail(f"rows name blob paths that are not content-addressed blobs: {_names(unsafe)}")
    present, todo, staged = 0, [], []
    staged_packs = cached_packs(target) if (target / PACK_DIR).is_dir() else None
    for rel in sorted(wanted):
        if staged_packs is not None and not os.path.lexists(target / rel) \
                and _packed_here(target, staged_packs.find(digest_from_path(rel))):
            present += 1  # landed packed by an interrupted run, its slice verified again
        elif os.path.lexists(target / rel):
            staged.append(rel)  # left by an interrupted run: rehashed below like any landing blob
        elif have is not None and (have / rel).is_file():
            link_or_copy(have / rel, target / rel)  # the local dataset's own blob
            present += 1
        elif have is not None and _copy_packed(have, rel, target):  # in one of the local dataset's packs
            present += 1
        else:
            todo.append(rel)
    for rel, check in zip(staged, rehash_files([target / rel for rel in staged])):
        if not os.path.islink(target / rel) and not check.error and list(check.digests) == [digest_from_path(rel)]:
            present += 1
        else:
            os.unlink(target / rel)
            todo.append(rel)
    if not todo:
        return 0, 0, present
    if listed is None:
        listed = backend.list_objects(BLOB_PREFIX)
    remote = find_remote_packs(backend, listed, local_root=have, cache=cache, jobs=jobs)
    by_pack: dict[str, list[str]] = {}
    for rel in todo:
        pack = remote.members.get(digest_from_path(rel))
        if pack is not None:
            by_pack.setdefault(pack.digest, []).append(rel)
    from_packs = {rel for rels in by_pack.values() for rel in rels}
    missing = [rel for rel in todo if rel not in listed and rel not in from_packs]
    todo = [rel for rel in todo if rel in listed and rel not in from_packs]
    landed = Landed()
    total = len(from_packs) + len(todo)
    total_bytes = sum(m.loose_size for p in by_pack for m in remote.packs[p].members
                      if blob_path(m.digest) in from_packs) + sum(listed[r] for r in todo)
    done = done_bytes = 0
    if progress is not None and by_pack:
        progress(Progress("download", 0, total, 0, total_bytes))
    for digest, rels in sorted(by_pack.items()):  # each pack's members in one request or a few ranges
        got = fetch_members(backend, remote.packs[digest], [digest_from_path(r) for r in rels], target, jobs=jobs)
        landed.merge(got)
        done += len(rels)
        done_bytes += sum(size for d, size in got.landed.items() if blob_path(d) in from_packs)
        if progress is not None:
            progress(Progress("download", done, total, done_bytes, total_bytes))

    def one(rel: str) -> str | None:
        return _fetch_verified(backend, rel, target / rel)

    def shifted(p: Progress) -> None:
        assert progress is not None
        progress(Progress(p.phase, done + p.objects_done, total, done_bytes + p.bytes_done, total_bytes))

    failures = run_parallel("download", todo, one, size_of=lambda r: listed[r], jobs=jobs,
                            progress=shifted if progress is not None and (todo or not by_pack) else None)
    corrupted = [(rel, why) for rel, why in zip(todo, failures) if why] + sorted(landed.refused.items())
    messages = []
    if missing:
        damaged = "".join(f"; {rel} {why}" for rel, why in sorted(remote.damaged.items()))
        messages.append(f"{len(missing)} blob(s) are missing on the remote: {_names(missing)}"
                        + (f" (damaged remote packs, not used{damaged})" if damaged else ""))
        if remote.ignored:
            messages.append("cache entries ignored: " + "; ".join(f"{path} ({why})" for path, why
                                                                  in sorted(remote.ignored.items())))
    if corrupted:
        messages.append(f"{len(corrupted)} blob(s) do not match their digest and were refused (nothing of them "
                        f"was kept): {_names([f'{rel} ({why})' for rel, why in corrupted])}")
    if messages:
        raise backend.fail("; ".join(messages) + f". Check the remote with 'ikdata validate {backend.url}'")
    fetched = len(todo) + len(from_packs)
    return fetched, sum(listed[r] for r in todo) + landed.nbytes, present


def _packed_here(root: Path, blob: Any) -> bool:
    """Whether a packed copy in ``root`` (a staging folder) verifies."""
    if blob is None:
        return False
    from ikdata.core.errors import StoreError
    from ikdata.core.packs import read_packed

    try:
        read_packed(root, blob)
    except StoreError:
        return False
    return True


def _copy_packed(have: Path, rel: str, target: Path) -> bool:
    """Write the loose blob ``rel`` into ``target`` from a pack of the local dataset ``have``
    (:mod:`ikdata.core.packs`), verified as it is read; False when it is not packed there or fails."""
    from ikdata.core.errors import StoreError
    from ikdata.core.packs import read_packed
    from ikdata.core.store import BlobStore, write_atomic

    blob = BlobStore(have).packed(digest_from_path(rel))
    if blob is None:
        return False
    try:
        data = read_packed(have, blob)
    except StoreError:
        return False  # fetched from the remote instead
    write_atomic(target / rel, blob.loose_bytes(data))
    return True


def _fetch_verified(backend: Backend, rel: str, dest: Path) -> str | None:
    """Download to a temp file beside ``dest``, rehash, rename; the reason it was refused, or None."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp(dest.parent)  # the umask's mode, not mkstemp's 0600
    os.close(fd)
    try:
        backend.fetch(rel, Path(tmp))
        check = rehash_file(tmp)
        expected = digest_from_path(rel)
        if check.error:
            return check.error
        if list(check.digests) != [expected]:
            return f"its tensor digest is {check.digests[0] if check.digests else 'absent'}"
        with open(tmp, "rb+") as stream:
            os.fsync(stream.fileno())
        os.replace(tmp, dest)
        tmp = ""
        return None
    finally:
        if tmp:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def fetch_snapshot(backend: Backend, target: Path, *, have: Path | None = None, jobs: int = DEFAULT_JOBS,
                   progress: ProgressCallback | None = None,
                   remote: tuple[dict[str, Any], bytes, str] | None = None) -> Snapshot:
    """Assemble a verified copy of the remote dataset in ``target`` (which may hold an earlier partial copy).

    ``remote``: the manifest as :func:`read_remote` gave it, when the caller has just read it.
    """
    manifest, data, remote_id = remote or read_remote(backend)
    target.mkdir(parents=True, exist_ok=True)
    listed = backend.list_objects("")  # one listing of the whole remote: small files, blobs, packs
    files = fetch_files(backend, manifest, target, jobs=jobs, listed=listed)
    wanted = referenced_blobs(target)
    cache = IndexCache()
    fetched, nbytes, present = fetch_blobs(backend, wanted, target, have=have, jobs=jobs, progress=progress,
                                           listed=listed, cache=cache)
    from ikdata.core.store import write_atomic

    write_atomic(target / manifest_mod.MANIFEST, [data])
    actual = manifest_mod.blob_set(target)
    if actual != manifest["blobs"]:
        # The remote's blob set holds blobs no row names; keep the verified referenced ones and
        # record the remote as the parent of a manifest that describes what is really here.
        manifest_mod.write(target, parent={"id": remote_id, "how": "clone", "source": backend.url})
    return Snapshot(target, manifest, data, remote_id, files, fetched, nbytes, present,
                    tuple(f"{path}: {why}" for path, why in sorted(cache.ignored.items())))


def _staging(dest: Path, kind: str, remote_id: str) -> Path:
    return dest.absolute().parent / f".ikdata-{kind}-{dest.name}-{remote_id[:16]}"


def clone(url: str, dest: str | os.PathLike, *, options: RemoteOptions | None = None, jobs: int = DEFAULT_JOBS,
          progress: ProgressCallback | None = None) -> PullResult:
    """Copy a remote dataset into a new folder, verified; the folder appears only when complete.

    Raises:
        UsageError: DEST exists and is not empty.
        RemoteError: no dataset at URL, missing or corrupted remote objects (named).

    Example:
        >>> clone("s3://team-bucket/gemm", "gemm").dataset_id
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest}: exists and is not empty; clone into a new folder, or merge with "
                         f"'ikdata pull {url} {dest}'")
    with open_source(url, options) as backend:  # a remote, or a local dataset folder
        remote = read_remote(backend)
        staging = _staging(dest, "clone", remote[2])
        snap = fetch_snapshot(backend, staging, jobs=jobs, progress=progress, remote=remote)
    from ikdata.core.origin import write_origin
    from ikdata.remote.url import is_url

    source = url if is_url(url) else str(Path(url).resolve())  # a folder: absolute, wherever lineage runs
    write_origin(staging, source, snap.remote_id)  # where the copy came from: local state, the id is unchanged
    if dest.exists():
        dest.rmdir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, dest)
    return PullResult(url, "clone", manifest_mod.current_id(dest) or snap.remote_id, snap.remote_id,
                      snap.blobs_fetched, snap.bytes_fetched, snap.blobs_present, snap.files_fetched,
                      cache_ignored=snap.cache_ignored)


def pull(url: str, dest: str | os.PathLike, *, options: RemoteOptions | None = None, jobs: int = DEFAULT_JOBS,
         progress: ProgressCallback | None = None, **judging: Any) -> PullResult:
    """Bring a remote dataset into DEST: a clone when DEST is new or empty, else a merge (``ikdata import`` rules).

    A merge re-judges the remote's verdicts as import does; ``judging`` (``definitions``, ``trust``,
    ``trust_reports``, ``rejudge_all``) is passed to :func:`ikdata.importing.apply.import_dataset`.

    Only blobs DEST lacks are downloaded, each verified before it enters.

    Raises:
        RemoteError: no dataset at URL, missing or corrupted remote objects (named).
        MergeConflict, ProblemsFound: the merge refuses (conflicting or unvalidated workloads).

    Example:
        >>> pull("hf://datasets/acme/gemm", "shared/gemm").added
    """
    dest = Path(dest)
    if not dest.exists() or (dest.is_dir() and not any(p.name != ".ikdata.lock" for p in dest.iterdir())):
        if dest.exists():
            shutil.rmtree(dest)
        return clone(url, dest, options=options, jobs=jobs, progress=progress)
    if not (dest / manifest_mod.MANIFEST).is_file():
        raise UsageError(f"{dest}: not an ikdata dataset (no {manifest_mod.MANIFEST}); pull into a new folder")
    from ikdata.importing.apply import import_dataset

    with open_source(url, options) as backend:  # a remote, or a local dataset folder
        remote = read_remote(backend)
        remote_id = remote[2]
        local_id = manifest_mod.current_id(dest)
        if local_id == remote_id:
            return PullResult(url, "up-to-date", local_id, remote_id)
        staging = _staging(dest, "pull", remote_id)
        snap = fetch_snapshot(backend, staging, have=dest, jobs=jobs, progress=progress, remote=remote)
    try:
        result = import_dataset(staging, dest, how="pull", source=url, **judging)
    except RemoteError:
        raise
    except Exception:
        shutil.rmtree(staging, ignore_errors=True)  # a verified snapshot that cannot merge: nothing to resume
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return PullResult(url, "pull", result.dataset_id or local_id or "", snap.remote_id, snap.blobs_fetched,
                      snap.bytes_fetched, snap.blobs_present, snap.files_fetched, len(result.added),
                      result.rejudged.statement() if result.rejudged is not None else None,
                      cache_ignored=snap.cache_ignored)


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" ... and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


__all__ = ["clone", "pull", "PullResult", "fetch_snapshot", "fetch_files", "fetch_blobs", "referenced_blobs",
           "read_remote", "BLOB_DIR"]
