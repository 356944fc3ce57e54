"""Packs: many small blobs in one safetensors file, found by digest through an index beside it.

A pack is ``blob/packs/<pack-digest>.safetensors`` (sha256 of its bytes), a valid safetensors
file whose tensor keys are the tensors' digests, in digest order. Beside it,
``<pack-digest>.index.json`` (``schemas/pack-index.schema.json``) says where each tensor's
data lies: digest -> dtype, shape, offset, length. The index is derived from the pack's
header (``ikdata repair`` rebuilds it) and its presence publishes the pack: a pack with no
index is unfinished and ``gc`` removes it. A tensor's digest is the same loose or packed,
and descriptors keep naming the loose path ``blob/sha256/xx/<digest>.safetensors``: a reader
that does not find the loose file looks the digest up here (nothing outside the dataset).
"""

from __future__ import annotations

import functools
import hashlib
import json
import mmap
import os
import re
import stat
import struct
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ikdata.core import schema
from ikdata.core.digest import parts_digest, tensor_digest, tensor_prefix
from ikdata.core.errors import BlobCorrupted, StoreError
from ikdata.core.paths import PathResolver
from ikdata.core.problems import Problem
from ikdata.core.safetensors_format import (
    BITS_BY_CODE,
    DTYPES,
    MAX_HEADER_BYTES,
    TORCH_NAME_BY_CODE,
    FormatError,
    TensorEntry,
    canonical_problem,
    encode_header,
    parse_header,
)

PACK_DIR = "blob/packs"
INDEX_SUFFIX = ".index.json"
PACK_SUFFIX = ".safetensors"
INDEX_FORMAT = "ikdata-pack-index/1"
DEFAULT_THRESHOLD = 1 << 20  # blobs below this many bytes (file size) are packed
DEFAULT_PACK_BYTES = 64 << 20  # a pack holds about this many bytes of tensors


class PackError(StoreError):
    """A pack or pack index that is not what it should be (the message names the file)."""


@dataclass(frozen=True, slots=True)
class PackedBlob:
    """Where one tensor lies in a pack: its digest, the pack and index (dataset-relative), its dtype
    and shape, and the absolute byte range of its data in the pack."""

    digest: str
    pack: str
    index: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    length: int

    @property
    def loose_size(self) -> int:
        """The size the canonical loose blob of this tensor has (what the manifest's blob set counts)."""
        return _header_size(self.dtype, self.shape, self.length) + self.length

    def loose_bytes(self, data: Any) -> list[Any]:
        """The chunks of the canonical loose blob, given this tensor's data."""
        return [encode_header(self.dtype, self.shape, self.length), data]


@functools.lru_cache(maxsize=4096)
def _header_size(dtype: str, shape: tuple[int, ...], length: int) -> int:
    return len(encode_header(dtype, shape, length))


@functools.lru_cache(maxsize=4096)
def _prefix(dtype: str, shape: tuple[int, ...]) -> bytes:
    return tensor_prefix(dtype, shape)


def pack_dir(root: str | os.PathLike) -> Path:
    return Path(root) / PACK_DIR


def index_name(pack_digest: str) -> str:
    return f"{PACK_DIR}/{pack_digest}{INDEX_SUFFIX}"


def pack_name(pack_digest: str) -> str:
    return f"{PACK_DIR}/{pack_digest}{PACK_SUFFIX}"


# -- writing ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackItem:
    """One tensor to pack: digest, torch dtype name, shape, raw bytes."""

    digest: str
    dtype: str
    shape: tuple[int, ...]
    data: Any


def encode_pack(items: Iterable[PackItem]) -> tuple[bytes, list[PackItem], dict[str, dict]]:
    """The header of a pack holding ``items`` (sorted by digest, one per digest), the items in data
    order, and the index's ``tensors`` table (absolute offsets)."""
    ordered = sorted({i.digest: i for i in items}.values(), key=lambda i: i.digest)
    header: dict[str, Any] = {}
    start = 0
    for item in ordered:
        n = memoryview(item.data).nbytes
        header[item.digest] = {"dtype": DTYPES[item.dtype][0], "shape": list(item.shape),
                               "data_offsets": [start, start + n]}
        start += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    head = struct.pack("<Q", len(text)) + text
    base = len(head)
    tensors = {i.digest: {"dtype": i.dtype, "shape": list(i.shape), "offset": base + h["data_offsets"][0],
                          "length": h["data_offsets"][1] - h["data_offsets"][0]}
               for i, h in zip(ordered, header.values())}
    return head, ordered, tensors


def index_from_pack(path: str | os.PathLike) -> dict[str, Any]:
    """The index document a pack's own header gives (what ``repair`` writes for a bad index).

    Raises:
        PackError: the pack is not a readable safetensors file, or a key is not a digest.
    """
    path = Path(path)
    entries = _pack_entries(path)
    bad = [e.key for e in entries if not _is_digest(e.key)]
    if bad:
        raise PackError(f"{path}: tensor key {bad[0]!r} is not a digest; not an ikdata pack", path=str(path))
    return {"format": INDEX_FORMAT, "pack": path.name, "bytes": path.stat().st_size,
            "tensors": {e.key: {"dtype": e.dtype, "shape": list(e.shape), "offset": e.start, "length": e.nbytes}
                        for e in sorted(entries, key=lambda e: e.key)}}


_NUMBER = rb"(?:0|[1-9][0-9]{0,18})"
_PACK_ENTRY = (rb'"[0-9a-f]{64}":\{"dtype":"[A-Z0-9_]{1,16}","shape":\[(?:N(?:,N)*)?\],"data_offsets":\[N,N\]\}'
               .replace(b"N", _NUMBER))
_PACK_HEADER = re.compile(rb"\{(?:E(?:,E)*)?\} *".replace(b"E", _PACK_ENTRY))


def _pack_entries(path: Path) -> list[TensorEntry]:
    """The tensors of a pack, checked as strictly as safetensors checks them. A header in the form
    ikdata writes (digest keys in increasing order, compact JSON) is read by one regular expression
    and orjson; any other goes through the full parser of :mod:`ikdata.core.safetensors_format`."""
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            head = stream.read(8)
            if len(head) == 8:
                head += stream.read(min(int.from_bytes(head, "little"), size))
        fast = _fast_pack_header(head, size)
        return fast if fast is not None else parse_header(head, size)
    except FormatError as exc:
        raise PackError(f"{path}: not a readable pack: {exc}", path=str(path)) from exc
    except OSError as exc:
        raise PackError(f"{path}: cannot read: {exc.strerror or exc}", path=str(path)) from exc


def _fast_pack_header(head: bytes, size: int) -> list[TensorEntry] | None:
    """Entries of a header in ikdata's own pack form, or None to send it to the full parser (which
    also gives the precise error for anything wrong)."""
    if len(head) < 8:
        return None
    length = int.from_bytes(head[:8], "little")
    if length > MAX_HEADER_BYTES or 8 + length > size or len(head) < 8 + length:
        return None
    raw = head[8:8 + length]
    if _PACK_HEADER.fullmatch(raw) is None:
        return None
    entries, position, previous = [], 0, ""
    base = 8 + length
    for key, spec in orjson.loads(raw).items():
        code, shape, (start, end) = spec["dtype"], tuple(spec["shape"]), spec["data_offsets"]
        bits, name = BITS_BY_CODE.get(code), TORCH_NAME_BY_CODE.get(code)
        count = 1
        for n in shape:
            count *= n
        if key <= previous or bits is None or name is None or start != position or (count * bits) % 8 \
                or end - start != count * bits // 8:
            return None  # duplicate or unordered keys, unknown dtype, gap, overlap or wrong size: be precise
        entries.append(TensorEntry(key, name, shape, base + start, base + end))
        position, previous = end, key
    if base + position != size:
        return None
    return entries


def _is_digest(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


# -- reading the indexes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PackSet:
    """Every published pack of a dataset: digest -> where it lies, and the index files that could
    not be used (as problems naming them). The first index (in name order) that names a digest wins."""

    blobs: dict[str, PackedBlob]
    listed: dict[str, tuple[PackedBlob, ...]]  # readable index file -> every tensor it lists
    orphans: tuple[str, ...]  # pack files with no index (unpublished: gc removes them)
    problems: tuple[Problem, ...]

    def find(self, digest: str) -> PackedBlob | None:
        return self.blobs.get(digest)

    @property
    def indexes(self) -> tuple[str, ...]:
        return tuple(self.listed)


def load_packs(root: str | os.PathLike) -> PackSet:
    """Read every index under ``blob/packs/`` (no pack is read). Bad index files become problems."""
    root = Path(root)
    folder = root / PACK_DIR
    blobs: dict[str, PackedBlob] = {}
    listed: dict[str, tuple[PackedBlob, ...]] = {}
    problems = []
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return PackSet({}, {}, (), ())
    refusal = PathResolver(root).refusal(PACK_DIR)  # DESIGN.md contract 3: nothing outside the dataset is read
    if refusal is not None:
        return PackSet({}, {}, (), (Problem(PACK_DIR, f"{refusal.reason}; no pack there is read: replace it with "
                                            "the folder itself", code="unsafe-path"),))
    links = [n for n in names if os.path.islink(folder / n)]
    for name in links:
        problems.append(Problem(f"{PACK_DIR}/{name}", "is a link; packs and their indexes are read only as regular "
                                "files inside the dataset: replace it with the file itself", code="unsafe-path"))
    names = [n for n in names if n not in links]
    packs = {n for n in names if n.endswith(PACK_SUFFIX) and not n.startswith(".tmp-")}
    published = set()
    for name in names:
        if not name.endswith(INDEX_SUFFIX) or name.startswith(".tmp-"):
            continue
        rel = f"{PACK_DIR}/{name}"
        try:
            found = read_index(root, rel)
        except PackError as exc:
            problems.append(Problem(rel, str(exc).split(": ", 1)[-1], code="bad-pack-index"))
            continue
        published.add(name[:-len(INDEX_SUFFIX)] + PACK_SUFFIX)
        listed[rel] = tuple(found)
        for blob in found:
            blobs.setdefault(blob.digest, blob)
    orphans = tuple(f"{PACK_DIR}/{n}" for n in sorted(packs - published))
    return PackSet(blobs, listed, orphans, tuple(problems))


def read_index(root: Path, rel: str) -> list[PackedBlob]:
    """The tensors one index file lists.

    Raises:
        PackError: the file is not JSON, breaks its schema, names another pack than its own name
            says, or its pack is missing.
    """
    path = root / rel
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PackError(f"{rel}: cannot read: {exc.strerror or exc}", path=rel) from exc
    document = parse_index(data, rel)
    pack = f"{PACK_DIR}/{document['pack']}"
    if os.path.islink(root / pack):
        raise PackError(f"{rel}: its pack {pack} is a link; packs are read only as regular files inside the dataset",
                        path=rel)
    if not (root / pack).is_file():
        raise PackError(f"{rel}: its pack {pack} is missing: the {len(document['tensors'])} tensor(s) it lists are "
                        "lost unless stored loose; restore the pack from where the dataset came from", path=rel)
    return index_blobs(document, rel)


def parse_index(data: bytes, rel: str, *, repair: str = "run 'ikdata repair' to rebuild it from its pack") -> dict:
    """An index document from its bytes, checked: JSON, its schema, named after the pack it names,
    dtypes ikdata stores (a remote's index goes through the same check; ``repair`` is the advice).

    Raises:
        PackError: naming ``rel`` and what is wrong.
    """
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise PackError(f"{rel}: not a pack index: malformed JSON ({exc}); {repair}", path=rel) from exc
    if not schema.is_valid("pack-index", document):
        found = schema.check("pack-index", document, path=rel)
        detail = "; ".join(f"{p.pointer or '/'} {p.message}" for p in found[:3])
        raise PackError(f"{rel}: not a pack index: {detail}; {repair}", path=rel)
    stem = os.path.basename(rel)[:-len(INDEX_SUFFIX)]
    if document["pack"] != stem + PACK_SUFFIX:
        raise PackError(f"{rel}: names pack {document['pack']}, but an index is named after its pack "
                        f"({stem}{PACK_SUFFIX}); {repair}", path=rel)
    for digest, t in document["tensors"].items():
        if t["dtype"] not in DTYPES:
            raise PackError(f"{rel}: tensor {digest} has dtype {t['dtype']}, which ikdata does not store", path=rel)
    return document


def index_blobs(document: dict, rel: str) -> list[PackedBlob]:
    """The tensors a checked index document (:func:`parse_index`) lists, as :class:`PackedBlob`."""
    pack = f"{PACK_DIR}/{document['pack']}"
    shapes: dict[tuple, tuple] = {}  # one tuple per distinct shape, one string per dtype: a million entries stay small
    return [PackedBlob(d, pack, rel, sys.intern(t["dtype"]), shapes.setdefault(tuple(t["shape"]), tuple(t["shape"])),
                       t["offset"], t["length"]) for d, t in document["tensors"].items()]


_CACHE: dict[str, tuple[tuple, PackSet]] = {}
_CACHE_LOCK = threading.Lock()


def cached_packs(root: str | os.PathLike) -> PackSet:
    """:func:`load_packs`, reused while ``blob/packs/`` (its listing and its files' sizes and times)
    stays the same: readers look digests up often, indexes change only when packs are written."""
    root = Path(root)
    folder = root / PACK_DIR
    try:
        with os.scandir(folder) as entries:
            key = tuple(sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in entries
                               if e.name.endswith(INDEX_SUFFIX)))
    except (FileNotFoundError, NotADirectoryError):
        return PackSet({}, {}, (), ())
    name = os.path.abspath(root)
    with _CACHE_LOCK:
        hit = _CACHE.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
    found = load_packs(root)
    with _CACHE_LOCK:
        _CACHE[name] = (key, found)
    return found


def has_packs(root: str | os.PathLike) -> bool:
    return (Path(root) / PACK_DIR).is_dir()


# -- reading and checking tensors -------------------------------------------------------------------


def read_packed(root: str | os.PathLike, blob: PackedBlob) -> bytearray:
    """The data of one packed tensor, verified against its digest (one ``pread``).

    Raises:
        BlobCorrupted: the index's range runs past the pack's end, or the bytes there do not hash
            to the digest (a wrong offset or length, a damaged or substituted pack); names both files.
    """
    path = Path(root) / blob.pack
    data = bytearray(blob.length)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise BlobCorrupted(f"{blob.pack}: cannot read: {exc.strerror or exc} (listed by {blob.index})",
                            path=blob.pack, digest=blob.digest) from exc
    try:
        got = os.preadv(fd, [data], blob.offset) if blob.length else 0
    finally:
        os.close(fd)
    if got != blob.length:
        raise BlobCorrupted(f"{blob.pack}: {blob.index} places tensor {blob.digest} at bytes "
                            f"{blob.offset}..{blob.offset + blob.length}, past the pack's end (truncated pack or a "
                            "wrong index); run 'ikdata repair' to rebuild the index, or restore the pack",
                            path=blob.pack, digest=blob.digest)
    found = tensor_digest(blob.dtype, blob.shape, data)
    if found != blob.digest:
        raise BlobCorrupted(f"{blob.pack}: the bytes {blob.index} points at for tensor {blob.digest} hash to {found}: "
                            "a wrong offset or length, or a damaged pack; run 'ikdata repair' to rebuild the index, "
                            "or restore the pack", path=blob.pack, digest=blob.digest)
    return data


@dataclass(frozen=True)
class PackCheck:
    """The outcome of checking one pack against its index: the digests verified, and the problems."""

    pack: str
    index: str
    verified: tuple[str, ...]
    problems: tuple[Problem, ...]


def check_pack(root: str | os.PathLike, index: str, blobs: list[PackedBlob], *, deep: bool = True,
               jobs: int = 1) -> PackCheck:
    """Check one pack: its header against its index, and (``deep``) each tensor's slice against its key
    and the pack's bytes against its name.

    One read per pack (memory-mapped); the slices are hashed on ``jobs`` threads (hashlib releases
    the GIL). A tensor is verified when the header and the index agree on it and its bytes hash
    to its digest.
    """
    root = Path(root)
    pack = blobs[0].pack if blobs else index[:-len(INDEX_SUFFIX)] + PACK_SUFFIX
    problems: list[Problem] = []
    if deep:
        misnamed = pack_name_problem(root, pack)
        if misnamed is not None:
            problems.append(misnamed)
    if blobs and _header_matches(root / pack, blobs):  # the usual case: no header parse needed
        ranges = [(b.digest, b.dtype, b.shape, b.offset, b.offset + b.length) for b in blobs]
        return _hash_ranges(root, pack, index, ranges, deep, jobs, problems)
    try:
        entries = {e.key: e for e in _pack_entries(root / pack)}
    except PackError as exc:
        return PackCheck(pack, index, (), (Problem(pack, str(exc).split(": ", 1)[-1]
                                                   + f"; the {len(blobs)} tensor(s) {index} lists are unreadable",
                                                   code="bad-pack"),))
    agreed = []
    for blob in blobs:
        entry = entries.get(blob.digest)
        if entry is None:
            problems.append(Problem(index, f"lists tensor {blob.digest}, which pack {pack} lacks; run 'ikdata repair' "
                                    "to rebuild the index from the pack", pointer=f"/tensors/{blob.digest}",
                                    code="bad-pack-index"))
        elif (entry.start, entry.nbytes, entry.dtype, tuple(entry.shape)) != (blob.offset, blob.length, blob.dtype,
                                                                               blob.shape):
            problems.append(Problem(index, f"places tensor {blob.digest} at offset {blob.offset}, length {blob.length} "
                                    f"({blob.dtype} {list(blob.shape)}), but pack {pack} holds it at offset "
                                    f"{entry.start}, length {entry.nbytes} ({entry.dtype} {list(entry.shape)}); "
                                    "run 'ikdata repair' to rebuild the index", pointer=f"/tensors/{blob.digest}",
                                    code="bad-pack-index"))
        else:
            agreed.append(entry)
    listed = {b.digest for b in blobs}
    for key in sorted(set(entries) - listed):
        problems.append(Problem(index, f"does not list tensor {key}, which pack {pack} holds; run 'ikdata repair' "
                                "to rebuild the index from the pack", pointer=f"/tensors/{key}",
                                code="bad-pack-index"))
    ranges = [(e.key, e.dtype, e.shape, e.start, e.end) for e in agreed]
    return _hash_ranges(root, pack, index, ranges, deep, jobs, problems)


def _header_matches(path: Path, blobs: list[PackedBlob]) -> bool:
    """Whether the pack's header is byte for byte the one ikdata writes for what the index lists
    (then header and index agree on every tensor, and the data covers the file exactly)."""
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            length = int.from_bytes(stream.read(8), "little")
            if length > MAX_HEADER_BYTES or 8 + length > size:
                return False
            raw = stream.read(length)
    except OSError:
        return False
    base = 8 + length
    parts, end, previous = [], 0, ""
    for blob in sorted(blobs, key=lambda b: b.digest):
        if blob.offset - base != end or blob.digest == previous:
            return False
        start, end, previous = end, end + blob.length, blob.digest
        shape = ",".join(map(str, blob.shape))
        parts.append(f'"{blob.digest}":{{"dtype":"{DTYPES[blob.dtype][0]}","shape":[{shape}],'
                     f'"data_offsets":[{start},{end}]}}')
    text = ("{" + ",".join(parts) + "}").encode()
    text += b" " * (-len(text) % 8)
    return text == raw and base + end == size


def _hash_ranges(root: Path, pack: str, index: str, ranges: list[tuple], deep: bool, jobs: int,
                 problems: list[Problem]) -> PackCheck:
    """Hash each (digest, dtype, shape, start, end) of a pack (``deep``) and name every mismatch."""
    if not deep:
        return PackCheck(pack, index, tuple(r[0] for r in ranges), tuple(problems))
    bad = set()
    if ranges:
        digests = _hash_entries(root / pack, ranges, jobs)
        for (key, *_), found in zip(ranges, digests):
            if found != key:
                bad.add(key)
                problems.append(Problem(pack, f"tensor {key} hashes to {found}: the pack is corrupt; restore it "
                                        "from where the dataset came from", code="digest-mismatch"))
    return PackCheck(pack, index, tuple(r[0] for r in ranges if r[0] not in bad), tuple(problems))


def _hash_entries(path: Path, entries: list[tuple], jobs: int) -> list[str]:
    with open(path, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        if size == 0:
            return ["" for _ in entries]
        with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                def run(group: list[tuple]) -> list[str]:
                    out = []
                    for _, dtype, shape, start, end in group:
                        h = hashlib.sha256(_prefix(dtype, shape))
                        h.update(view[start:end])
                        out.append(h.hexdigest())
                    return out

                if jobs <= 1 or len(entries) < 2:
                    return run(entries)
                from concurrent.futures import ThreadPoolExecutor

                step = max(1, len(entries) // (jobs * 4))
                groups = [entries[i:i + step] for i in range(0, len(entries), step)]
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    return [d for part in pool.map(run, groups) for d in part]
            finally:
                view.release()


def iter_packed(root: str | os.PathLike) -> Iterator[PackedBlob]:
    """Every packed tensor (first index naming a digest wins), in digest order."""
    found = cached_packs(root)
    for digest in sorted(found.blobs):
        yield found.blobs[digest]




def check_packs(root: str | os.PathLike, found: PackSet, *, deep: bool = True,
                jobs: int | None = None) -> list[PackCheck]:
    """:func:`check_pack` for every published pack, in index order. With at least as many packs as
    threads, whole packs go to the threads (one pack's header is parsed while another's tensors
    are hashed); fewer packs are each hashed on every thread."""
    jobs = jobs or os.cpu_count() or 1
    items = list(found.listed.items())
    if len(items) < jobs or jobs == 1:
        return [check_pack(root, index, list(blobs), deep=deep, jobs=jobs) for index, blobs in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda item: check_pack(root, item[0], list(item[1]), deep=deep, jobs=1), items))


def _open_regular(path: Path) -> int:
    """A read-only descriptor of a regular file, never through a link and never blocking on a FIFO.

    Raises:
        OSError: missing, a link, or not a regular file (``EINVAL`` then, with the reason as strerror).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(22, "not a regular file")
    return fd


def _chunks(fd: int, size: int = 1 << 20) -> Iterator[bytes]:
    while chunk := os.read(fd, size):
        yield chunk


def pack_name_problem(root: str | os.PathLike, pack: str) -> Problem | None:
    """Why a pack's name is not the sha256 of its bytes (read once, hashed through
    :mod:`ikdata.core.digest`), or None when it is."""
    stem = os.path.basename(pack)[:-len(PACK_SUFFIX)]
    try:
        fd = _open_regular(Path(root) / pack)
    except OSError as exc:
        return Problem(pack, f"cannot read: {exc.strerror or exc}", code="bad-pack")
    try:
        found = parts_digest(_chunks(fd))
    finally:
        os.close(fd)
    if found == stem:
        return None
    return Problem(pack, f"is named {stem}, but its bytes hash to {found}: a pack is named by the sha256 of its "
                   "bytes, so this is not the pack its name says (renamed, or changed in place); restore it from "
                   "where the dataset came from, or run 'ikdata unpack' and 'ikdata pack' to rewrite it from the "
                   "tensors that verify", code="pack-name-mismatch")


def read_loose(root: str | os.PathLike, digest: str) -> tuple[PackItem | None, str | None]:
    """The tensor of a loose blob, verified: canonical, and hashing to ``digest`` (through
    :mod:`ikdata.core.digest`). Returns (item, None), or (None, why it cannot be relied on)."""
    rel = f"blob/sha256/{digest[:2]}/{digest}.safetensors"
    try:
        fd = _open_regular(Path(root) / rel)
    except FileNotFoundError:
        return None, f"{rel} is missing"
    except OSError as exc:
        return None, f"{rel}: cannot read: {exc.strerror or exc}"
    try:
        data = b"".join(_chunks(fd))
    finally:
        os.close(fd)
    try:
        entries = parse_header(data[:8 + min(int.from_bytes(data[:8], "little"), len(data))], len(data))
    except FormatError as exc:
        return None, f"{rel}: not a readable blob: {exc}"
    reason = canonical_problem(entries)
    if reason is not None:
        return None, f"{rel}: {reason}"
    entry = entries[0]
    view = memoryview(data)[entry.start:entry.end]
    found = tensor_digest(entry.dtype, entry.shape, view)
    if found != digest:
        return None, f"{rel}: its content hashes to {found}, not its name"
    return PackItem(digest, entry.dtype, tuple(entry.shape), view), None


class PackVerifier:
    """Checks a packed copy before a command deletes another copy relying on it (pack, unpack, gc,
    repair), each check once: the index against its pack's header (an entry the pack lacks, a key
    that is not its member's), the member's bytes against its digest, the pack's bytes against its
    name. Every reason is kept, so the caller can name what it did not rely on."""

    def __init__(self, root: str | os.PathLike, found: PackSet) -> None:
        self.root = Path(root)
        self.found = found
        self._headers: dict[str, tuple[Problem, ...]] = {}
        self._names: dict[str, Problem | None] = {}
        self._members: dict[tuple[str, str], str | None] = {}

    def header(self, index: str) -> tuple[Problem, ...]:
        """The problems of an index against its pack's header (no tensor is hashed)."""
        if index not in self._headers:
            self._headers[index] = check_pack(self.root, index, list(self.found.listed.get(index, ())),
                                              deep=False).problems
        return self._headers[index]

    def name(self, pack: str) -> Problem | None:
        if pack not in self._names:
            self._names[pack] = pack_name_problem(self.root, pack)
        return self._names[pack]

    def copy(self, blob: PackedBlob) -> str | None:
        """Why this packed copy cannot be relied on, or None when it verifies."""
        key = (blob.index, blob.digest)
        if key not in self._members:
            self._members[key] = self._check(blob)
        return self._members[key]

    def _check(self, blob: PackedBlob) -> str | None:
        header = self.header(blob.index) if blob.index else ()
        if header:
            return f"{blob.index} disagrees with its pack ({header[0].message})"
        try:
            read_packed(self.root, blob)
        except BlobCorrupted as exc:
            return str(exc)
        misnamed = self.name(blob.pack)
        return f"{misnamed.path}: {misnamed.message}" if misnamed is not None else None

    def sound(self, index: str) -> bool:
        """Whether an index agrees with its pack's header (then gc may rewrite or delete the pack)."""
        return not self.header(index)


def check_packed_uses(root: str | os.PathLike, files: dict[str, Any], entries: dict[str, Any],
                      problems: list[Problem], *, deep: bool, jobs: int | None = None) -> tuple[int, int]:
    """Validate's share: check every pack against its index (``deep``: hash every tensor's slice, one
    read per pack), and give each descriptor path that is not loose on disk its packed tensor's
    entry (or, when the packed copy failed its check, the reason as a string).

    Args:
        files: descriptor path -> resolved path (None where refused); paths already in ``entries``
            (loose files) are left alone.
        entries: filled in place: path -> [TensorEntry] or an error string.
        problems: problems about packs and indexes are appended.

    Returns:
        How many packed tensors were rehashed, and how many descriptor paths were found in packs.
    """
    from ikdata.core.safetensors_format import BLOB_KEY

    root = Path(root)
    found = load_packs(root)
    problems.extend(found.problems)  # unpublished packs (a pack killed before its index) are garbage, not problems
    jobs = jobs or os.cpu_count() or 1
    verified: set[str] = set()
    failed: dict[str, str] = {}
    rehashed = packed = 0
    for result in check_packs(root, found, deep=deep, jobs=jobs):
        blobs = found.listed[result.index]
        problems.extend(result.problems)
        ok = set(result.verified)
        verified |= ok
        if deep:
            rehashed += len(blobs)
        for blob in blobs:
            if blob.digest not in ok:
                failed.setdefault(blob.digest, f"its packed copy in {blob.pack} failed its check (see {result.index})")
    for rel, path in files.items():
        if path is None or rel in entries:
            continue
        digest = rel.rsplit("/", 1)[-1].split(".", 1)[0]
        blob = found.blobs.get(digest)
        if blob is None or rel != f"blob/sha256/{digest[:2]}/{digest}.safetensors":
            continue
        packed += 1
        if digest in verified:
            start = blob.loose_size - blob.length
            entries[rel] = [TensorEntry(BLOB_KEY, blob.dtype, blob.shape, start, start + blob.length, canonical=True)]
        else:
            entries[rel] = failed.get(digest, f"its packed copy in {blob.pack} failed its check")
    return rehashed, packed

__all__ = ["DEFAULT_PACK_BYTES", "DEFAULT_THRESHOLD", "INDEX_FORMAT", "PACK_DIR", "PackCheck", "PackError",
           "PackItem", "PackSet", "PackVerifier", "PackedBlob", "cached_packs", "check_pack", "check_packed_uses",
           "check_packs", "encode_pack", "has_packs", "index_blobs", "index_from_pack", "index_name", "iter_packed",
           "load_packs", "parse_index",
           "pack_name", "pack_name_problem", "read_index", "read_loose", "read_packed"]
