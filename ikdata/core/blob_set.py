"""A set of blob paths in about 32 bytes per content-addressed blob: what gc keeps in bounded memory.

A Python ``set`` of 2.5 million paths such as ``blob/sha256/ab/<64 hex>.safetensors`` costs about
200 bytes a path (the string and its slot); gc held two or three of them. Here a path the store
derives from a digest (:func:`ikdata.core.store.blob_path`) is kept as its 32 raw digest bytes in
a sorted numpy array, deduplicated in chunks as it is built, and any other path (the seed layout's,
one written by hand) stays a string in a small set. Membership is a binary search.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator

import numpy as np

from ikdata.core.store import BLOB_DIR, DIGEST_RE, blob_path

_PREFIX = f"{BLOB_DIR}/sha256/"
_SUFFIX = ".safetensors"
_CHUNK = 1 << 17  # digests gathered before a chunk is sorted and merged (4 MiB)


_AT = len(_PREFIX)
_LENGTH = _AT + 3 + 64 + len(_SUFFIX)


def _digest_of(path: str) -> bytes | None:
    """The raw digest of a path the store derives from a digest, else None (no regex: gc asks millions of times)."""
    if len(path) != _LENGTH or not path.startswith(_PREFIX) or not path.endswith(_SUFFIX) or path[_AT + 2] != "/":
        return None
    digest = path[_AT + 3:_AT + 67]
    if path[_AT:_AT + 2] != digest[:2] or not digest.islower() and not digest.isdigit():
        return None
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return None
    return raw if len(raw) == 32 else None  # fromhex skips spaces: such a name is not a digest


def normalise(path: str) -> str:
    """A path as gc compares it: normalised, so a roundabout spelling names the same blob."""
    return posixpath.normpath(path.replace("\\", "/"))


class BlobPathSet:
    """An immutable set of dataset-relative blob paths, built with :meth:`build`.

    ``path in s`` normalises ``path`` first; iteration yields each path once (content-addressed ones
    in digest order, then the others sorted).
    """

    __slots__ = ("_digests", "_others")

    def __init__(self, digests: np.ndarray, others: frozenset[str]) -> None:
        self._digests = digests
        self._others = others

    @classmethod
    def build(cls, paths: Iterable[str]) -> BlobPathSet:
        """The set of ``paths`` (each normalised); memory stays near 32 bytes per distinct digest."""
        builder = BlobPathSetBuilder()
        for path in paths:
            builder.add(path)
        return builder.finish()

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, str):
            return False
        digest = _digest_of(path)
        if digest is None:
            path = normalise(path)
            digest = _digest_of(path)
            if digest is None:
                return path in self._others
        at = int(np.searchsorted(self._digests, digest))
        return at < len(self._digests) and _raw(self._digests[at]) == digest

    def contains_many(self, paths: list[str]) -> list[bool]:
        """``[p in self for p in paths]``, one vectorised search for the content-addressed ones."""
        keys = [_digest_of(p) for p in paths]
        found = [False] * len(paths)
        at = [i for i, k in enumerate(keys) if k is not None]
        if at and len(self._digests):
            wanted = np.frombuffer(b"".join([keys[i] for i in at]), dtype="S32")
            where = np.minimum(np.searchsorted(self._digests, wanted), len(self._digests) - 1)
            for i, hit in zip(at, (self._digests[where] == wanted).tolist()):
                found[i] = hit
        if len(at) < len(paths):
            for i, k in enumerate(keys):
                if k is None:
                    found[i] = paths[i] in self
        return found

    def __len__(self) -> int:
        return len(self._digests) + len(self._others)

    def __iter__(self) -> Iterator[str]:
        for digest in self._digests:
            yield blob_path(_raw(digest).hex())
        yield from sorted(self._others)

    @property
    def nbytes(self) -> int:
        """Bytes held by the content-addressed part (the rest is a few strings)."""
        return int(self._digests.nbytes)


class BlobPathSetBuilder:
    """Gathers paths one at a time (a scan that also does other work) into a :class:`BlobPathSet`."""

    def __init__(self) -> None:
        self._merged = np.empty(0, dtype="S32")
        self._chunk = bytearray()
        self._count = 0
        self._others: set[str] = set()

    def add(self, raw: str) -> None:
        digest = _digest_of(raw)
        if digest is None:
            path = normalise(raw)
            digest = _digest_of(path)
            if digest is None:
                self._others.add(path)
                return
        self._chunk += digest
        self._count += 1
        if self._count == _CHUNK:
            self._flush()

    def finish(self) -> BlobPathSet:
        self._flush()
        return BlobPathSet(self._merged, frozenset(self._others))

    def _flush(self) -> None:
        if self._count:
            self._merged = _merge(self._merged, self._chunk)
            self._chunk, self._count = bytearray(), 0


def _raw(element: bytes) -> bytes:
    # numpy's 'S32' (chosen because it sorts; 'V32' does not) drops trailing NUL bytes when an
    # element is read back: a digest ending in 0x00 is padded back to its 32 bytes.
    return bytes(element).ljust(32, b"\0")


def _merge(merged: np.ndarray, chunk: bytearray) -> np.ndarray:
    """``merged`` with the chunk's new digests inserted in order: at most the two arrays at once."""
    fresh = np.unique(np.frombuffer(chunk, dtype="S32"))
    if not len(merged):
        return fresh
    at = np.searchsorted(merged, fresh)
    present = merged[np.minimum(at, len(merged) - 1)] == fresh
    return np.insert(merged, at[~present], fresh[~present])


__all__ = ["BlobPathSet", "BlobPathSetBuilder", "normalise"]
