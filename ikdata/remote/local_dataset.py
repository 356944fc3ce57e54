"""A local dataset folder read as if it were a remote, so ``clone DIR COPY`` and ``pull DIR DEST`` work.

A dataset folder is not in the remote layout (its small files sit at their dataset paths, not under
``files/sha256/``), so reading it as a folder remote finds none of them. :class:`DatasetSource`
serves the folder in the remote layout instead, read-only: ``files/sha256/<s>`` is the record file
the manifest gives that sha256, ``blob/...`` and ``blob/packs/...`` are the dataset's own, each
opened only as a regular file inside the dataset (DESIGN.md contract 3). Everything a clone fetches
through it is verified as from any remote (every blob rehashed, every file against its sha256).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from ikdata.core.errors import UsageError
from ikdata.core.locking import REMOTE_MARKER
from ikdata.core.manifest import MANIFEST
from ikdata.core.paths import PathResolver, open_regular
from ikdata.core.store import BLOB_DIR
from ikdata.remote.backend import Backend, ManifestState, file_object
from ikdata.remote.snapshot import local_snapshot
from ikdata.remote.url import RemoteOptions, RemoteURL, parse_url


def dataset_folder(url: str | os.PathLike) -> Path | None:
    """The folder a URL names when it is a local ikdata dataset (a manifest, no remote marker, no
    ``files/`` of a remote), else None."""
    try:
        remote = parse_url(url)
    except Exception:
        return None
    if remote.protocol != "file":
        return None
    root = Path(remote.path)
    if not (root / MANIFEST).is_file() or os.path.lexists(root / REMOTE_MARKER) or (root / "files").is_dir():
        return None
    return root


class DatasetSource(Backend):
    """A local dataset folder, read in the remote layout (see the module doc). It cannot be pushed to."""

    def __init__(self, remote: RemoteURL, root: Path) -> None:
        super().__init__(remote)
        self.root = root
        self.snapshot = local_snapshot(root)  # refuses a manifest that does not describe the files
        self.paths = PathResolver(root)
        self.by_sha256 = {digest: path for path, digest in self.snapshot.manifest["files"].items()}

    def read_manifest(self) -> ManifestState:
        return ManifestState(self.snapshot.data, hashlib.sha256(self.snapshot.data).hexdigest())

    def list_objects(self, prefix: str) -> dict[str, int]:
        listed: dict[str, int] = {}
        for digest, path in self.by_sha256.items():
            listed[file_object(digest)] = (self.root / path).stat().st_size
        blob_root = self.root / BLOB_DIR
        if blob_root.is_dir() and self.paths.refusal(BLOB_DIR) is None:
            for folder, _, names in os.walk(blob_root):
                for name in names:
                    path = Path(folder) / name
                    if name.startswith(".tmp-") or path.is_symlink() or not path.is_file():
                        continue
                    listed[path.relative_to(self.root).as_posix()] = path.stat().st_size
        return {rel: size for rel, size in listed.items() if rel.startswith(prefix)}

    def _local(self, rel: str) -> Path:
        if rel.startswith("files/sha256/"):
            path = self.by_sha256.get(rel.rsplit("/", 1)[-1])
            if path is None:
                raise self.fail(f"{rel} does not exist in the dataset")
            rel = path
        refusal = self.paths.refusal(rel)
        if refusal is not None:
            raise self.fail(f"{rel}: {refusal.reason}")
        return self.root / rel

    def read(self, rel: str, *, start: int | None = None, end: int | None = None) -> bytes:
        try:
            fd = open_regular(self._local(rel))
        except OSError as exc:
            raise self.fail(f"cannot read {rel}: {exc.strerror or exc}") from exc
        with os.fdopen(fd, "rb") as stream:
            stream.seek(start or 0)
            return stream.read() if end is None else stream.read(max(0, end - (start or 0)))

    def fetch(self, rel: str, dest: Path) -> None:
        try:
            fd = open_regular(self._local(rel))
        except OSError as exc:
            raise self.fail(f"cannot read {rel}: {exc.strerror or exc}") from exc
        with os.fdopen(fd, "rb") as source, open(dest, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)

    def prepare_push(self) -> None:
        raise UsageError(f"{self.url}: is a dataset, not a remote; push to a new or empty folder, or to one "
                         "ikdata push wrote")


def open_source(url: str | os.PathLike, options: RemoteOptions | None = None) -> Any:
    """What clone and pull read from: a local dataset folder as :class:`DatasetSource`, else the remote's
    backend (:func:`ikdata.remote.connect.open_backend`)."""
    root = dataset_folder(url)
    if root is not None:
        return DatasetSource(parse_url(url), root)
    from ikdata.remote.connect import open_backend

    return open_backend(url, options)


__all__ = ["DatasetSource", "dataset_folder", "open_source"]
