"""Push: send what the remote lacks, blobs first, then the small files, and the manifest last.

Every push, even one whose dataset the remote already holds, lists the remote and checks the
objects it relies on instead of sending (:meth:`~ikdata.remote.backend.Backend.check_remote`): a
missing object, or one whose bytes the check finds wrong, is sent again, so a push repairs a
damaged remote. The result says how each object was checked and which were only trusted by size.

The manifest is written with a compare-and-swap against the manifest read at the
start. A pusher that loses the race re-reads the remote: if the winner's dataset
is already contained in ours (same files, or rows that are a subset of ours) it
simply retries; otherwise it merges the winner into the local dataset
(:func:`ikdata.remote.pull.pull`, the rules of ``ikdata import``) and retries, or
refuses when the merge conflicts.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from ikdata.core import manifest as manifest_mod
from ikdata.core.errors import BlobCorrupted, IkdataError, RemoteError, UsageError
from ikdata.core.manifest import dataset_id
from ikdata.core.packs import DEFAULT_PACK_BYTES, DEFAULT_THRESHOLD, PackItem, cached_packs, check_pack, read_loose, read_packed
from ikdata.remote.backend import (REMOTE_MARKER, Backend, LocalBytes, PublishConflict, Relied,
                                   RemoteCheck, file_object, marker_bytes, parse_remote_manifest)
from ikdata.remote.connect import open_backend
from ikdata.remote.packs import (PACKS_PREFIX, ChecksumCache, IndexCache, RemotePack, RemotePacks, build_packs,
                                 find_remote_packs, hashes_of, pack_digest)
from ikdata.core.faults import checkpoint
from ikdata.remote.snapshot import LocalSnapshot, local_snapshot
from ikdata.remote.transfer import DEFAULT_JOBS, ProgressCallback, Upload
from ikdata.remote.url import RemoteOptions
from ikdata.core.store import BlobStore, digest_from_path, rehash_file

MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class PushResult:
    """What a push did.

    Attributes:
        url: the remote.
        dataset_id: the id the remote now holds.
        published: False when the remote already held this dataset (nothing new was written).
        blobs_sent / bytes_sent / files_sent: what was uploaded.
        blobs_present: blobs the remote already had (and passed their check).
        attempts: manifest writes tried (more than 1 after losing a race).
        merged: ids of remote datasets merged into the local one before publishing.
        checked: how the remote objects push relied on were checked: method -> objects (blobs and
            small files; see :class:`~ikdata.remote.backend.RemoteCheck` for the methods).
        trusted_by_size: the relied-on objects the backend could only trust by their size.
        repaired: remote objects sent again because they were damaged, or missing although the
            remote's manifest already named them.
        packs_sent: packs uploaded (each with its index); ``blobs_sent`` counts the blobs in them too.
        cache_ignored: entries of the per-user cache of remote pack indexes that were damaged or not this
            remote's ("path: why"); they were ignored (a cache is a hint, never evidence).
    """

    url: str
    dataset_id: str
    published: bool
    blobs_sent: int
    bytes_sent: int
    files_sent: int
    blobs_present: int
    attempts: int
    merged: tuple[str, ...] = field(default_factory=tuple)
    checked: dict[str, int] = field(default_factory=dict)
    trusted_by_size: tuple[str, ...] = field(default_factory=tuple)
    repaired: tuple[str, ...] = field(default_factory=tuple)
    packs_sent: int = 0
    cache_ignored: tuple[str, ...] = field(default_factory=tuple)

    @property
    def objects_checked(self) -> int:
        """Relied-on remote objects whose bytes were checked (not only their size)."""
        return sum(n for method, n in self.checked.items() if method != "size")

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "dataset_id": self.dataset_id, "published": self.published,
                "blobs_sent": self.blobs_sent, "bytes_sent": self.bytes_sent, "files_sent": self.files_sent,
                "blobs_present": self.blobs_present, "attempts": self.attempts, "merged": list(self.merged),
                "checked": dict(self.checked), "trusted_by_size": list(self.trusted_by_size),
                "repaired": list(self.repaired), "packs_sent": self.packs_sent,
                "cache_ignored": list(self.cache_ignored)}


def push(root: str | os.PathLike, url: str, *, options: RemoteOptions | None = None, jobs: int = DEFAULT_JOBS,
         progress: ProgressCallback | None = None, rebase: bool = True, pack: bool = True,
         pack_threshold: int = DEFAULT_THRESHOLD, pack_bytes: int = DEFAULT_PACK_BYTES, **judging: Any) -> PushResult:
    """Publish a dataset: missing blobs (in packs), then missing small files, then the manifest (conditionally).

    Args:
        root: the local dataset; its manifest must describe its files.
        url: the remote (folder, file://, memory://, s3://bucket/prefix, hf://datasets/org/name).
        options: endpoint, profile, revision, token (flags; the environment fills the rest).
        jobs: parallel transfers.
        progress: called with :class:`~ikdata.remote.transfer.Progress` as objects are sent.
        rebase: merge a remote that holds data the local dataset lacks (else refuse).
        pack: send the dataset's packs as packs (and their indexes), and pack the missing loose blobs smaller
            than ``pack_threshold`` bytes into new packs of about ``pack_bytes`` (the local dataset is not
            changed); False sends every blob as a loose object (remote layout 1, which older ikdata reads).
        judging: how that merge takes the remote's verdicts, as for :func:`ikdata.remote.pull.pull`
            (``definitions``, ``trust``, ``trust_reports``, ``rejudge_all``).

    Raises:
        UsageError: the local dataset has uncommitted changes.
        RemoteError: the remote cannot be reached, or holds data that cannot be merged.
        BlobCorrupted: a local blob does not match its digest (nothing of it is sent).

    Example:
        >>> push("runs/gemm", "s3://team-bucket/gemm").dataset_id
    """
    local = local_snapshot(root)
    merged: list[str] = []
    checksums = ChecksumCache()
    with open_backend(url, options) as backend:
        backend.prepare_push()  # a folder, file or memory remote gets its marker first
        sent = files_sent = bytes_sent = packs_sent = 0
        for attempt in range(1, MAX_ATTEMPTS + 1):
            base = backend.read_manifest()
            remote_id = None
            if base.data is not None:
                remote_manifest = parse_remote_manifest(backend, base.data)
                remote_id = dataset_id(remote_manifest)
                if (remote_id != local.dataset_id and remote_id not in merged
                        and not _contains(local, remote_manifest, remote_id, backend)):
                    if not rebase:
                        raise _diverged(backend, local, remote_id)
                    # After the merge the local dataset holds the remote's workloads by import's rules
                    # (deduped by uuid), even when their lines differ (e.g. a validation attached).
                    _merge_remote(backend, local, remote_id, url, options, jobs, judging)
                    merged.append(remote_id)
                    local = local_snapshot(local.root)
                    continue
            # Even when the remote holds this very dataset, what it holds is listed and checked: a manifest
            # names only what was there when it was published, not what a broken store kept since.
            extra = [] if base.data is not None or backend.marked() else [(REMOTE_MARKER, marker_bytes())]
            listed = backend.list_objects("")  # one listing of the whole remote: blobs, packs and small files
            blobs = _send_blobs(backend, local, jobs, progress, listed,
                                _Packing(pack, pack_threshold, pack_bytes, checksums))
            files = _send_files(backend, local, jobs, extra, listed, checksums)
            checksums.flush()
            sent, bytes_sent, files_sent = sent + blobs.sent, bytes_sent + blobs.nbytes, files_sent + files.sent
            packs_sent += blobs.packs
            check = blobs.check.merge(files.check)
            repaired = sorted(set(check.damaged) | (set(blobs.missing) | set(files.missing)
                                                     if remote_id == local.dataset_id else set()))
            details = {"checked": dict(sorted(check.counts.items())), "trusted_by_size": tuple(check.trusted),
                       "repaired": tuple(repaired)}
            details["packs_sent"] = packs_sent
            details["cache_ignored"] = tuple(f"{path}: {why}" for path, why in sorted(blobs.cache_ignored.items()))
            if remote_id == local.dataset_id:
                return PushResult(url, local.dataset_id, False, sent, bytes_sent, files_sent, blobs.present, attempt,
                                  tuple(merged), **details)
            checkpoint("before-manifest")
            try:
                backend.publish_manifest(local.data, base)
            except PublishConflict:
                continue
            return PushResult(url, local.dataset_id, True, sent, bytes_sent, files_sent, blobs.present, attempt,
                              tuple(merged), **details)
    raise RemoteError(f"gave up after {MAX_ATTEMPTS} attempts: other pushers kept changing the remote "
                      "manifest; push again", url=url)


@dataclass
class _Sent:
    """What one pass of sending did: objects sent, the missing ones among them, and the check of the rest."""

    sent: int = 0
    nbytes: int = 0
    present: int = 0
    missing: list[str] = field(default_factory=list)
    check: RemoteCheck = field(default_factory=RemoteCheck)
    packs: int = 0
    cache_ignored: dict[str, str] = field(default_factory=dict)  # local cache entries not used, and why


@dataclass(frozen=True)
class _Packing:
    """How push packs: at all, below which loose size, how big a pack, and the md5 cache of packs."""

    enabled: bool
    threshold: int
    pack_bytes: int
    checksums: ChecksumCache


def _send_blobs(backend: Backend, local: LocalSnapshot, jobs: int, progress: ProgressCallback | None,
                listed: dict[str, int], packing: _Packing) -> _Sent:
    """Send the blobs the remote lacks: the local packs holding most of them as they are (pack, then
    index), the other small ones in new packs, the large ones (and all, without packing) loose."""
    index_cache = IndexCache()
    remote = find_remote_packs(backend, listed, local_root=local.root, cache=index_cache, jobs=jobs) \
        if packing.enabled or any(rel.startswith(PACKS_PREFIX) for rel in listed) else RemotePacks()
    mine = cached_packs(local.root)
    relied = [Relied(rel, _local_bytes(local, rel)) for rel, size in sorted(local.blobs.items())
              if digest_from_path(rel) not in remote.members and listed.get(rel) == size]
    # Remote packs holding local blobs are relied on like loose objects: checked as far as the backend can.
    used = {remote.members[d].digest for d in map(digest_from_path, local.blobs) if d in remote.members}
    pack_relied = [_relied_pack(local, remote.packs[d], packing.checksums) for d in sorted(used)]
    check = backend.check_remote(relied + pack_relied, jobs=jobs) if relied or pack_relied else RemoteCheck()
    for item in pack_relied:
        if item.rel in check.damaged:
            remote.drop(pack_digest(item.rel), "its bytes failed the check")  # its blobs are sent again
    checked = {r.rel for r in relied} - set(check.damaged)
    resend = sorted(rel for rel in local.blobs if digest_from_path(rel) not in remote.members and rel not in checked)
    missing = [rel for rel in resend if rel not in check.damaged]
    whole, items, loose = _plan_sending(local, mine, resend, packing, set(check.damaged))
    holder, built, counts = build_packs(items, pack_bytes=packing.pack_bytes) if items else (None, [], [])
    try:
        pack_uploads, index_uploads = [], []
        for pack_rel, index_rel, count in whole:
            pack_uploads.append(Upload(pack_rel, local.root / pack_rel, (local.root / pack_rel).stat().st_size, count))
            index_uploads.append(Upload(index_rel, local.root / index_rel, (local.root / index_rel).stat().st_size, 0))
        for (pack_rel, index_rel), count in zip(built, counts):
            root = Path(holder.name)
            packing.checksums.note(*hashes_of(root / pack_rel))
            data = (root / index_rel).read_bytes()
            index_cache.put(backend, index_rel, data)  # a hint for the next push, confirmed by its listing
            pack_uploads.append(Upload(pack_rel, root / pack_rel, (root / pack_rel).stat().st_size, count))
            index_uploads.append(Upload(index_rel, data, len(data), 0))
        loose_uploads = [u for rel in loose for u in [_loose_upload(local, rel)]]
        # A pack goes before its index (the index publishes it), and both before the manifest.
        backend.upload_in_order(pack_uploads + loose_uploads, index_uploads, jobs=jobs, progress=progress)
    finally:
        if holder is not None:
            holder.cleanup()
    checkpoint("blobs-sent")
    sent = len(resend)
    nbytes = sum(u.size for u in pack_uploads + loose_uploads + index_uploads)
    return _Sent(sent, nbytes, len(local.blobs) - sent, missing, check, len(pack_uploads), dict(remote.ignored))


def _relied_pack(local: LocalSnapshot, remote: RemotePack, checksums: ChecksumCache) -> Relied:
    """A remote pack push relies on: checked against the local copy of that pack when there is one."""
    path = local.root / remote.pack
    return Relied(remote.pack, path if path.is_file() else None, blob=False, sha256=remote.digest,
                  md5=checksums.md5(remote.digest), git_blob_id=checksums.git_blob_id(remote.digest))


def _plan_sending(local: LocalSnapshot, mine: Any, resend: list[str], packing: _Packing,
                  damaged: set[str]) -> tuple[list[tuple[str, str, int]], list[PackItem], list[str]]:
    """Which blobs go how: local packs sent whole (those holding at least half the bytes they hold among
    the blobs to send, and verifying), tensors for new packs (read verified), and loose paths (large
    blobs, and damaged loose objects: repaired in place, for readers of the loose layout)."""
    if not packing.enabled:
        return [], [], resend
    by_pack: dict[str, list[str]] = {}
    for rel in resend:
        if rel in damaged:
            continue
        blob = mine.find(digest_from_path(rel)) if not (local.root / rel).is_file() else None
        if blob is not None:
            by_pack.setdefault(blob.index, []).append(rel)
    whole, done = [], set()
    for index, rels in sorted(by_pack.items()):
        members = mine.listed.get(index, ())
        wanted = {digest_from_path(r) for r in rels}
        if 2 * sum(b.length for b in members if b.digest in wanted) < sum(b.length for b in members):
            continue
        result = check_pack(local.root, index, list(members), deep=True)
        if result.problems or len(result.verified) != len(members):
            continue  # a damaged local pack: its good members go in a new pack, the bad ones are refused below
        whole.append((members[0].pack, index, len(rels)))
        done |= set(rels)
    items, loose = [], []
    for rel in resend:
        if rel in done:
            continue
        if local.blobs[rel] >= packing.threshold or rel in damaged:
            loose.append(rel)
            continue
        digest = digest_from_path(rel)
        item, why = read_loose(local.root, digest)
        if item is None and (local.root / rel).is_file():
            raise _corrupted(local, rel, why)
        if item is None:
            blob = mine.find(digest)
            if blob is None:
                raise _corrupted(local, rel, "it is neither a file nor in a pack")
            try:
                item = PackItem(digest, blob.dtype, blob.shape, bytes(read_packed(local.root, blob)))
            except BlobCorrupted as exc:
                raise _corrupted(local, rel, str(exc)) from exc
        items.append(item)
    return whole, items, loose


def _loose_upload(local: LocalSnapshot, rel: str) -> Upload:
    """A blob sent as a loose object, verified first: its file rehashed, or its packed slice."""
    packed = _packed_uploads(local, [rel])
    if rel in packed:
        return packed[rel]  # verified as it was read from its pack
    found = rehash_file(local.root / rel)
    expected = digest_from_path(rel)
    if found.error or list(found.digests) != [expected]:
        raise _corrupted(local, rel, found.error or f"its tensor digest is {found.digests[0] if found.digests else 'none'}")
    return Upload(rel, local.root / rel, local.blobs[rel])


def _corrupted(local: LocalSnapshot, rel: str, why: str | None) -> BlobCorrupted:
    expected = digest_from_path(rel)
    return BlobCorrupted(f"{local.root / rel}: does not match its digest {expected} ({why}); nothing "
                         f"was published. Run 'ikdata validate --deep {local.root}'", digest=expected, path=rel)


def _local_bytes(local: LocalSnapshot, rel: str) -> LocalBytes:
    """A local blob's bytes as a check reads them: its file, or (packed) its canonical bytes from the pack."""
    path = local.root / rel
    if path.is_file():
        return path

    def from_pack() -> bytes:
        upload = _packed_uploads(local, [rel]).get(rel)
        if upload is None:
            raise BlobCorrupted(f"{path}: is neither a file nor in a pack; run 'ikdata validate {local.root}'",
                                digest=digest_from_path(rel), path=rel)
        assert isinstance(upload.source, bytes)
        return upload.source

    return from_pack


def _packed_uploads(local: LocalSnapshot, rels: list[str]) -> dict[str, Upload]:
    """Blobs the local dataset keeps in packs (:mod:`ikdata.core.packs`), sent as the canonical loose
    blobs they stand for (each slice verified against its digest as it is read)."""
    from ikdata.core.packs import read_packed

    store = BlobStore(local.root)
    found = {}
    for rel in rels:
        if (local.root / rel).is_file():
            continue
        blob = store.packed(digest_from_path(rel))
        if blob is None:
            continue
        data = b"".join(bytes(c) for c in blob.loose_bytes(read_packed(local.root, blob)))
        found[rel] = Upload(rel, data, len(data))
    return found


def _send_files(backend: Backend, local: LocalSnapshot, jobs: int, extra: list[tuple[str, bytes]],
                listed: dict[str, int], checksums: ChecksumCache) -> _Sent:
    """Send the small files the remote lacks or holds damaged, with ``extra`` objects (the marker of a
    first push to S3 or the Hub: in the same batch, so no extra commit)."""
    data: dict[str, bytes] = {}
    for path, digest in sorted(local.manifest["files"].items()):
        rel = file_object(digest)
        if rel in data:
            continue  # two dataset paths with the same bytes are one object
        content = (local.root / path).read_bytes()
        if hashlib.sha256(content).hexdigest() != digest:
            raise UsageError(f"{local.root / path}: changed while pushing; run 'ikdata manifest {local.root}' "
                             "and push again")
        data[rel] = content
    missing = [rel for rel in sorted(data) if listed.get(rel) != len(data[rel])]
    relied = [Relied(rel, content, blob=False) for rel, content in sorted(data.items()) if rel not in missing]
    check = backend.check_remote(relied, jobs=jobs) if relied else RemoteCheck()
    resend = sorted(set(missing) | set(check.damaged))
    backend.upload([Upload(rel, data[rel], len(data[rel])) for rel in resend]
                   + [Upload(rel, content, len(content)) for rel, content in extra], jobs=jobs)
    checkpoint("files-sent")
    return _Sent(len(resend), sum(len(data[rel]) for rel in resend), len(data) - len(resend), missing, check)


def _contains(local: LocalSnapshot, remote: dict[str, Any], remote_id: str, backend: Backend) -> bool:
    """Whether publishing the local manifest keeps everything the remote one names."""
    if any(p.get("id") == remote_id for p in local.manifest.get("parents", [])):
        return True
    for path, digest in remote["files"].items():
        mine = local.manifest["files"].get(path)
        if mine == digest:
            continue
        if mine is not None and path.startswith("reports/") and path.endswith(".json"):
            if not _report_covers(local.root / path, backend.read(file_object(digest))):
                return False
            continue
        if mine is None or not path.endswith(".jsonl"):
            return False
        theirs = set(backend.read(file_object(digest)).splitlines())
        ours = set((local.root / path).read_bytes().splitlines())
        if not theirs <= ours:
            return False
    return True


def _report_covers(mine: Path, theirs: bytes) -> bool:
    """Whether the local report judges every workload the remote's report judged, so publishing it loses no verdict
    (a dataset replayed again: its report's timings, and so its id, change, and the remote needs nothing merged).
    Both are read by the one report reader; one that cannot be read covers nothing."""
    import tempfile

    from ikdata.core.cases import read_report
    from ikdata.core.errors import RecordError

    with tempfile.TemporaryDirectory(prefix=".tmp-report-") as folder:
        copy = Path(folder) / "theirs.json"
        copy.write_bytes(theirs)
        try:
            judged_there = {case.uuid for case in read_report(copy).cases}
            judged_here = {case.uuid for case in read_report(mine).cases}
        except RecordError:
            return False
    return judged_there <= judged_here


def _diverged(backend: Backend, local: LocalSnapshot, remote_id: str) -> RemoteError:
    return backend.fail(f"holds dataset {remote_id[:12]}, which has data {local.root} lacks; run 'ikdata pull "
                        f"{backend.url} {local.root}' to merge it, then push again")


def _merge_remote(backend: Backend, local: LocalSnapshot, remote_id: str, url: str,
                  options: RemoteOptions | None, jobs: int, judging: dict[str, Any]) -> None:
    from ikdata.remote.pull import pull

    try:
        pull(url, local.root, options=options, jobs=jobs, **judging)
    except RemoteError:
        raise
    except IkdataError as exc:
        raise backend.fail(f"holds dataset {remote_id[:12]} (published by another pusher), which has data "
                           f"{local.root} lacks, and merging it was refused, so nothing was published: {exc}") from exc
