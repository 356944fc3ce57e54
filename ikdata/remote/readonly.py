"""Reading a remote dataset without pulling it: a verified, temporary copy of its small files.

``ikdata ls/stats/validate/lineage URL`` open the remote through :func:`open_url`:
the manifest and every file it lists (definitions, rows, receipts, reports; each
checked against its sha256) are fetched into a temporary folder, and the blobs
are represented as far as the command needs them:

- ``none``: no blobs (ls, lineage);
- ``sizes``: a sparse placeholder of the size the remote listing gives (stats);
- ``headers``: the real safetensors header at the start of a sparse file of the
  remote size, so header, dtype, shape and size checks are real (validate);
- ``full``: the whole blob, as the remote serves it (validate --deep rehashes it).

A blob the remote keeps in a pack is represented the same way from the pack's index (its
canonical loose header, the loose size); in ``full`` mode its bytes are fetched by range or
with the whole pack and rehashed on arrival (:func:`ikdata.remote.packs.fetch_members`), so a
damaged member is missing there and validation names it. A blob the rows name but the remote
lacks gets no placeholder, so validation reports it missing. The folder is removed when the
context ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from ikdata.core.dataset import Dataset
from ikdata.core.manifest import MANIFEST
from ikdata.remote.backend import BLOB_PREFIX, Backend
from ikdata.remote.connect import open_backend
from ikdata.remote.packs import fetch_members, find_remote_packs, loose_placeholder
from ikdata.remote.pull import fetch_files, is_blob_path, read_remote, referenced_blobs
from ikdata.remote.transfer import DEFAULT_JOBS, run_parallel
from ikdata.remote.url import RemoteOptions
from ikdata.core.store import blob_path, digest_from_path, write_atomic

BLOB_MODES = ("none", "sizes", "headers", "full")
_HEADER_READ = 4096


@contextlib.contextmanager
def open_url(url: str, *, options: RemoteOptions | None = None, blobs: str = "none",
             definitions: Iterable[str | os.PathLike] = (), jobs: int = DEFAULT_JOBS) -> Iterator[Dataset]:
    """Open a remote dataset read-only, as a :class:`Dataset` over a temporary verified copy.

    Args:
        url: the remote.
        blobs: how blobs are represented: "none", "sizes", "headers" or "full" (see the module doc).
        definitions: extra trusted definition folders, as for a local dataset.

    Raises:
        RemoteError: the remote cannot be read, has no dataset, or a listed file is missing or altered.

    Example:
        >>> with open_url("s3://team-bucket/gemm", blobs="headers") as ds:
        ...     report = validate(ds)
    """
    if blobs not in BLOB_MODES:
        raise ValueError(f"blobs must be one of {BLOB_MODES}")
    with tempfile.TemporaryDirectory(prefix="ikdata-remote-") as tmp, open_backend(url, options) as backend:
        root = Path(tmp)
        manifest, data, _ = read_remote(backend)
        fetch_files(backend, manifest, root, jobs=jobs)
        write_atomic(root / MANIFEST, [data])
        if blobs != "none":
            _materialise_blobs(backend, root, blobs, jobs)
        yield Dataset.open(root, definitions=definitions)


def _materialise_blobs(backend: Backend, root: Path, mode: str, jobs: int) -> None:
    listed = backend.list_objects(BLOB_PREFIX)
    remote = find_remote_packs(backend, listed, jobs=jobs)
    # Only content-addressed blob paths are materialised: a row naming anything else (absolute, '..')
    # gets no file, and validate reports it by the path rule.
    referenced = {rel for rel in referenced_blobs(root) if is_blob_path(rel)}
    packed: dict[str, list[str]] = {}
    for rel in sorted(referenced - set(listed)):
        pack = remote.members.get(digest_from_path(rel))
        if pack is not None:
            packed.setdefault(pack.digest, []).append(digest_from_path(rel))
    for digest, members in packed.items():
        if mode == "full":
            fetch_members(backend, remote.packs[digest], members, root, packed=False, jobs=jobs)
            continue
        by_digest = {m.digest: m for m in remote.packs[digest].members}
        for member in members:
            blob = by_digest[member]
            head = loose_placeholder(blob) if mode == "headers" else b""
            dest = root / blob_path(member)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as stream:
                stream.write(head)
                stream.truncate(blob.loose_size)
    wanted = sorted(rel for rel in referenced if rel in listed)

    def one(rel: str) -> None:
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        size = listed[rel]
        if mode == "full":
            backend.fetch(rel, dest)
            return
        head = b""
        if mode == "headers" and size:
            head = backend.read(rel, start=0, end=min(size, _HEADER_READ))
            if len(head) >= 8:
                need = min(size, 8 + int.from_bytes(head[:8], "little"))
                if need > len(head):
                    head += backend.read(rel, start=len(head), end=need)
        with open(dest, "wb") as stream:
            stream.write(head)
            stream.truncate(size)

    run_parallel("download", wanted, one, size_of=lambda r: listed[r], jobs=jobs)


__all__ = ["open_url", "BLOB_MODES"]
