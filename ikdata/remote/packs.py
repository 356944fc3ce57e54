"""Packs on remotes: which packs a remote holds, what is in them, and fetching their members verified.

A remote keeps packs where a dataset does (``blob/packs/<pack-digest>.safetensors`` and its
``.index.json``, see :mod:`ikdata.core.packs`); the index, written after its pack, publishes it.
What a remote pack holds is read from its index as that remote serves it: one GET, spared only when
the remote's own listing (S3 ETag, Hub content id) shows that the local dataset's copy of that index,
or this remote's entry in the per-user cache (:class:`IndexCache`), holds its very bytes. A cache
is a hint, never evidence: keyed by the remote and checked against it, one remote's entries never
answer for another. An index is untrusted input like every remote object: it is checked against its schema and the pack's listed size, and every member fetched
through it is rehashed against its digest before it lands, so a lying index costs a refusal,
never a wrong tensor.

Members are fetched as the whole pack (one request) when at least half of its bytes are wanted,
else as byte ranges (S3 ranged GET, the Hub's ``Range``, fsspec ``cat_file(start, end)``), members
closer than :data:`RANGE_GAP` joined into one range. Fetched members land packed (the whole pack
with its index, or a new local pack of the ranges), or loose where the caller wants files.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import orjson

from ikdata.core.cache_dir import user_cache_dir
from ikdata.core.digest import tensor_digest
from ikdata.core.faults import checkpoint
from ikdata.core.packs import (INDEX_SUFFIX, PACK_DIR, PACK_SUFFIX, PackedBlob, PackError, PackItem, index_blobs, index_from_pack,
                               parse_index)
from ikdata.core.safetensors_format import encode_header
from ikdata.core.store import blob_path, make_temp, write_atomic
from ikdata.remote.backend import Backend
from ikdata.remote.transfer import DEFAULT_JOBS, run_parallel

PACKS_PREFIX = PACK_DIR + "/"
RANGE_GAP = 1 << 20  # members closer than this are read in one range: a few extra bytes cost less than a request
RANGE_MAX = 64 << 20  # the most bytes one range request asks for
WHOLE_FRACTION = 0.5  # at least this share of a pack's bytes wanted: fetch the whole pack


CACHE_FORMAT = "ikdata-remote-index-cache/1"
_PACK_NAME = _HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32, _HEX40 = re.compile(r"[0-9a-f]{32}"), re.compile(r"[0-9a-f]{40}")


class IndexCache:
    """Pack indexes a remote served before: a hint that spares a GET, never evidence of what a remote holds.

    Entries live per remote (``pack-indexes/<sha256 of the remote's identity>/<pack>.index.json``) and
    record the remote and the index path they came from with the index's exact bytes. An entry is used
    only when it is this remote's and the remote's own listing says it still serves exactly those bytes
    (the S3 ETag, the Hub's content id: :meth:`Backend.listed_checksum_matches`); where the listing gives no
    checksum (folders, memory) the index is read from the remote. A damaged or foreign entry is named in
    :attr:`ignored` and ignored.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self.root = (folder or user_cache_dir()) / "pack-indexes"
        self.ignored: dict[str, str] = {}  # cache entry path -> why it was not used

    def _entry(self, backend: Backend, rel: str) -> Path | None:
        stem = os.path.basename(rel)[:-len(INDEX_SUFFIX)] if rel.endswith(INDEX_SUFFIX) else ""
        if not _PACK_NAME.fullmatch(stem):
            return None  # only indexes of packs named by their sha256 are cached
        remote = hashlib.sha256(backend.identity.encode()).hexdigest()[:32]
        return self.root / remote / f"{stem}{INDEX_SUFFIX}"

    def get(self, backend: Backend, rel: str, size: int | None) -> tuple[dict, bytes] | None:
        """The cached index of ``rel`` on this remote, when the remote's listing (``size``, its checksum)
        says it serves these very bytes; else None (and a damaged or foreign entry named in :attr:`ignored`)."""
        entry = self._entry(backend, rel)
        if entry is None:
            return None
        try:
            raw = entry.read_bytes()
        except OSError:
            return None
        try:
            record = orjson.loads(raw)
            if not (isinstance(record, dict) and record.get("format") == CACHE_FORMAT
                    and isinstance(record.get("remote"), str) and isinstance(record.get("index"), str)
                    and isinstance(record.get("data"), str)):
                raise ValueError("not a cache entry of this ikdata")
            data = record["data"].encode()
            if hashlib.sha256(data).hexdigest() != record.get("sha256"):
                raise ValueError("its bytes do not hash to the sha256 it records (damaged)")
        except (orjson.JSONDecodeError, ValueError, UnicodeError) as exc:
            self.ignored[str(entry)] = f"damaged cache entry, ignored: {exc}"
            return None
        if record["remote"] != backend.identity or record["index"] != rel:
            self.ignored[str(entry)] = (f"foreign cache entry, ignored: it is {record['index']} of "
                                        f"{record['remote']}, not {rel} of {backend.identity}")
            return None
        if size != len(data) or backend.listed_checksum_matches(rel, data) is not True:
            return None  # the remote serves other bytes now, or its listing cannot tell: read it
        try:
            return parse_index(data, rel), data
        except PackError as exc:
            self.ignored[str(entry)] = f"damaged cache entry, ignored: {exc}"
            return None

    def put(self, backend: Backend, rel: str, data: bytes) -> None:
        """Remember the index bytes this remote served (or was sent) for ``rel``; an unwritable cache only costs
        a request next time."""
        entry = self._entry(backend, rel)
        if entry is None:
            return
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return
        record = {"format": CACHE_FORMAT, "remote": backend.identity, "index": rel,
                  "sha256": hashlib.sha256(data).hexdigest(), "data": text}
        try:
            write_atomic(entry, [orjson.dumps(record)])
            checkpoint("index-cache-written")
        except Exception:  # an unwritable cache only costs a request next time
            pass


class ChecksumCache:
    """Transport checksums of objects named by the sha256 of their bytes (packs): the MD5 (S3's ETag of a
    one-PUT object) and the git blob id (the Hub's id of a regular file). Facts about the bytes, so a
    listing can be checked against them without reading a local copy (push does not keep the packs it
    builds). Only push writes them, computed here from the bytes of a pack it built (whose name is their
    sha256); no remote's word ever enters, so they hold for every remote. They decide nothing alone: a
    remote object is taken as that pack only when the remote's own listing shows the same checksum.
    Lines that are torn or not three hex checksums are skipped."""

    _lock = threading.Lock()

    def __init__(self, folder: Path | None = None) -> None:
        self.path = (folder or user_cache_dir()) / "object-checksums.jsonl"
        self.known: dict[str, tuple[str, str]] = {}
        self._new: list[tuple[str, str, str]] = []
        try:
            for line in self.path.read_bytes().splitlines():
                try:
                    sha256, md5, git = orjson.loads(line)
                except (orjson.JSONDecodeError, ValueError, TypeError):
                    continue
                if _HEX64.fullmatch(str(sha256)) and _HEX32.fullmatch(str(md5)) and _HEX40.fullmatch(str(git)):
                    self.known[sha256] = (md5, git)  # a torn or foreign line is skipped
        except OSError:
            pass

    def md5(self, sha256: str) -> str | None:
        return self.known.get(sha256, (None, None))[0]

    def git_blob_id(self, sha256: str) -> str | None:
        return self.known.get(sha256, (None, None))[1]

    def note(self, sha256: str, md5: str, git: str) -> None:
        if self.known.get(sha256) != (md5, git):
            self.known[sha256] = (md5, git)
            self._new.append((sha256, md5, git))

    def flush(self) -> None:
        new, self._new = self._new, []
        if not new:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock, open(self.path, "ab") as stream:
                stream.write(b"".join(orjson.dumps(list(pair)) + b"\n" for pair in new))
            checkpoint("checksum-cache-written")
        except OSError:
            pass


def hashes_of(path: Path) -> tuple[str, str, str]:
    """(sha256, md5, git blob id) of a file's bytes, one read: the sha256 checks a content-named object, the
    others are what S3 and the Hub list for it (:class:`ChecksumCache`)."""
    sha256, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    git = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            sha256.update(chunk)
            md5.update(chunk)
            git.update(chunk)
    return sha256.hexdigest(), md5.hexdigest(), git.hexdigest()


@dataclass(frozen=True)
class RemotePack:
    """A published pack on a remote: its digest, object paths, listed size and members (offsets absolute)."""

    digest: str
    pack: str
    index: str
    size: int
    members: tuple[PackedBlob, ...]
    index_data: bytes


@dataclass
class RemotePacks:
    """The packs a remote listing shows: the sound ones, the members they hold, and the damaged ones (why)."""

    packs: dict[str, RemotePack] = field(default_factory=dict)
    members: dict[str, RemotePack] = field(default_factory=dict)  # tensor digest -> the first pack holding it
    damaged: dict[str, str] = field(default_factory=dict)  # pack or index path -> why it cannot be used
    ignored: dict[str, str] = field(default_factory=dict)  # local cache entry -> why it was not used

    def drop(self, digest: str, why: str) -> None:
        """Stop relying on a pack (a check found its bytes wrong)."""
        pack = self.packs.pop(digest, None)
        if pack is None:
            return
        self.damaged[pack.pack] = why
        self.members = {d: p for d, p in self.members.items() if p.digest != digest}
        for member in pack.members:
            if member.digest not in self.members:
                for other in self.packs.values():
                    if any(m.digest == member.digest for m in other.members):
                        self.members[member.digest] = other
                        break


def find_remote_packs(backend: Backend, listed: dict[str, int], *, local_root: Path | None = None,
                      cache: IndexCache | None = None, jobs: int = DEFAULT_JOBS) -> RemotePacks:
    """The packs a listing (``{path: size}`` of the remote) shows, each index as the remote itself serves it,
    checked against its schema and against the listed size of its pack.

    An index is read from the remote unless the remote's listing (size and checksum) confirms that a copy at
    hand holds its very bytes: the local dataset's copy of that pack's index, else this remote's cache entry
    (:class:`IndexCache`). A copy is never taken on its name alone: what the remote holds decides.
    """
    cache = cache or IndexCache()
    found = RemotePacks()
    indexes = sorted(rel for rel in listed if rel.startswith(PACKS_PREFIX) and rel.endswith(INDEX_SUFFIX)
                     and "/" not in rel[len(PACKS_PREFIX):])
    documents: dict[str, tuple[dict, bytes] | str] = {}
    fetch = []
    for rel in indexes:
        local = local_root / rel if local_root is not None else None
        if local is not None and local.is_file() and not local.is_symlink():
            try:
                data = local.read_bytes()
                if len(data) == listed[rel] and backend.listed_checksum_matches(rel, data) is True:
                    documents[rel] = (parse_index(data, rel), data)
                    continue
            except (OSError, PackError):
                pass
        got = cache.get(backend, rel, listed[rel])
        if got is not None:
            documents[rel] = got
            continue
        fetch.append(rel)

    def read(rel: str) -> tuple[dict, bytes] | str:
        try:
            data = backend.read(rel)
            document = parse_index(data, rel, repair="push the dataset again from a complete copy")
        except PackError as exc:
            return str(exc).split(": ", 1)[-1]
        except Exception as exc:  # a remote error reading it: the pack is not relied on
            return str(exc)
        if backend.listed_checksum_matches(rel, data) is True:  # only what a later listing can confirm is kept
            cache.put(backend, rel, data)
        return document, data

    for rel, got in zip(fetch, run_parallel("download", fetch, read, size_of=lambda _: 0, jobs=jobs)):
        documents[rel] = got
    for rel in indexes:
        got = documents[rel]
        stem = os.path.basename(rel)[:-len(INDEX_SUFFIX)]
        pack = f"{PACK_DIR}/{stem}{PACK_SUFFIX}"
        if isinstance(got, str):
            found.damaged[rel] = got
            continue
        document, data = got
        if pack not in listed:
            found.damaged[rel] = f"its pack {pack} is missing on the remote"
            continue
        if listed[pack] != document["bytes"]:
            found.damaged[pack] = (f"is {listed[pack]} bytes on the remote, but its index says {document['bytes']}: "
                                   "truncated or replaced")
            continue
        members = tuple(index_blobs(document, rel))
        remote = RemotePack(stem, pack, rel, listed[pack], members, data)
        found.packs[stem] = remote
        for member in members:
            found.members.setdefault(member.digest, remote)
    found.ignored.update(cache.ignored)
    return found


@dataclass
class Landed:
    """What fetching members of remote packs did: digests landed (with their loose size), bytes fetched,
    requests made, and the wanted members refused (blob path -> why)."""

    landed: dict[str, int] = field(default_factory=dict)
    nbytes: int = 0
    requests: int = 0
    refused: dict[str, str] = field(default_factory=dict)

    def merge(self, other: "Landed") -> "Landed":
        self.landed.update(other.landed)
        self.nbytes += other.nbytes
        self.requests += other.requests
        self.refused.update(other.refused)
        return self


def plan_ranges(members: Iterable[PackedBlob], *, gap: int | None = None,
                most: int | None = None) -> list[list[PackedBlob]]:
    """Members grouped into byte ranges to read: in offset order, a member joins the previous range when the
    gap between them is at most ``gap`` (:data:`RANGE_GAP`) and the range stays within ``most`` bytes
    (:data:`RANGE_MAX`)."""
    gap = RANGE_GAP if gap is None else gap
    most = RANGE_MAX if most is None else most
    groups: list[list[PackedBlob]] = []
    for member in sorted(members, key=lambda m: m.offset):
        if groups:
            last = groups[-1]
            start, end = last[0].offset, last[-1].offset + last[-1].length
            if member.offset - end <= gap and member.offset + member.length - start <= most:
                last.append(member)
                continue
        groups.append([member])
    return groups


def fetch_members(backend: Backend, remote: RemotePack, wanted: Iterable[str], target: Path, *, packed: bool = True,
                  jobs: int = DEFAULT_JOBS) -> Landed:
    """Bring the ``wanted`` members of one remote pack into the dataset folder ``target``, each rehashed
    against its digest first.

    ``packed``: keep them in packs (the whole pack with the index its own header gives, or a new local
    pack of the members read by range); else write each as its canonical loose blob.
    """
    by_digest = {m.digest: m for m in remote.members}
    members = [by_digest[d] for d in dict.fromkeys(wanted) if d in by_digest]
    if not members:
        return Landed()
    if sum(m.length for m in members) >= WHOLE_FRACTION * remote.size:
        return _fetch_whole(backend, remote, members, target, packed)
    groups = plan_ranges(members)

    def one(group: list[PackedBlob]) -> tuple[list[PackItem], dict[str, str], int]:
        start, end = group[0].offset, group[-1].offset + group[-1].length
        data = backend.read(remote.pack, start=start, end=end)
        view = memoryview(data)
        good, bad = [], {}
        for member in group:
            piece = view[member.offset - start:member.offset - start + member.length]
            if len(piece) != member.length:
                bad[blob_path(member.digest)] = (f"in {remote.pack}: the remote pack ends before its bytes "
                                                 f"{member.offset}..{member.offset + member.length} (truncated)")
                continue
            found = tensor_digest(member.dtype, member.shape, piece)
            if found != member.digest:
                bad[blob_path(member.digest)] = f"in {remote.pack}: its bytes hash to {found}"
                continue
            good.append(PackItem(member.digest, member.dtype, member.shape, bytes(piece)))
        return good, bad, len(data)

    result = Landed()
    items: list[PackItem] = []
    for good, bad, nbytes in run_parallel("download", groups, one, size_of=lambda g: 0, jobs=jobs):
        items += good
        result.refused.update(bad)
        result.nbytes += nbytes
        result.requests += 1
    _land(target, items, packed)
    result.landed.update({i.digest: by_digest[i.digest].loose_size for i in items})
    return result


def _fetch_whole(backend: Backend, remote: RemotePack, members: list[PackedBlob], target: Path,
                 packed: bool) -> Landed:
    """The whole pack in one request: kept as a pack when its bytes hash to its name and every member it
    holds verifies (its index rebuilt from its own header), else only the verified wanted members, loose."""
    folder = target / PACK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp(folder)
    os.close(fd)
    result = Landed(requests=1)
    try:
        backend.fetch(remote.pack, Path(tmp))
        result.nbytes = os.path.getsize(tmp)
        sha256 = hashes_of(Path(tmp))[0]
        try:
            own = index_blobs(index_from_pack(tmp), remote.index)
        except PackError as exc:
            why = str(exc).split(": ", 1)[-1]
            result.refused.update({blob_path(m.digest): f"in {remote.pack}: {why}" for m in members})
            return result
        held = {m.digest: m for m in own}
        bad = {}
        with open(tmp, "rb") as stream:
            data = stream.read()
        view = memoryview(data)
        for member in own:
            found = tensor_digest(member.dtype, member.shape, view[member.offset:member.offset + member.length])
            if found != member.digest:
                bad[member.digest] = f"in {remote.pack}: its bytes hash to {found}"
        for member in members:
            if member.digest not in held:
                bad[member.digest] = f"in {remote.pack}: the pack does not hold it, although its index says so"
            elif (held[member.digest].offset, held[member.digest].length) != (member.offset, member.length):
                pass  # the index was wrong about where; the pack's own header is what counts, and it verified
        result.refused.update({blob_path(d): why for d, why in bad.items() if d in {m.digest for m in members}})
        if packed and not bad and sha256 == remote.digest:
            with open(tmp, "rb+") as stream:
                os.fsync(stream.fileno())
            os.replace(tmp, target / remote.pack)
            tmp = ""
            document = index_from_pack(target / remote.pack)
            write_atomic(target / remote.index, [orjson.dumps(document) + b"\n"])
            result.landed.update({m.digest: m.loose_size for m in own})
            return result
        items = [PackItem(m.digest, m.dtype, m.shape, bytes(view[held[m.digest].offset:
                                                                 held[m.digest].offset + held[m.digest].length]))
                 for m in members if m.digest in held and m.digest not in bad]
        view.release()
        _land(target, items, packed=False)
        result.landed.update({i.digest: held[i.digest].loose_size for i in items})
        return result
    finally:
        if tmp:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def _land(target: Path, items: list[PackItem], packed: bool) -> None:
    """Write verified members into ``target``: one new pack (then its index), or each as its loose blob."""
    if not items:
        return
    if packed:
        from ikdata.core.pack_writer import write_pack

        write_pack(target, items)
        return
    for item in items:
        write_atomic(target / blob_path(item.digest), [encode_header(item.dtype, item.shape, len(item.data)),
                                                       item.data])


def build_packs(items: list[PackItem], *,
                pack_bytes: int) -> tuple[tempfile.TemporaryDirectory, list[tuple[str, str]], list[int]]:
    """Packs of ``items`` (verified tensors) in a temporary dataset folder, about ``pack_bytes`` each; returns the
    folder (remove it when sent), each pack's (pack path, index path), relative to it, and its member count."""
    from ikdata.core.pack_writer import write_pack

    holder = tempfile.TemporaryDirectory(prefix="ikdata-push-packs-")
    root = Path(holder.name)
    written, counts, batch, size = [], [], [], 0
    for item in sorted(items, key=lambda i: i.digest):
        batch.append(item)
        size += len(item.data)
        if size >= pack_bytes:
            written.append(write_pack(root, batch))
            counts.append(len(batch))
            batch, size = [], 0
    if batch:
        written.append(write_pack(root, batch))
        counts.append(len(batch))
    return holder, written, counts


def pack_digest(rel: str) -> str:
    """The digest a pack or index path is named by."""
    name = os.path.basename(rel)
    return name[:-len(INDEX_SUFFIX)] if name.endswith(INDEX_SUFFIX) else name[:-len(PACK_SUFFIX)]


def loose_placeholder(member: PackedBlob) -> bytes:
    """The canonical header of a packed member's loose blob (the read-only views' ``headers`` mode)."""
    return encode_header(member.dtype, member.shape, member.length)


__all__ = ["ChecksumCache", "IndexCache", "Landed", "PACKS_PREFIX", "RANGE_GAP", "RemotePack", "RemotePacks",
           "build_packs", "fetch_members", "find_remote_packs", "hashes_of", "loose_placeholder",
           "pack_digest", "plan_ranges"]
