"""A bounded local cache of a remote dataset's blobs, filled on demand and verified on arrival.

Replay straight from a remote (``ikdata replay URL --ray``) needs, on each worker, only the
blobs of the cases it runs. :meth:`BlobCache.ensure` fetches each missing one from the
backend into a temporary file, rehashes it, and only then moves it to its content-addressed
place in the worker's copy of the dataset; a blob whose bytes do not match its name never
lands (its cases are errors, named by :class:`BlobRefused`). Least recently used blobs are
removed once the cache holds more than ``max_bytes`` (never those the current case needs).

Blobs the remote keeps in packs are read as byte ranges of their packs (one listing of
``blob/packs/`` per cache, each index one GET unless the listing confirms this remote's cached copy;
:mod:`ikdata.remote.packs`): :meth:`BlobCache.prefetch` batches a task's members per pack, members
close together in one range, each rehashed against its digest before it lands as a loose blob.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from ikdata.core.errors import RemoteError
from ikdata.core.store import blob_path, digest_from_path, make_temp, rehash_file
from ikdata.remote.backend import Backend
from ikdata.remote.packs import PACKS_PREFIX, RemotePack, RemotePacks, fetch_members, find_remote_packs


class BlobRefused(RemoteError):
    """A blob fetched from the remote is not the tensor its name says (or is not a blob path at all)."""

    def __init__(self, message: str, *, url: str, path: str | None = None):
        super().__init__(message, url=url)
        self.path = path


class BlobCache:
    """Blobs of one remote dataset under ``root/blob/``, at most ``max_bytes`` of them."""

    def __init__(self, backend: Backend, root: Path, *, max_bytes: int):
        self.backend = backend
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.fetched_bytes = 0
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()  # one ensure() at a time
        self._count_lock = threading.Lock()  # the sizes and the byte count, updated by fetching threads
        self._packs: RemotePacks | None = None
        self.range_requests = 0  # ranged reads (and whole packs) made for packed blobs

    @property
    def held_bytes(self) -> int:
        return sum(self._sizes.values())

    def ensure(self, paths: Iterable[str]) -> int:
        """Make every blob in ``paths`` present and verified; returns the bytes fetched now.

        Raises:
            BlobRefused: a path is not a content-addressed blob path, or its bytes do not hash to it.
            RemoteError: the remote cannot serve it.
        """
        wanted = list(dict.fromkeys(paths))
        fetched = 0
        with self._lock:
            for rel in wanted:
                if rel in self._sizes:
                    self._sizes.move_to_end(rel)
                    continue
                fetched += self._fetch(rel)
            self._evict(keep=set(wanted))
        return fetched

    def prefetch(self, paths: Iterable[str], *, jobs: int = 8) -> dict[str, RemoteError]:
        """Fetch every missing blob of ``paths`` on ``jobs`` threads (one request each, verified);
        returns the ones that could not be had, with why, instead of raising."""
        with self._lock:
            missing = [rel for rel in dict.fromkeys(paths) if rel not in self._sizes]
        failures: dict[str, RemoteError] = {}
        packed, missing = self._split_packed(missing)
        for remote, rels in packed:
            failures.update(self._fetch_packed(remote, rels, jobs=jobs))

        def one(rel: str) -> None:
            try:
                self._fetch(rel)
            except RemoteError as exc:
                failures[rel] = exc

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(one, missing))
        return failures

    def remote_packs(self) -> RemotePacks:
        """The remote's published packs (listed once per cache)."""
        with self._count_lock:
            if self._packs is None:
                self._packs = find_remote_packs(self.backend, self.backend.list_objects(PACKS_PREFIX))
            return self._packs

    def _split_packed(self, rels: list[str]) -> tuple[list[tuple[RemotePack, list[str]]], list[str]]:
        """(per remote pack, the wanted blobs it holds), and the blobs to fetch as loose objects."""
        found = self.remote_packs()
        groups: dict[str, list[str]] = {}
        loose = []
        for rel in rels:
            digest = digest_from_path(rel)
            if digest is not None and rel == blob_path(digest) and digest in found.members:
                groups.setdefault(found.members[digest].digest, []).append(rel)
            else:
                loose.append(rel)
        return [(found.packs[d], group) for d, group in groups.items()], loose

    def _fetch_packed(self, remote: RemotePack, rels: list[str], *, jobs: int = 8) -> dict[str, RemoteError]:
        """Members of one remote pack by range (or the whole pack), each verified before it lands loose."""
        landed = fetch_members(self.backend, remote, [digest_from_path(r) for r in rels], self.root, packed=False,
                               jobs=jobs)
        with self._count_lock:
            self.fetched_bytes += landed.nbytes
            self.range_requests += landed.requests
            for digest, size in landed.landed.items():
                if blob_path(digest) in rels:
                    self._sizes[blob_path(digest)] = size
        failures: dict[str, RemoteError] = {
            rel: BlobRefused(f"blob {rel} failed verification ({why}); the remote copy is damaged: push it again "
                             "from a good copy", url=self.backend.url, path=rel) for rel, why in landed.refused.items()}
        for rel in rels:
            if rel not in failures and rel not in self._sizes:
                failures[rel] = BlobRefused(f"blob {rel}: not in {remote.pack} after all", url=self.backend.url,
                                            path=rel)
        return failures

    def _fetch(self, rel: str) -> int:
        digest = digest_from_path(rel)
        if digest is None or rel != blob_path(digest):
            raise BlobRefused(f"{rel}: not a content-addressed blob path; refused", url=self.backend.url, path=rel)
        packed, _ = self._split_packed([rel])
        if packed:
            failures = self._fetch_packed(*packed[0])
            if failures:
                raise failures[rel]
            return self._sizes[rel]
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = make_temp(target.parent)
        os.close(fd)
        try:
            self.backend.fetch(rel, Path(temp))
            size = os.path.getsize(temp)
            with self._count_lock:
                self.fetched_bytes += size
            check = rehash_file(temp)
            if check.error or check.digests != (digest,):
                why = check.error or f"its bytes hash to {', '.join(check.digests) or 'nothing'}"
                raise BlobRefused(f"blob {rel} failed verification ({why}); "
                                  "the remote copy is damaged: push it again from a good copy",
                                  url=self.backend.url, path=rel)
            os.replace(temp, target)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
        with self._count_lock:
            self._sizes[rel] = size
        return size

    def _evict(self, keep: set[str]) -> None:
        held = self.held_bytes
        for rel in list(self._sizes):
            if held <= self.max_bytes:
                break
            if rel in keep:
                continue
            held -= self._sizes.pop(rel)
            try:
                os.unlink(self.root / rel)
            except FileNotFoundError:
                pass


__all__ = ["BlobCache", "BlobRefused"]
