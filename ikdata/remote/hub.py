"""The Hugging Face Hub through huggingface_hub: few commits, and ``parent_commit`` as the manifest's guard.

Objects are sent in batches, one ``HfApi.create_commit`` per batch (never one
commit per file); the manifest goes in its own final commit whose
``parent_commit`` is the head at which the remote manifest was last seen
unchanged, so a concurrent publish makes it fail with 412 instead of mixing.

Before a push relies on a blob the repository already holds, the tree listing's content
ids (computed by the Hub from the bytes: the LFS sha256, or the git blob id of a regular
file) are compared with the local file, so a blob replaced with other bytes of the same
size is sent again, without one more request (the small files are checked the same way).
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Iterator, Sequence

from ikdata.core.errors import RemoteError
from ikdata.remote.backend import (MANIFEST, Backend, ManifestState, PublishConflict, Relied, RemoteCheck,
                                   local_hash, local_size)
from ikdata.remote.transfer import DEFAULT_JOBS, Progress, ProgressCallback, Upload, chunked
from ikdata.remote.url import RemoteOptions, RemoteURL

BATCH_FILES = 1000          # operations per commit
BATCH_BYTES = 512 << 20     # bytes per commit (regular files travel inline in the commit payload)
_DEFAULT_ENDPOINT = "https://huggingface.co"


class HubBackend(Backend):
    """An ``hf://datasets/org/name[@revision][/path]`` remote."""

    def __init__(self, remote: RemoteURL, options: RemoteOptions) -> None:
        super().__init__(remote)
        try:
            from huggingface_hub import HfApi
        except ImportError as exc:
            raise RemoteError("hf:// needs huggingface_hub; install it with: pip install 'ikdata[hf]'",
                              url=remote.url) from exc
        self.endpoint = (options.endpoint_url or _DEFAULT_ENDPOINT).rstrip("/")
        self.token = options.token
        self.api = HfApi(endpoint=self.endpoint, token=self.token)
        self.repo_id, self.repo_type = remote.repo_id or "", remote.repo_type or "dataset"
        self.revision = options.revision or "main"
        self.sub = remote.path
        self.content_ids: dict[str, tuple[str | None, str | None]] = {}  # path -> (git blob id, LFS sha256)

    def _path(self, rel: str) -> str:
        return f"{self.sub}/{rel}" if self.sub else rel

    @property
    def identity(self) -> str:
        return f"hf:{self.endpoint}:{self.repo_type}:{self.repo_id}@{self.revision}/{self.sub}"

    def listed_checksum_matches(self, rel: str, data: bytes) -> bool | None:
        blob_id, lfs_sha256 = self.content_ids.get(rel, (None, None))
        if lfs_sha256:
            return hashlib.sha256(data).hexdigest() == lfs_sha256
        if blob_id:
            git = hashlib.sha1(f"blob {len(data)}\0".encode(), usedforsecurity=False)
            git.update(data)
            return git.hexdigest() == blob_id
        return None

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

        try:
            yield
        except RemoteError:
            raise
        except RepositoryNotFoundError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status == 401:
                raise self.fail(f"cannot {what}: the token was refused (401); check HF_TOKEN") from exc
            raise self.fail(f"repository {self.repo_id} ({self.repo_type}) not found at {self.endpoint}, or "
                            "the token may not read it; check the URL and HF_TOKEN") from exc
        except RevisionNotFoundError as exc:
            raise self.fail(f"revision {self.revision!r} not found in {self.repo_id}; check --revision") from exc
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else "?"
            hint = "check HF_TOKEN" if status in (401, 403) else "check the URL and HF_ENDPOINT"
            raise self.fail(f"cannot {what}: the Hub answered {status}; {hint}") from exc
        except OSError as exc:  # connection refused, DNS, timeouts (httpx errors are OSErrors or wrap them)
            raise self.fail(f"cannot reach {self.endpoint} to {what} ({type(exc).__name__}); check HF_ENDPOINT "
                            "and the network") from exc
        except Exception as exc:
            if "Connect" in type(exc).__name__ or "Timeout" in type(exc).__name__:
                raise self.fail(f"cannot reach {self.endpoint} to {what} ({type(exc).__name__}); check "
                                "HF_ENDPOINT and the network") from exc
            raise

    def prepare_push(self) -> None:
        with self._errors("create the repository"):
            self.api.create_repo(self.repo_id, repo_type=self.repo_type, exist_ok=True)

    def _head(self) -> str:
        info = self.api.repo_info(self.repo_id, repo_type=self.repo_type, revision=self.revision)
        return str(info.sha)

    def _get(self, rel: str, revision: str, *, start: int | None = None, end: int | None = None,
             dest: Path | None = None) -> bytes | None:
        """GET a file at a revision; None when it does not exist."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        url = hf_hub_url(self.repo_id, self._path(rel), repo_type=self.repo_type, revision=revision,
                         endpoint=self.endpoint)
        headers = build_hf_headers(token=self.token)
        if start is not None or end is not None:
            headers["Range"] = f"bytes={start or 0}-{'' if end is None else end - 1}"
        with get_session().stream("GET", url, headers=headers, follow_redirects=True) as response:
            if response.status_code == 404 and response.headers.get("X-Error-Code") == "EntryNotFound":
                return None
            hf_raise_for_status(response)
            if dest is None:
                return response.read()
            with open(dest, "wb") as stream:
                for chunk in response.iter_bytes(1 << 20):
                    stream.write(chunk)
            return b""

    def read_manifest(self) -> ManifestState:
        with self._errors("read the manifest"):
            head = self._head()
            data = self._get(MANIFEST, head)
        return ManifestState(data, head)

    def list_objects(self, prefix: str) -> dict[str, int]:
        from huggingface_hub.errors import EntryNotFoundError
        from huggingface_hub.hf_api import RepoFile

        base = self._path(prefix.rstrip("/")) if prefix else self.sub  # "" lists the whole remote
        strip = f"{self.sub}/" if self.sub else ""
        listed = {}
        with self._errors(f"list {prefix}"):
            try:
                for entry in self.api.list_repo_tree(self.repo_id, path_in_repo=base, recursive=True,
                                                     repo_type=self.repo_type, revision=self.revision):
                    if isinstance(entry, RepoFile):
                        rel = entry.path[len(strip):]
                        listed[rel] = int(entry.size)
                        lfs = getattr(entry, "lfs", None)
                        self.content_ids[rel] = (getattr(entry, "blob_id", None),
                                                 getattr(lfs, "sha256", None) if lfs else None)
            except EntryNotFoundError:
                return {}
        return listed

    def upload(self, items: Sequence[Upload], *, jobs: int = DEFAULT_JOBS,
               progress: ProgressCallback | None = None) -> None:
        from huggingface_hub import CommitOperationAdd

        total_bytes, total = sum(i.size for i in items), sum(i.blobs for i in items)
        done = done_bytes = 0
        if progress:
            progress(Progress("upload", 0, total, 0, total_bytes))
        for batch in _batches(items):
            operations = [CommitOperationAdd(self._path(i.rel), i.source if isinstance(i.source, bytes)
                                             else str(i.source)) for i in batch]
            with self._errors("upload"):
                self.api.create_commit(self.repo_id, operations, commit_message=f"ikdata: {len(batch)} objects",
                                       repo_type=self.repo_type, revision=self.revision, num_threads=jobs)
            done += sum(i.blobs for i in batch)
            done_bytes += sum(i.size for i in batch)
            if progress:
                progress(Progress("upload", done, total, done_bytes, total_bytes))

    def upload_in_order(self, first: Sequence[Upload], then: Sequence[Upload], *, jobs: int = DEFAULT_JOBS,
                        progress: ProgressCallback | None = None) -> None:
        """One set of commits for both: a commit is atomic, and ``then`` follows ``first`` in commit order."""
        from ikdata.core.faults import checkpoint

        self.upload(list(first) + list(then), jobs=jobs, progress=progress)
        checkpoint("packs-sent")

    def check_remote(self, objects: Sequence[Relied], *, jobs: int = DEFAULT_JOBS) -> RemoteCheck:
        """Compare each listed content id (LFS sha256, else git blob id) with the local bytes'; an object the
        listing gave no id for is trusted by size."""
        check = RemoteCheck()
        for item in objects:
            blob_id, lfs_sha256 = self.content_ids.get(item.rel, (None, None))
            if lfs_sha256:
                mine = item.content_sha256 if not item.blob else local_hash(item.local, hashlib.sha256())
                check.note(item.rel, "lfs-sha256", mine == lfs_sha256)
            elif blob_id and item.git_blob_id:
                check.note(item.rel, "git-blob-id", item.git_blob_id == blob_id)
            elif blob_id and item.local is not None:
                header = f"blob {local_size(item.local)}\0".encode()
                check.note(item.rel, "git-blob-id",
                           local_hash(item.local, hashlib.sha1(header, usedforsecurity=False)) == blob_id)
            else:
                check.note(item.rel, "size", True)
        return check

    def fetch(self, rel: str, dest: Path) -> None:
        with self._errors(f"download {rel}"):
            if self._get(rel, self.revision, dest=dest) is None:
                raise self.fail(f"{rel} does not exist on the remote")

    def read(self, rel: str, *, start: int | None = None, end: int | None = None) -> bytes:
        with self._errors(f"read {rel}"):
            data = self._get(rel, self.revision, start=start, end=end)
        if data is None:
            raise self.fail(f"{rel} does not exist on the remote")
        return data

    def publish_manifest(self, data: bytes, base: ManifestState) -> None:
        from huggingface_hub import CommitOperationAdd
        from huggingface_hub.errors import HfHubHTTPError

        with self._errors("write the manifest"):
            head = self._head()
            if head != base.token and self._get(MANIFEST, head) != base.data:
                raise PublishConflict("the remote manifest changed while pushing", url=self.url)
            try:
                self.api.create_commit(self.repo_id, [CommitOperationAdd(self._path(MANIFEST), data)],
                                       commit_message="ikdata: publish manifest", repo_type=self.repo_type,
                                       revision=self.revision, parent_commit=head)
            except HfHubHTTPError as exc:
                if exc.response is not None and exc.response.status_code in (409, 412):
                    raise PublishConflict("the remote manifest changed while pushing", url=self.url) from exc
                raise


def _batches(items: Sequence[Upload]) -> Iterator[list[Upload]]:
    for group in chunked(items, BATCH_FILES):
        batch: list[Upload] = []
        size = 0
        for item in group:
            if batch and size + item.size > BATCH_BYTES:
                yield batch
                batch, size = [], 0
            batch.append(item)
            size += item.size
        if batch:
            yield batch


__all__ = ["HubBackend", "BATCH_FILES"]
