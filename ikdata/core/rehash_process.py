"""Every loose blob of a dataset rehashed in a process of its own, while the parent checks the records.

Rehashing a small blob is mostly Python (open, read, parse the header, compare the digest); hashing
proper releases the GIL but the rest does not, so threads of one process left ``validate --deep``
with one busy core: rows decoded on it, blobs checked in turns with them. Here a child process
(``python -m ikdata.core.rehash_process ROOT JOBS``) scans ``blob/``, rehashes every regular file on
``JOBS`` threads and streams back what the parent keeps of each (:func:`summary`) in pickled frames,
so both cores work from the first second and the two sides meet at the end.

The parent reads the frames on a thread (:class:`RehashProcess`); the child imports nothing but the
store. Only the dataset's own files are read, the dataset is never written.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from typing import Any, Callable

FRAME = 2048  # blobs per frame sent back


def summary(rel: str, check: Any) -> Any:
    """What validate keeps of one rehash: the error (a string), or (entries, why the digest disagrees with
    the file's name or None)."""
    from ikdata.core.store import digest_from_path

    if check.error:
        return check.error
    expected = digest_from_path(rel)
    if expected and len(check.digests) != 1:
        return check.entries, (f"holds {len(check.digests)} tensors {[e.key for e in check.entries]}, but its name "
                               f"is the digest of one tensor ({expected}); the file was altered: restore it from "
                               "its source")
    if expected and check.digests[0] != expected:
        return check.entries, (f"content digest is {check.digests[0]}, but the file is named by {expected}: the "
                               "blob is corrupt; restore it from its source")
    return check.entries, None


def _child(root: str, jobs: int, hash_inside: bool) -> None:
    from ikdata.core.store import BlobStore, rehash_files

    out = sys.stdout.buffer
    scanned = list(BlobStore(root).scan_blobs())
    stored = {rel: size for rel, size, _ in scanned}
    paths = sorted(rel for rel, _, link in scanned if not link) if hash_inside else []
    del scanned
    pickle.dump(("stored", stored, paths), out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()
    frame = []  # (index in paths, summary): the parent names each blob by the one string it already holds
    for index, (rel, check) in enumerate(zip(paths, rehash_files([os.path.join(root, p) for p in paths], jobs=jobs))):
        frame.append((index, summary(rel, check)))
        if len(frame) >= FRAME:
            pickle.dump(("checked", frame), out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            frame = []
    pickle.dump(("checked", frame), out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


class RehashProcess:
    """The child process and the parent's thread that reads its frames into :attr:`results`
    (rel -> :func:`summary`). :meth:`wait` returns them once every blob is in; :meth:`cancel` ends the child."""

    def __init__(self, root: str, jobs: int, hash_inside: bool,
                 on_checked: Callable[[int, int], None] | None = None) -> None:
        self.stored: dict[str, int] = {}
        self.paths: list[str] = []
        self.results: dict[str, Any] = {}
        self.error: str | None = None
        self._shared: dict[tuple, tuple] = {}
        self._scanned = threading.Event()
        self._on_checked = on_checked
        self._proc = subprocess.Popen([sys.executable, "-m", "ikdata.core.rehash_process", root, str(jobs),
                                       "1" if hash_inside else "0"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self._thread = threading.Thread(target=self._read, daemon=True, name="ikdata-rehash-reader")
        self._thread.start()

    def _read(self) -> None:
        stream = self._proc.stdout
        try:
            while True:
                try:
                    frame = pickle.load(stream)
                except EOFError:
                    break
                if frame[0] == "stored":
                    self.stored, self.paths = frame[1], frame[2]
                    self._scanned.set()
                else:  # equal header entries kept once as they arrive (a pickled frame holds its own copies)
                    shared, paths = self._shared, self.paths
                    for index, check in frame[1]:
                        if not isinstance(check, str) and len(shared) < 1 << 16:
                            check = (shared.setdefault(check[0], check[0]), check[1])
                        self.results[paths[index]] = check
                    if self._on_checked:
                        self._on_checked(len(self.results), len(self.paths))
        except Exception as exc:  # a child that died mid-frame: said by wait
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._scanned.set()
            stream.close()
            code = self._proc.wait()
            if code != 0 and self.error is None:
                self.error = (self._proc.stderr.read() or b"").decode(errors="replace")[-2000:] or f"exit {code}"
            self._proc.stderr.close()

    def scanned(self) -> tuple[dict[str, int], list[str]]:
        """The blob scan (rel -> size; the regular files rehashed), once the child has made it."""
        self._scanned.wait()
        return self.stored, self.paths

    def wait(self) -> dict[str, Any]:
        self._thread.join()
        return self.results

    def cancel(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._thread.join()


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1")
