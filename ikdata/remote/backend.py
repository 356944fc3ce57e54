"""Backends: one small interface over the places a dataset can be published.

Remote layout (the same on every backend)::

    PREFIX/ikdata.json                           the manifest: the commit marker, written last, conditionally
    PREFIX/blob/sha256/<d[:2]>/<digest>.safetensors   blobs, named by their tensor digest (immutable)
    PREFIX/blob/packs/<p>.safetensors            packs: many small blobs in one object, named by the sha256 of
                                                 its bytes (immutable; :mod:`ikdata.core.packs`)
    PREFIX/blob/packs/<p>.index.json             its index, written after the pack: what publishes it
    PREFIX/files/sha256/<s[:2]>/<sha256>         definition, row, receipt and report files, named by the
                                                 sha256 of their bytes (immutable); the manifest's
                                                 ``files`` map gives each its dataset path
    PREFIX/.ikdata-remote                        the marker: local commands refuse to write here

A blob may be loose, packed, or both; readers look a digest up in the packs' indexes when its loose
object is absent (docs/sharing.md, "Remote layout", says which ikdata reads which layout).

Every object except the manifest is named by its content, so two pushers can
never overwrite each other's objects; only the manifest is contested, and each
backend writes it with a compare-and-swap (:meth:`Backend.publish_manifest`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, Union

import orjson

from ikdata.core import schema
from ikdata.core.digest import file_prefix_digest
from ikdata.core.errors import RemoteError, UsageError
from ikdata.core.locking import REMOTE_MARKER, REMOTE_MARKER_FORMAT
from ikdata.core.paths import record_path_refusal
from ikdata.core.store import digest_from_path, rehash_files
from ikdata.remote.transfer import DEFAULT_JOBS, ProgressCallback, Upload, run_parallel
from ikdata.remote.url import RemoteURL

MANIFEST = "ikdata.json"
BLOB_PREFIX = "blob/"
FILES_PREFIX = "files/"


def file_object(sha256: str) -> str:
    """The remote path of a small file with this sha256."""
    return f"files/sha256/{sha256[:2]}/{sha256}"


@dataclass(frozen=True)
class ManifestState:
    """The remote manifest as read: its bytes (None when there is none) and a generation token.

    The token is what the conditional write compares against: an S3 ETag, a Hub
    commit sha, or the sha256 of the bytes for file and memory remotes.
    """

    data: bytes | None
    token: str | None


class PublishConflict(RemoteError):
    """The remote manifest changed since it was read; the publish did not happen."""


LocalBytes = Union[Path, bytes, Callable[[], bytes]]  # a local file, the bytes, or how to read them (a pack)


@dataclass(frozen=True)
class Relied:
    """A remote object push relies on instead of sending: its remote path and the local bytes it must hold.

    ``blob`` objects are named by their tensor digest, the others (small files, packs) by the sha256 of
    their bytes: ``sha256`` (hex) when the name alone does not say it (a pack's name has a suffix). ``md5``
    and ``git_blob_id``, when known from the checksum cache, spare reading local bytes for an S3 ETag or a
    Hub blob id comparison; ``local`` may then be None (a pack push built and did not keep).
    """

    rel: str
    local: LocalBytes | None
    blob: bool = True
    sha256: str | None = None
    md5: str | None = None
    git_blob_id: str | None = None

    @property
    def content_sha256(self) -> str:
        """The sha256 (hex) the object's bytes must have (not for blobs)."""
        return self.sha256 or self.rel.rsplit("/", 1)[-1]


@dataclass
class RemoteCheck:
    """What checking relied-on remote objects found: the damaged ones (to send again), and how each
    object was checked (``counts``: method -> objects; ``trusted``: those only trusted by their size).

    Methods: ``rehashed`` (folder and file remotes), ``compared`` (memory, byte for byte), ``etag-md5``
    and ``sha256-checksum`` (S3), ``lfs-sha256`` and ``git-blob-id`` (the Hub), ``size`` (trusted).
    """

    damaged: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    trusted: list[str] = field(default_factory=list)

    def note(self, rel: str, method: str, ok: bool) -> None:
        self.counts[method] = self.counts.get(method, 0) + 1
        if method == "size":
            self.trusted.append(rel)
        elif not ok:
            self.damaged.append(rel)

    def merge(self, other: "RemoteCheck") -> "RemoteCheck":
        for method, n in other.counts.items():
            self.counts[method] = self.counts.get(method, 0) + n
        self.damaged += other.damaged
        self.trusted += other.trusted
        return self


def local_chunks(local: LocalBytes) -> Iterator[bytes]:
    """The bytes of a :data:`LocalBytes`, in chunks."""
    if isinstance(local, bytes):
        yield local
    elif isinstance(local, Path):
        with open(local, "rb") as stream:
            yield from iter(lambda: stream.read(1 << 20), b"")
    else:
        yield local()


def local_hash(local: LocalBytes, hasher: Any) -> str:
    """A transport checksum of local bytes (compared with what a store computed), not a content digest."""
    for chunk in local_chunks(local):
        hasher.update(chunk)
    return hasher.hexdigest()


def local_size(local: LocalBytes) -> int:
    if isinstance(local, bytes):
        return len(local)
    if isinstance(local, Path):
        return local.stat().st_size
    return len(local())


def marker_bytes() -> bytes:
    """The remote marker (:data:`ikdata.core.locking.REMOTE_MARKER`): local writers refuse a folder holding it."""
    return orjson.dumps({"format": REMOTE_MARKER_FORMAT,
                         "what": "a remote written by ikdata push (objects named by digest, the manifest last); "
                                 "local commands do not write here: clone it first (ikdata clone URL DIR)"},
                        option=orjson.OPT_INDENT_2) + b"\n"


class Backend:
    """What push, pull and the read-only views need from a remote."""

    def __init__(self, remote: RemoteURL) -> None:
        self.remote = remote
        self.url = remote.url

    @property
    def identity(self) -> str:
        """What names this remote among all remotes (protocol, endpoint, bucket or repository, path): the key
        under which caches of its state live, so one remote's entries never answer for another."""
        return f"{self.remote.protocol}:{self.remote.path}"

    def listed_checksum_matches(self, rel: str, data: bytes) -> bool | None:
        """Whether the last listing's checksum of ``rel`` (an S3 ETag that is an MD5, a Hub content id) says
        the remote holds exactly ``data``; None when the listing gave none (then only a read can tell)."""
        return None

    def prepare_push(self) -> None:
        """Make the remote ready to receive (create a folder or a Hub repo); S3 buckets must exist.

        Folder, file and memory remotes get their marker (:func:`marker_bytes`) here, before any object.
        """

    def marked(self) -> bool:
        """Whether :meth:`prepare_push` already wrote the remote marker (else push sends it with the
        first push's blobs, in the same batch)."""
        return False

    def read_manifest(self) -> ManifestState:
        raise NotImplementedError

    def list_objects(self, prefix: str) -> dict[str, int]:
        """Every object under ``prefix`` ("" for the whole remote) as {path: size}, from one (paginated) listing."""
        raise NotImplementedError

    def upload(self, items: Sequence[Upload], *, jobs: int = DEFAULT_JOBS,
               progress: ProgressCallback | None = None) -> None:
        raise NotImplementedError

    def upload_in_order(self, first: Sequence[Upload], then: Sequence[Upload], *, jobs: int = DEFAULT_JOBS,
                        progress: ProgressCallback | None = None) -> None:
        """Upload ``first``, then ``then`` (packs before the indexes that publish them). The Hub, whose
        commits are atomic, sends both in the same commits instead."""
        from ikdata.core.faults import checkpoint
        from ikdata.remote.transfer import Progress

        objects, nbytes = sum(u.blobs for u in [*first, *then]), sum(u.size for u in [*first, *then])

        def shifted(objects_before: int, bytes_before: int) -> ProgressCallback | None:
            if progress is None:
                return None
            return lambda p: progress(Progress(p.phase, objects_before + p.objects_done, objects,
                                               bytes_before + p.bytes_done, nbytes))

        self.upload(first, jobs=jobs, progress=shifted(0, 0))
        checkpoint("packs-sent")
        if then:
            self.upload(then, jobs=jobs, progress=shifted(sum(u.blobs for u in first), sum(u.size for u in first)))

    def fetch(self, rel: str, dest: Path) -> None:
        """Download one object into the file ``dest`` (overwritten)."""
        raise NotImplementedError

    def read(self, rel: str, *, start: int | None = None, end: int | None = None) -> bytes:
        raise NotImplementedError

    def check_remote(self, objects: Sequence[Relied], *, jobs: int = DEFAULT_JOBS) -> RemoteCheck:
        """Check the remote objects push relies on (the listing shows them with the right size); push
        sends the damaged ones again.

        The base class checks nothing more than that size: each object is reported as trusted by
        size, and ``ikdata validate --deep URL`` rehashes what the remote holds.
        """
        check = RemoteCheck()
        for item in objects:
            check.note(item.rel, "size", True)
        return check

    def publish_manifest(self, data: bytes, base: ManifestState) -> None:
        """Write the manifest if the remote one is still ``base``.

        Raises:
            PublishConflict: another writer changed the manifest first; nothing was written.
        """
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def fail(self, message: str) -> RemoteError:
        return RemoteError(message, url=self.url)


_MD5_RE = re.compile(r"[0-9a-f]{32}")
_REMOTE_NAMES = {MANIFEST, "blob", "files", REMOTE_MARKER, ".ikdata-publish.lock"}  # what a remote folder holds

# Publishes to memory:// remotes are serialised by this lock: the memory filesystem is one
# process-wide store, so a process-wide lock is the exact scope of its compare-and-swap.
_MEMORY_PUBLISH = threading.Lock()


class FsspecBackend(Backend):
    """Any fsspec filesystem; file and memory remotes get a real compare-and-swap of the manifest."""

    def __init__(self, remote: RemoteURL, fs: Any, root: str) -> None:
        super().__init__(remote)
        self.fs, self.root = fs, root.rstrip("/")
        self.etags: dict[str, str] = {}  # remote path -> ETag, as the last listing gave it (S3)

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    @property
    def identity(self) -> str:
        root = os.path.abspath(self.root) if self.remote.protocol == "file" else self.root
        return f"{self.remote.protocol}:{root}"

    def listed_checksum_matches(self, rel: str, data: bytes) -> bool | None:
        etag = self.etags.get(rel, "").lower()
        if not _MD5_RE.fullmatch(etag):
            return None  # no listing checksum, or a multipart ETag (not the MD5 of the bytes)
        return hashlib.md5(data, usedforsecurity=False).hexdigest() == etag

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except RemoteError:
            raise
        except Exception as exc:  # fsspec backends raise their own error types; name them, keep the cause
            raise self.translate(exc, what) from exc

    def translate(self, exc: Exception, what: str) -> RemoteError:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return self.fail(f"cannot {what}: {reason}")

    def prepare_push(self) -> None:
        with self._errors("create the remote folder"):
            self.fs.makedirs(self.root, exist_ok=True)
            if self.remote.protocol not in ("file", "memory"):
                return
            marker = self._path(REMOTE_MARKER)
            if self.fs.exists(marker):
                return
            held = [n for n in ("workloads", "definitions", "receipts.jsonl") if self.fs.exists(self._path(n))]
            # A remote an older push wrote has no marker: only its own names. Anything else is not ours.
            other = sorted(os.path.basename(p.rstrip("/")) for p in self.fs.ls(self.root, detail=False)
                           if os.path.basename(p.rstrip("/")) not in _REMOTE_NAMES
                           and not os.path.basename(p.rstrip("/")).startswith(".tmp-"))
        if held:  # publishing here would overwrite the dataset's own manifest
            raise UsageError(f"{self.url}: holds a dataset ({', '.join(held)}), not a remote; push to a new "
                             "or empty folder, or to one ikdata push wrote")
        if other:  # push would mix its objects into someone's files
            shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
            raise UsageError(f"{self.url}: is not empty ({shown}) and not an ikdata remote (no {REMOTE_MARKER}); "
                             "push to a new or empty folder, or to one ikdata push wrote")
        with self._errors("mark the remote folder"):
            if self.remote.protocol == "file":
                from ikdata.core.store import write_atomic

                write_atomic(Path(marker), [marker_bytes()])
            else:
                self.fs.pipe_file(marker, marker_bytes())

    def marked(self) -> bool:
        return self.remote.protocol in ("file", "memory")

    def read_manifest(self) -> ManifestState:
        with self._errors("read the manifest"):
            try:
                data = self.fs.cat_file(self._path(MANIFEST))
            except FileNotFoundError:
                return ManifestState(None, None)
        return ManifestState(data, hashlib.sha256(data).hexdigest())

    def list_objects(self, prefix: str) -> dict[str, int]:
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        with self._errors(f"list {prefix or 'the remote'}"):
            try:
                found = self.fs.find(base, detail=True)
            except FileNotFoundError:
                return {}
        strip = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        listed = {}
        for name, info in found.items():
            name = self.fs._strip_protocol(name)
            if info.get("type", "file") != "file" or not name.startswith(strip):
                continue
            rel = name[len(strip):]
            if os.path.basename(rel).startswith(".tmp-") or rel.startswith(".ikdata-publish"):
                continue
            listed[rel] = int(info.get("size") or 0)
            if info.get("ETag"):
                self.etags[rel] = str(info["ETag"]).strip('"')  # S3: kept for check_remote, no extra request
        return listed

    def check_remote(self, objects: Sequence[Relied], *, jobs: int = DEFAULT_JOBS) -> RemoteCheck:
        """Folder and file remotes rehash each remote object (a blob by its tensor digest, a small file by
        its sha256); memory remotes compare the bytes; other fsspec filesystems trust the size (see
        :meth:`Backend.check_remote`)."""
        if self.remote.protocol == "file":
            check = RemoteCheck()
            blobs = [o for o in objects if o.blob]
            for item, found in zip(blobs, rehash_files([self._path(o.rel) for o in blobs], jobs=jobs)):
                check.note(item.rel, "rehashed", not found.error and list(found.digests) == [digest_from_path(item.rel)])
            files = [o for o in objects if not o.blob]
            for item, ok in zip(files, run_parallel("check", files, self._file_intact, size_of=lambda o: 0,
                                                      jobs=jobs)):
                check.note(item.rel, "rehashed", ok)
            return check
        if self.remote.protocol == "memory":
            check = RemoteCheck()
            with self._errors("check remote objects"):
                for item in objects:
                    held = self.fs.cat_file(self._path(item.rel))
                    if item.local is None:  # named by the sha256 of its bytes, no local copy
                        check.note(item.rel, "rehashed", hashlib.sha256(held).hexdigest() == item.content_sha256)
                    else:
                        check.note(item.rel, "compared", held == b"".join(local_chunks(item.local)))
            return check
        return super().check_remote(objects, jobs=jobs)

    def _file_intact(self, item: Relied) -> bool:
        """Whether a small file of a folder remote still has the sha256 its name says."""
        try:
            return file_prefix_digest(self._path(item.rel))[1] == item.content_sha256
        except OSError:
            return False

    def upload(self, items: Sequence[Upload], *, jobs: int = DEFAULT_JOBS,
               progress: ProgressCallback | None = None) -> None:
        with self._errors("upload"):
            run_parallel("upload", items, self._upload_one, size_of=lambda u: u.size, jobs=jobs,
                         progress=progress, count_of=lambda u: u.blobs)

    def _upload_one(self, item: Upload) -> None:
        target = self._path(item.rel)
        if self.remote.protocol == "file":
            # A local remote gets the same temp-file-and-rename as a dataset, so a killed push
            # never leaves a half-written object under its final name.
            from ikdata.core.store import write_atomic

            if isinstance(item.source, bytes):
                write_atomic(Path(target), [item.source])
            else:
                with open(item.source, "rb") as stream:
                    write_atomic(Path(target), iter(lambda: stream.read(1 << 20), b""))
            return
        self._put(item)

    def _put(self, item: Upload) -> None:
        """Send one object to a remote other than a local folder."""
        target = self._path(item.rel)
        if isinstance(item.source, bytes):
            self.fs.pipe_file(target, item.source)
        else:
            self.fs.put_file(str(item.source), target)

    def fetch(self, rel: str, dest: Path) -> None:
        with self._errors(f"download {rel}"):
            self.fs.get_file(self._path(rel), str(dest))

    def read(self, rel: str, *, start: int | None = None, end: int | None = None) -> bytes:
        with self._errors(f"read {rel}"):
            return self.fs.cat_file(self._path(rel), start=start, end=end)

    def publish_manifest(self, data: bytes, base: ManifestState) -> None:
        with self._errors("write the manifest"), self._publish_lock():
            current = self.read_manifest()
            if current.token != base.token:
                raise PublishConflict("the remote manifest changed while pushing", url=self.url)
            if self.remote.protocol == "file":
                from ikdata.core.store import write_atomic

                write_atomic(Path(self._path(MANIFEST)), [data])
            else:
                self.fs.pipe_file(self._path(MANIFEST), data)

    @contextlib.contextmanager
    def _publish_lock(self) -> Iterator[None]:
        if self.remote.protocol == "file":
            # flock: released by the kernel if the pusher dies, so a killed push never wedges the remote.
            os.makedirs(self.root, exist_ok=True)
            fd = os.open(os.path.join(self.root, ".ikdata-publish.lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)
        elif self.remote.protocol == "memory":
            with _MEMORY_PUBLISH:
                yield
        else:  # other fsspec filesystems offer no conditional write: check-then-put, documented as such
            yield


def parse_remote_manifest(backend: Backend, data: bytes) -> dict[str, Any]:
    """The remote manifest, checked against its schema and the path rule: a remote is untrusted input.

    Its ``files`` map may name only record files (definitions, rows, receipts, reports; see
    :func:`ikdata.core.paths.record_path_refusal`): nothing absolute, with ``..`` or a backslash,
    not normalised, naming a folder of other listed files, or naming ikdata's own state (an import
    journal would be rolled forward by the next ``repair``).

    Raises:
        RemoteError: it is not JSON, breaks the manifest schema, or lists a path that is not a record file.
    """
    try:
        manifest = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise backend.fail(f"{MANIFEST} is not valid JSON ({exc}); the remote is damaged") from exc
    problems = schema.check("manifest", manifest, path=MANIFEST)
    if problems:
        raise backend.fail(f"{MANIFEST} breaks manifest.schema.json: {problems[0]}")
    files = manifest["files"]
    refused = [r.reason for r in map(record_path_refusal, sorted(files)) if r is not None]
    folders = {path.rsplit("/", i)[0] for path in files for i in range(1, path.count("/") + 1)}
    refused += [f"path {path!r} is also the folder of other listed files" for path in sorted(files) if path in folders]
    if refused:
        shown = "; ".join(refused[:5]) + (f"; ... and {len(refused) - 5} more" if len(refused) > 5 else "")
        raise backend.fail(f"{MANIFEST} lists {len(refused)} path(s) that are not record files of a dataset, "
                           f"so nothing was fetched: {shown}. The remote is damaged or hostile; do not use it")
    return manifest


__all__ = ["Backend", "FsspecBackend", "ManifestState", "PublishConflict", "Relied", "RemoteCheck", "file_object",
           "local_chunks", "local_hash", "local_size", "marker_bytes", "MANIFEST", "parse_remote_manifest",
           "BLOB_PREFIX", "FILES_PREFIX", "REMOTE_MARKER"]
