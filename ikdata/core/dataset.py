"""Dataset: the layout on disk, iteration over definitions, workloads and receipts, and input loading.

Three layouts are read: ikdata's own, the seed capture script's (receipts in
``results/captures.jsonl`` or ``captures.jsonl``, blobs named by digest under
``blob/workloads/<name>/``), and a FlashInfer Trace dataset (blobs named by uuid,
several tensors per file, ``random`` inputs allowed). ikdata writes only its own.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable, Iterator

from ikdata.core import jsonl, schema
from ikdata.core.definitions import (DATASET, SHIPPED, USER, Definition, read_folder, shipped_folder)
from ikdata.core.errors import RecordError, UsageError
from ikdata.core.problems import Problem
from ikdata.core.records import Receipt, Scalar, TensorRef, WorkloadRow
from ikdata.core.store import BlobStore

IKDATA = "ikdata"
SEED = "seed"
FLASHINFER = "flashinfer"

MANIFEST = "ikdata.json"
RECEIPTS = "receipts.jsonl"
REPORT = "reports/replay.json"
_SEED_RECEIPTS = ("results/captures.jsonl", "captures.jsonl")
_SEED_REPORT = "results/replay.json"


def detect_layout(root: Path) -> str:
    """Which layout a folder holds: ikdata, the seed capture script's, or FlashInfer Trace."""
    if (root / MANIFEST).exists() or (root / RECEIPTS).exists() or (root / "blob" / "sha256").is_dir():
        return IKDATA
    if any((root / p).exists() for p in _SEED_RECEIPTS):
        return SEED
    return FLASHINFER


def check_relative(path: str) -> str | None:
    """Why a descriptor path is unsafe (absolute, '..', empty), or None if it is a clean relative path."""
    if not path or path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        return f"path {path!r} is absolute; expected a path relative to the dataset root"
    if "\\" in path:
        return f"path {path!r} uses backslashes; expected '/' separators"
    if ".." in path.split("/"):
        return f"path {path!r} contains '..'; expected a path that stays inside the dataset"
    return None


@dataclass
class Dataset:
    """A dataset folder, read lazily.

    Example:
        >>> ds = ikdata.open("captures/minilm")
        >>> for row in ds.workloads():
        ...     inputs = ds.load_inputs(row)
    """

    root: Path
    layout: str
    definition_folders: tuple[Path, ...] = ()
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | os.PathLike, *, definitions: Iterable[str | os.PathLike] = ()) -> Dataset:
        """Open a dataset folder; ``definitions`` are extra, trusted definition folders."""
        root = Path(path)
        if not root.is_dir():
            raise UsageError(f"{root}: no such dataset folder")
        folders = tuple(Path(d) for d in definitions)
        for folder in folders:
            if not folder.is_dir():
                raise UsageError(f"{folder}: --definitions must name a folder of definition JSON files")
        return cls(root, detect_layout(root), folders)

    @property
    def store(self) -> BlobStore:
        return BlobStore(self.root)

    @property
    def is_captured(self) -> bool:
        """Captured datasets (ikdata, seed) must never hold random inputs."""
        return self.layout in (IKDATA, SEED)

    def rel(self, path: Path) -> str:
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    # -- definitions -------------------------------------------------------------------------

    @functools.cached_property
    def _definitions(self) -> tuple[dict[str, Definition], list[Problem]]:
        found, problems = {}, []
        folder = self.root / "definitions"
        if folder.is_dir():
            found, problems = read_folder(folder, origin=DATASET, display_root=self.root)
        for extra in self.definition_folders:
            user, user_problems = read_folder(extra, origin=USER)
            problems += user_problems
            found.update(user)
        return found, problems

    @property
    def definitions(self) -> dict[str, Definition]:
        """Definitions by name: the dataset's own, overridden by user-named folders."""
        return self._definitions[0]

    @property
    def definition_problems(self) -> list[Problem]:
        return self._definitions[1]

    @functools.cached_property
    def trusted_definitions(self) -> dict[str, Definition]:
        """Shipped definitions and those of user-named folders: their references may run."""
        shipped, _ = read_folder(shipped_folder(), origin=SHIPPED)
        for extra in self.definition_folders:
            shipped.update(read_folder(extra, origin=USER)[0])
        return shipped

    # -- workloads ---------------------------------------------------------------------------

    def workload_files(self) -> list[Path]:
        folder = self.root / "workloads"
        return sorted(folder.rglob("*.jsonl")) if folder.is_dir() else []

    def read_records(self, path: Path, kind: str, *, validate: bool) -> Iterator[tuple[int, dict]]:
        """Raw records of one JSONL file with their lines; torn, malformed and (with ``validate``)
        schema-breaking lines land in ``self.problems`` instead."""
        display = self.rel(path)
        content = jsonl.read(path, display=display)
        self.problems += content.problems
        for line, record in content.records:
            if validate:
                found = schema.check(kind, record, path=display, line=line)
                if found:
                    self.problems += found
                    continue
            yield line, record

    def read_workload_file(self, path: Path, *, validate: bool = False) -> Iterator[tuple[int, dict]]:
        """Raw rows of one file with their lines; bad lines land in ``self.problems``."""
        return self.read_records(path, "workload", validate=validate)

    def workloads(self, definition: str | None = None, *, validate: bool = True) -> Iterator[WorkloadRow]:
        """Every workload row, optionally of one definition. Invalid rows are reported, not yielded."""
        for path in self.workload_files():
            display = self.rel(path)
            for line, record in self.read_workload_file(path, validate=validate):
                if definition is not None and record.get("definition") != definition:
                    continue
                yield WorkloadRow.from_dict(record, source=display, line=line)

    # -- receipts and reports ----------------------------------------------------------------

    def receipt_files(self) -> list[Path]:
        names = (RECEIPTS,) if self.layout == IKDATA else _SEED_RECEIPTS if self.layout == SEED else ()
        return [self.root / n for n in names if (self.root / n).is_file()]

    def receipts(self, *, validate: bool = True) -> Iterator[Receipt]:
        """Every receipt. Invalid ones are reported in ``self.problems``, not yielded."""
        for path in self.receipt_files():
            display = self.rel(path)
            for line, record in self.read_records(path, "receipt", validate=validate):
                definition = self.definitions.get(record["definition"])
                names = list(definition.outputs) if definition else None
                yield Receipt.from_dict(record, source=display, line=line, output_names=names)

    @property
    def report_path(self) -> Path:
        """Where the replay report lives in this layout."""
        return self.root / (_SEED_REPORT if self.layout == SEED else REPORT)

    # -- paths and tensors -------------------------------------------------------------------

    def resolve(self, relative: str, *, where: str = "") -> Path:
        """The absolute path of a descriptor path, refusing anything that leaves the dataset.

        Raises:
            RecordError: the path is absolute, has '..', or a link takes it outside the dataset.
        """
        reason = check_relative(relative)
        target = self.root / relative
        if reason is None:
            real_root = os.path.realpath(self.root)
            real = os.path.realpath(target)
            if os.path.commonpath([real_root, real]) != real_root:
                reason = f"path {relative!r} is a link that leaves the dataset (to {real})"
        if reason:
            raise RecordError(reason, path=where or None)
        return target

    def resolve_all(self, relatives: Iterable[str], *,
                    known_inside: Collection[str] = ()) -> dict[str, Path | RecordError]:
        """``resolve`` for many descriptor paths at once: path -> absolute path, or the RecordError.

        The real path of each folder is computed once, so checking 100,000 blobs
        costs one ``lstat`` per file instead of one per path component, and none for
        ``known_inside``: regular files a directory scan found inside the dataset.
        """
        real_root = os.path.realpath(self.root)
        inside = real_root.rstrip(os.sep) + os.sep
        real_dirs: dict[str, str] = {}
        resolved: dict[str, Path | RecordError] = {}
        for relative in relatives:
            if relative in resolved:
                continue
            reason = check_relative(relative)
            target = self.root / relative
            if reason is None and relative in known_inside:
                resolved[relative] = target
                continue
            if reason is None:
                parent, _, name = relative.rpartition("/")
                if name in ("", "."):
                    real = os.path.realpath(target)
                else:
                    real_parent = real_dirs.get(parent)
                    if real_parent is None:
                        real_parent = real_dirs[parent] = os.path.realpath(self.root / parent)
                    real = os.path.join(real_parent, name)
                    if os.path.islink(real):
                        real = os.path.realpath(real)
                if real != real_root and not real.startswith(inside):
                    reason = f"path {relative!r} is a link that leaves the dataset (to {real})"
            resolved[relative] = RecordError(reason) if reason else target
        return resolved

    def load_input(self, descriptor: Any, *, device: str = "cpu") -> Any:
        """The value of one descriptor: a Python scalar or a torch tensor on ``device``."""
        if isinstance(descriptor, Scalar):
            return descriptor.value
        if not isinstance(descriptor, TensorRef):
            raise RecordError("a 'random' input has no data; captured datasets never hold them")
        self.resolve(descriptor.path)
        return self.store.get(descriptor, device=device)

    def load_inputs(self, row: WorkloadRow, *, device: str = "cpu") -> dict[str, Any]:
        """Every input of a workload, in the definition's order when it is known."""
        definition = self.definitions.get(row.definition)
        names = list(definition.inputs) if definition else list(row.inputs)
        return {name: self.load_input(row.inputs[name], device=device) for name in names if name in row.inputs}

    def load_expected(self, receipt: Receipt, *, device: str = "cpu") -> dict[str, Any]:
        """The outputs the engine produced, as recorded by the receipt."""
        return {name: self.load_input(d, device=device) for name, d in receipt.expected_output.items()}


def open(path: str | os.PathLike, *, definitions: Iterable[str | os.PathLike] = ()) -> Dataset:  # noqa: A001
    """Open a dataset folder in any layout ikdata reads.

    Args:
        path: the dataset folder.
        definitions: extra folders of definitions, trusted because the user named them.

    Raises:
        UsageError: the folder does not exist.
    """
    return Dataset.open(path, definitions=definitions)
