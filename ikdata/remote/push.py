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
from ikdata.remote.backend import (BLOB_PREFIX, FILES_PREFIX, REMOTE_MARKER, Backend, LocalBytes, PublishConflict, Relied,
                                   RemoteCheck, file_object, marker_bytes, parse_remote_manifest)
from ikdata.remote.connect import open_backend
from ikdata.core.faults import checkpoint
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

    @property
    def objects_checked(self) -> int:
        """Relied-on remote objects whose bytes were checked (not only their size)."""
        return sum(n for method, n in self.checked.items() if method != "size")

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "dataset_id": self.dataset_id, "published": self.published,
                "blobs_sent": self.blobs_sent, "bytes_sent": self.bytes_sent, "files_sent": self.files_sent,
                "blobs_present": self.blobs_present, "attempts": self.attempts, "merged": list(self.merged),
                "checked": dict(self.checked), "trusted_by_size": list(self.trusted_by_size),
                "repaired": list(self.repaired)}


@dataclass(frozen=True)
class LocalSnapshot:
    """The local dataset as its manifest describes it (checked against the files)."""

    root: Path
    manifest: dict[str, Any]
    data: bytes
    dataset_id: str
    blobs: dict[str, int]


def local_snapshot(root: str | os.PathLike) -> LocalSnapshot:
    """Read the local manifest and check it still describes the files.

    Raises:
        UsageError: no dataset, no manifest, or changes the manifest does not list.
    """
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such dataset folder")
    path = root / manifest_mod.MANIFEST
    if not path.is_file():
        raise UsageError(f"{root}: has no manifest ({manifest_mod.MANIFEST}); run 'ikdata manifest {root}' first")
    data = path.read_bytes()
    manifest = manifest_mod.read(root)
    assert manifest is not None
    blobs = dict(BlobStore(root).iter_blobs())
    actual = manifest_mod.build(root)
    if actual["files"] != manifest["files"] or actual["blobs"] != manifest["blobs"]:
        changed = sorted(p for p in set(actual["files"]) | set(manifest["files"])
                         if actual["files"].get(p) != manifest["files"].get(p))
        what = ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "") if changed else "the blob set"
        raise UsageError(f"{root}: the manifest does not describe the files ({what} changed); "
                         f"run 'ikdata manifest {root}' to commit the changes, then push again")
    return LocalSnapshot(root, manifest, data, dataset_id(manifest), blobs)


def push(root: str | os.PathLike, url: str, *, options: RemoteOptions | None = None, jobs: int = DEFAULT_JOBS,
         progress: ProgressCallback | None = None, rebase: bool = True, **judging: Any) -> PushResult:
    """Publish a dataset: missing blobs, then missing small files, then the manifest (conditionally).

    Args:
        root: the local dataset; its manifest must describe its files.
        url: the remote (folder, file://, memory://, s3://bucket/prefix, hf://datasets/org/name).
        options: endpoint, profile, revision, token (flags; the environment fills the rest).
        jobs: parallel transfers.
        progress: called with :class:`~ikdata.remote.transfer.Progress` as objects are sent.
        rebase: merge a remote that holds data the local dataset lacks (else refuse).
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
    with open_backend(url, options) as backend:
        backend.prepare_push()  # a folder, file or memory remote gets its marker first
        sent = files_sent = bytes_sent = 0
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
            blobs = _send_blobs(backend, local, jobs, progress)
            files = _send_files(backend, local, jobs, extra)
            sent, bytes_sent, files_sent = sent + blobs.sent, bytes_sent + blobs.nbytes, files_sent + files.sent
            check = blobs.check.merge(files.check)
            repaired = sorted(set(check.damaged) | (set(blobs.missing) | set(files.missing)
                                                     if remote_id == local.dataset_id else set()))
            details = {"checked": dict(sorted(check.counts.items())), "trusted_by_size": tuple(check.trusted),
                       "repaired": tuple(repaired)}
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


def _send_blobs(backend: Backend, local: LocalSnapshot, jobs: int, progress: ProgressCallback | None) -> _Sent:
    listed = backend.list_objects(BLOB_PREFIX)
    missing = [rel for rel, size in sorted(local.blobs.items()) if listed.get(rel) != size]
    # Blobs the remote already has are relied on, not sent: check them as far as the backend can
    # (a flipped byte keeps the size), and send the damaged ones again.
    relied = [Relied(rel, _local_bytes(local, rel)) for rel, size in sorted(local.blobs.items())
              if listed.get(rel) == size]
    check = backend.check_remote(relied, jobs=jobs) if relied else RemoteCheck()
    resend = sorted(set(missing) | set(check.damaged))
    packed = _packed_uploads(local, resend)
    for rel in resend:
        if rel in packed:
            continue  # verified as it was read from its pack
        found = rehash_file(local.root / rel)
        expected = digest_from_path(rel)
        if found.error or list(found.digests) != [expected]:
            why = found.error or f"its tensor digest is {found.digests[0] if found.digests else 'none'}"
            raise BlobCorrupted(f"{local.root / rel}: does not match its digest {expected} ({why}); nothing "
                                f"was published. Run 'ikdata validate --deep {local.root}'", digest=expected,
                                path=rel)
    uploads = [packed.get(rel) or Upload(rel, local.root / rel, local.blobs[rel]) for rel in resend]
    backend.upload(uploads, jobs=jobs, progress=progress)
    checkpoint("blobs-sent")
    return _Sent(len(uploads), sum(u.size for u in uploads), len(local.blobs) - len(uploads), missing, check)


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


def _send_files(backend: Backend, local: LocalSnapshot, jobs: int, extra: list[tuple[str, bytes]]) -> _Sent:
    """Send the small files the remote lacks or holds damaged, with ``extra`` objects (the marker of a
    first push to S3 or the Hub: in the same batch, so no extra commit)."""
    listed = backend.list_objects(FILES_PREFIX)
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
        if mine is None or not path.endswith(".jsonl"):
            return False
        theirs = set(backend.read(file_object(digest)).splitlines())
        ours = set((local.root / path).read_bytes().splitlines())
        if not theirs <= ours:
            return False
    return True


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
