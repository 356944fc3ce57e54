"""The content-addressed blob store: put, get, verify, and blob paths.

A blob is a one-tensor safetensors file at ``blob/sha256/<d[:2]>/<digest>.safetensors``,
named by the tensor digest of :mod:`ikdata.core.digest`. Writes go to a unique temp
file in the target folder, are fsynced and renamed; a digest already stored is
not written again. Verification rehashes the file itself (header and data,
memory-mapped) without torch. A FIFO, a device or a socket where a blob should be is never
opened for a read that could block (:func:`ikdata.core.paths.open_regular`), nor listed as a blob.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from ikdata.core.digest import tensor_digest, tensor_prefix
from ikdata.core.errors import BlobCorrupted, BlobNotFound, FileSystemError, StoreError
from ikdata.core.paths import open_regular, temp_prefix
from ikdata.core.records import TensorRef
from ikdata.core.safetensors_format import (BLOB_KEY, DTYPES, MAX_HEADER_BYTES, FormatError, TensorEntry,
                                       encode_header, parse_header)

BLOB_DIR = "blob"
DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
_HEADER_READ = 4096  # one read covers the header of every blob ikdata writes
_MMAP_FROM = 1 << 20  # files above this are hashed through mmap, smaller ones read whole

_NUMPY_TO_TORCH = {
    "float64": "torch.float64", "float32": "torch.float32", "float16": "torch.float16",
    "int64": "torch.int64", "int32": "torch.int32", "int16": "torch.int16", "int8": "torch.int8",
    "uint8": "torch.uint8", "uint16": "torch.uint16", "uint32": "torch.uint32",
    "uint64": "torch.uint64", "bool": "torch.bool", "complex64": "torch.complex64",
}


def blob_path(digest: str) -> str:
    """The dataset-relative path of the blob with this digest."""
    return f"{BLOB_DIR}/sha256/{digest[:2]}/{digest}.safetensors"


def digest_from_path(path: str) -> str | None:
    """The digest a blob path names, if its file name is a digest (ikdata and seed layouts)."""
    stem = os.path.basename(path).split(".", 1)[0]
    return stem if DIGEST_RE.match(stem) else None


@dataclass(frozen=True)
class RawTensor:
    """A tensor as dtype name, shape and a contiguous byte buffer (no torch needed)."""

    dtype: str
    shape: tuple[int, ...]
    data: Any  # a buffer: memoryview, bytes, numpy array

    @property
    def digest(self) -> str:
        return tensor_digest(self.dtype, self.shape, self.data)


def raw_tensor(value: Any) -> RawTensor:
    """Turn a torch tensor or a numpy array into a RawTensor, copying to host memory once at most.

    Raises:
        StoreError: for a type or dtype that cannot be stored.
    """
    module = type(value).__module__
    if module.startswith("torch"):
        import torch

        if not isinstance(value, torch.Tensor):
            raise StoreError(f"cannot store a {type(value).__name__}; pass a tensor or a numpy array")
        dtype = str(value.dtype)
        if dtype not in DTYPES:
            raise StoreError(f"dtype {dtype} cannot be stored in a safetensors blob")
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        tensor = tensor.contiguous()
        flat = tensor.reshape(-1).view(torch.uint8) if tensor.numel() else torch.empty(0, dtype=torch.uint8)
        return RawTensor(dtype, tuple(tensor.shape), memoryview(flat.numpy()))
    if module == "numpy":
        import numpy as np

        dtype = _NUMPY_TO_TORCH.get(value.dtype.name)
        if dtype is None:
            raise StoreError(f"numpy dtype {value.dtype} cannot be stored; use one of {sorted(_NUMPY_TO_TORCH)}")
        shape = tuple(value.shape)  # np.ascontiguousarray turns a 0-d array into shape (1,)
        array = np.ascontiguousarray(value)
        return RawTensor(dtype, shape, memoryview(array.reshape(-1).view(np.uint8)))
    raise StoreError(f"cannot store a {type(value).__name__}; pass a torch tensor or a numpy array")


def _process_umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``);
    elsewhere set and restored at once, which is safe here because it runs at import."""
    try:
        with open("/proc/self/status", "rb") as stream:
            for line in stream:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# mkstemp creates 0600 files; a dataset in a shared folder must be readable as the umask allows
# (0644 under umask 022), like any file the user creates. Read once: a umask rarely changes mid-run.
FILE_MODE = 0o666 & ~_process_umask()


def make_temp(folder: Path) -> tuple[int, str]:
    """A unique temp file in ``folder`` (open descriptor, path), with the umask's mode, not 0600; named by the
    one temp-file rule (:func:`ikdata.core.paths.temp_prefix`), so a killed writer's is swept."""
    import tempfile  # here: it imports shutil, random, bz2 and lzma, which read-only commands never use

    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(), dir=folder)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def write_atomic(path: Path, chunks: Iterable[Any]) -> None:
    """Write bytes to a unique temp file beside ``path``, fsync, and rename it into place.

    The file gets the mode the umask allows (:data:`FILE_MODE`), as a plain ``open`` would give it.

    Raises:
        FileSystemError: the OS refused (disk full, file-size limit, read-only, permission); it
            names ``path`` (or the folder that could not be made), and no temp file is left behind.
    """
    try:
        _write_atomic(path, chunks)
    except FileSystemError:
        raise
    except OSError as exc:
        named = exc.filename
        if named is None or os.path.basename(os.fsdecode(named)).startswith(".tmp-"):
            named = path  # the temp file is an implementation detail; the user knows the target
        raise FileSystemError(exc, operation="write", filename=named) from exc


def _write_atomic(path: Path, chunks: Iterable[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp(path.parent)
    try:
        with os.fdopen(fd, "wb") as stream:
            for chunk in chunks:
                stream.write(chunk)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def link_or_copy(source: Path, dest: Path) -> None:
    """Hard-link ``source`` to ``dest`` (same filesystem), else copy it with :func:`write_atomic`.

    Blobs are immutable and named by content, so sharing an inode is safe; an existing ``dest``
    is left as it is.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, dest)
    except FileExistsError:
        pass
    except OSError:  # another filesystem (EXDEV), or links not allowed
        with open(open_regular(source), "rb") as stream:
            write_atomic(dest, iter(lambda: stream.read(1 << 22), b""))


@dataclass(frozen=True)
class PutResult:
    """What ``put`` did: the descriptor, the digest, the bytes, and whether a file was written."""

    ref: TensorRef
    digest: str
    nbytes: int
    written: bool


class BlobStore:
    """The blobs of one dataset root.

    Example:
        >>> store = BlobStore(Path("my-dataset"))
        >>> ref = store.put(numpy.ones((2, 3), dtype="float32")).ref
        >>> store.get(ref).shape
        torch.Size([2, 3])
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def put(self, value: Any) -> PutResult:
        """Store a torch tensor or numpy array; write nothing if its digest is already stored."""
        return self.put_raw(value if isinstance(value, RawTensor) else raw_tensor(value))

    def put_raw(self, raw: RawTensor, *, digest: str | None = None) -> PutResult:
        """Store a RawTensor whose digest may already be known."""
        digest = digest or raw.digest
        relative = blob_path(digest)
        path = self.root / relative
        nbytes = memoryview(raw.data).nbytes
        if path.exists():
            return PutResult(TensorRef(relative, BLOB_KEY), digest, nbytes, False)
        write_atomic(path, [encode_header(raw.dtype, raw.shape, nbytes), raw.data])
        return PutResult(TensorRef(relative, BLOB_KEY), digest, nbytes, True)

    def has(self, digest: str) -> bool:
        """Whether the blob is stored, loose or in a pack (:mod:`ikdata.core.packs`)."""
        return (self.root / blob_path(digest)).exists() or self.packed(digest) is not None

    def packed(self, digest: str | None) -> Any:
        """Where a digest lies in a published pack (a :class:`~ikdata.core.packs.PackedBlob`), or None."""
        if digest is None or not os.path.isdir(os.path.join(self.root, BLOB_DIR, "packs")):
            return None
        from ikdata.core.packs import cached_packs

        return cached_packs(self.root).find(digest)

    def packed_ref(self, ref: TensorRef) -> Any:
        """The pack entry behind a descriptor naming a canonical loose path that is not on disk, or None."""
        digest = digest_from_path(ref.path)
        if digest is None or ref.path != blob_path(digest) or ref.tensor_key != BLOB_KEY:
            return None
        return self.packed(digest)

    def get(self, ref: TensorRef, *, device: str = "cpu") -> Any:
        """Load the tensor a descriptor names (memory-mapped) as a torch tensor.

        Raises:
            BlobNotFound: the file is missing.
            BlobCorrupted: the file is not a valid safetensors file or lacks the key.
        """
        from safetensors import safe_open

        path, key = self._checked_path(ref)
        try:
            with safe_open(str(path), framework="pt", device=device) as handle:
                return handle.get_tensor(key)
        except Exception as exc:  # safetensors raises its own error types for bad files
            raise BlobCorrupted(f"{ref.path}: cannot read tensor {ref.tensor_key!r}: {exc}",
                                path=ref.path) from exc

    def get_numpy(self, ref: TensorRef) -> Any:
        """Load a tensor as a numpy array (dtypes numpy lacks, such as bfloat16, are refused)."""
        from safetensors import safe_open

        path, key = self._checked_path(ref)
        try:
            with safe_open(str(path), framework="numpy") as handle:
                return handle.get_tensor(key)
        except Exception as exc:
            raise BlobCorrupted(f"{ref.path}: cannot read tensor {ref.tensor_key!r}: {exc}",
                                path=ref.path) from exc

    def _checked_path(self, ref: TensorRef) -> tuple[Path, str]:
        """The file holding a descriptor's tensor and its key there: the loose file, else its pack."""
        path = self.root / ref.path
        if not path.is_file():
            packed = self.packed_ref(ref)
            if packed is not None:
                return self.root / packed.pack, packed.digest
            raise BlobNotFound(f"{ref.path}: blob not found", path=ref.path, digest=digest_from_path(ref.path))
        return path, ref.tensor_key

    def iter_blobs(self, *, special: list[str] | None = None,
                   links: list[str] | None = None) -> Iterator[tuple[str, int]]:
        """Every stored blob as (relative path, size), from a directory scan (no reads). Packed blobs
        are listed under their loose path with the loose file's size, once, so the blob set is the
        same whether blobs are loose or packed. ``special`` and ``links``, when given, collect the
        FIFOs, devices and sockets left out and the loose blobs that are symlinks (still listed)."""
        seen = set()
        for relative, size, link in self.scan_blobs(special=special):
            seen.add(relative)
            if link and links is not None:
                links.append(relative)
            yield relative, size
        if os.path.isdir(os.path.join(self.root, BLOB_DIR, "packs")):
            from ikdata.core.packs import iter_packed

            for blob in iter_packed(self.root):
                relative = blob_path(blob.digest)
                if relative not in seen:
                    yield relative, blob.loose_size

    def scan_blobs(self, *, special: list[str] | None = None) -> Iterator[tuple[str, int, bool]]:
        """Every ``*.safetensors`` under ``blob/`` as (relative path, size, is a symlink); links to
        folders are not followed. Packs (``blob/packs/``) are not loose blobs and are left out, and
        so are FIFOs, devices and sockets: not blobs (their paths go to ``special`` when given)."""
        top = os.path.join(self.root, BLOB_DIR)
        if not os.path.isdir(top):
            return
        stack = [(top, BLOB_DIR + "/")]
        while stack:
            folder, relative = stack.pop()
            with os.scandir(folder) as entries:
                for entry in entries:
                    if relative == BLOB_DIR + "/" and entry.name == "packs":
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, relative + entry.name + "/"))
                    elif entry.name.endswith(".safetensors") and not entry.name.startswith(".tmp-"):
                        if not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                            if special is not None:
                                special.append(relative + entry.name)
                            continue
                        yield (relative + entry.name, entry.stat(follow_symlinks=False).st_size,
                               entry.is_symlink())


def read_entries(path: str | os.PathLike) -> list[TensorEntry]:
    """The tensors in a safetensors file, with every offset checked against the file size.

    Reads only the header (one ``pread`` for every blob ikdata writes); headers seen
    before are not parsed again.

    Raises:
        BlobCorrupted: the file is truncated or its header is malformed.
        OSError: the file cannot be opened or read (a FIFO, a device or a socket is
            refused before any read).
    """
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, _HEADER_READ, 0)
        length = int.from_bytes(head[:8], "little") if len(head) >= 8 else -1
        if len(head) < 8 + length <= size and length <= MAX_HEADER_BYTES:
            head += os.pread(fd, 8 + length - len(head), len(head))
    finally:
        os.close(fd)
    try:
        if 0 <= length <= MAX_HEADER_BYTES and 8 + length <= len(head):
            key = (head[8:8 + length], size)
            found = _HEADERS.get(key)
            if found is None:
                entries = parse_header(head[:8 + length], size)
                found = (entries, [tensor_prefix(e.dtype, e.shape) for e in entries])
                if len(_HEADERS) < 4096:
                    _HEADERS[key] = found
            return list(found[0])
        return parse_header(head, size)  # raises the precise FormatError
    except FormatError as exc:
        raise BlobCorrupted(f"{path}: {exc}", path=str(path)) from exc


def _parse(stream: Any, prefix: bytes, size: int) -> list[TensorEntry]:
    if len(prefix) >= 8:
        need = 8 + int.from_bytes(prefix[:8], "little")
        if len(prefix) < need <= size:
            prefix += stream.read(need - len(prefix))
    return parse_header(prefix, size)


@dataclass(frozen=True)
class BlobCheck:
    """The outcome of rehashing one file: each tensor's digest, or the error."""

    path: str
    entries: tuple[TensorEntry, ...] = ()
    digests: tuple[str, ...] = ()
    error: str | None = None


def rehash_file(path: str | os.PathLike) -> BlobCheck:
    """Re-derive the digest of every tensor in a safetensors file from its bytes.

    Small files are read with one ``os.readv`` into a per-thread buffer, large ones
    memory-mapped; headers seen before (every blob of one dtype and shape has the same
    canonical header) are not parsed again. hashlib releases the GIL while it hashes,
    so several threads keep several cores busy.
    """
    try:
        fd = open_regular(path)  # a FIFO or a device is refused before a read could block
    except OSError as exc:
        return BlobCheck(str(path), error=f"cannot read: {exc.strerror or exc}")
    try:
        size = os.fstat(fd).st_size
        if size <= _MMAP_FROM:
            view = memoryview(_thread_buffer())
            got = os.readv(fd, [view[:size]])
            while got < size:  # a short read: keep going until the file's end
                n = os.readv(fd, [view[got:size]])
                if n == 0:
                    break
                got += n
            entries, prefixes = _cached_entries(view, got)
            digests = []
            for entry, prefix in zip(entries, prefixes):
                h = hashlib.sha256(prefix)
                h.update(view[entry.start:entry.end])
                digests.append(h.hexdigest())
            view.release()
            return BlobCheck(str(path), tuple(entries), tuple(digests))
        with open(fd, "rb", closefd=False) as stream:
            entries = _parse(stream, stream.read(_HEADER_READ), size)
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                digests = tuple(tensor_digest(e.dtype, e.shape, view[e.start:e.end]) for e in entries)
            finally:
                view.release()
        return BlobCheck(str(path), tuple(entries), digests)
    except FormatError as exc:
        return BlobCheck(str(path), error=str(exc))
    except OSError as exc:
        return BlobCheck(str(path), error=f"cannot read: {exc.strerror or exc}")
    finally:
        os.close(fd)


_local = threading.local()
_HEADERS: dict[tuple[bytes, int], tuple[list[TensorEntry], list[bytes]]] = {}


def _thread_buffer() -> bytearray:
    buffer = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = bytearray(_MMAP_FROM)
    return buffer


def _cached_entries(view: memoryview, size: int) -> tuple[list[TensorEntry], list[bytes]]:
    """Entries and digest prefixes of a file held whole in ``view[:size]``, cached by header and size."""
    length = int.from_bytes(view[:8], "little") if size >= 8 else -1
    if 0 <= length <= MAX_HEADER_BYTES and 8 + length <= size:
        key = (bytes(view[8:8 + length]), size)
        found = _HEADERS.get(key)
        if found is None:
            entries = parse_header(bytes(view[:8 + length]), size)
            found = (entries, [tensor_prefix(e.dtype, e.shape) for e in entries])
            if len(_HEADERS) < 4096:
                _HEADERS[key] = found
        return found
    entries = parse_header(bytes(view[:min(size, _HEADER_READ)]), size)  # raises the precise FormatError
    return entries, [tensor_prefix(e.dtype, e.shape) for e in entries]


def rehash_files(paths: Iterable[str | os.PathLike], *, jobs: int | None = None) -> Iterator[BlobCheck]:
    """Rehash many files on ``jobs`` threads (hashlib releases the GIL), in input order.

    Paths go to the threads in batches, so per-file scheduling costs little.
    """
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1:
        yield from map(rehash_file, paths)
        return
    paths = list(paths)
    batch = max(1, min(256, len(paths) // (jobs * 8) or 1))
    batches = [paths[i:i + batch] for i in range(0, len(paths), batch)]
    from concurrent.futures import ThreadPoolExecutor  # here: it imports logging (~8 ms of every start-up)

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        for checks in pool.map(lambda group: [rehash_file(p) for p in group], batches):
            yield from checks
    finally:  # a consumer that stops early does not wait for the batches still queued
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["BlobStore", "PutResult", "RawTensor", "raw_tensor", "blob_path", "digest_from_path",
           "read_entries", "rehash_file", "rehash_files", "BlobCheck", "write_atomic", "link_or_copy",
           "tensor_prefix"]
