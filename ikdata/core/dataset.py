"""Dataset: the layout on disk, iteration over definitions, workloads and receipts, and input loading.

Three layouts are read: ikdata's own, the seed capture script's (receipts in
``results/captures.jsonl`` or ``captures.jsonl``, blobs named by digest under
``blob/workloads/<name>/``), and a FlashInfer Trace dataset (blobs named by uuid,
several tensors per file, ``random`` inputs allowed). ikdata writes only its own.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable, Iterator

from ikdata.core import features, jsonl, schema
from ikdata.core.definitions import (DATASET, SHIPPED, USER, Definition, read_folder, shipped_folder)
from ikdata.core.errors import IkdataError, RecordError, UsageError
from ikdata.core.paths import PathResolver, UnsafePath
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


# What makes a folder a dataset, in the words every refusal uses (:class:`NotADataset`).
LOOKED_FOR = ("ikdata.json, receipts.jsonl or blob/sha256/ (an ikdata dataset), captures.jsonl or "
              "results/captures.jsonl (the seed capture layout), or a definitions/ or workloads/ folder "
              "(FlashInfer Trace)")


class NotADataset(IkdataError):
    """A folder that holds no dataset of any layout ikdata reads (exit 1).

    Attributes:
        path: the folder.
        looked_for: what would have made it a dataset (:data:`LOOKED_FOR`).
    """

    def __init__(self, path: str | os.PathLike, *, format: str | None = None,  # noqa: A002
                 inside: Path | None = None) -> None:
        self.path, self.looked_for = Path(path), LOOKED_FOR
        if format:  # a folder of a capture source's own format, which ikdata import reads
            super().__init__(f"{path}: {format}, not a dataset: import it first "
                             f"('ikdata import {path} DEST'), then use DEST")
            return
        if inside is not None:  # ds/workloads/gemm: a part of a dataset, never a place to init another
            super().__init__(f"{path}: a folder inside the dataset {inside}, not a dataset itself; "
                             f"name the dataset's folder: {inside}")
            return
        super().__init__(f"{path}: not a dataset: looked for {LOOKED_FOR} and found none; create one with "
                         f"'ikdata init {path}' or 'ikdata capture --into {path} -- CMD'")


def find_layout(root: Path) -> str | None:
    """Which layout a folder holds (ikdata, the seed capture script's, FlashInfer Trace), or None."""
    if (root / MANIFEST).exists() or (root / RECEIPTS).exists() or (root / "blob" / "sha256").is_dir():
        return IKDATA
    if any((root / p).exists() for p in _SEED_RECEIPTS):
        return SEED
    if (root / "definitions").is_dir() or (root / "workloads").is_dir():
        return FLASHINFER
    return None


def detect_layout(root: Path) -> str:
    """Which layout a folder holds; "" when it holds none (see :func:`require_dataset`)."""
    return find_layout(root) or ""


def require_dataset(root: str | os.PathLike) -> str:
    """The layout of the dataset folder ``root``.

    Raises:
        UsageError: no such folder.
        NotADataset: a folder holding no dataset (nothing is written into it).

    Example:
        >>> import tempfile
        >>> require_dataset(tempfile.mkdtemp())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ikdata.core.dataset.NotADataset: ...: not a dataset: looked for ikdata.json, ...
    """
    root = Path(root)
    if not root.is_dir():
        raise _not_a_folder(root)
    layout = find_layout(root)
    if layout in (None, FLASHINFER):  # a source's own folder format (FlashInfer's recorder): import it first
        for source in features.sources():
            recognises = source.hook("recognises")
            found = recognises(root) if recognises is not None else None
            if found:
                raise NotADataset(root, format=found)
    if layout is None:
        from ikdata.core.locking import refuse_remote

        refuse_remote(root)  # a remote whose first push never finished holds only its marker: say so
        raise NotADataset(root, inside=enclosing_dataset(root))
    return layout


def enclosing_dataset(path: Path) -> Path | None:
    """The nearest folder above ``path`` that holds an ikdata dataset (``ds`` for ``ds/workloads/gemm`` or
    ``ds/ikdata.json``), or None."""
    for parent in Path(path).parents:
        if find_layout(parent) == IKDATA:
            return parent
    return None


def _not_a_folder(root: Path) -> UsageError:
    """Why ``root`` (not a folder) cannot be read: absent, or a file, named with the dataset it is part of."""
    if not root.exists():
        return UsageError(f"{root}: no such dataset folder")
    inside = enclosing_dataset(root)
    if inside is None:
        return UsageError(f"{root}: a file, not a dataset folder")
    return UsageError(f"{root}: a file of the dataset {inside}, not a dataset folder; name the dataset's folder: "
                      f"{inside}")


def blob_paths(record: Any) -> list[str]:
    """The blob paths one row or receipt (a dict as read) names, once per use: the safetensors
    descriptors of its inputs and expected outputs. Malformed parts are skipped (validate reports them).

    The seed capture script wrote a receipt's ``expected_output`` as one bare descriptor
    instead of a map by output name; both forms are read here, and only here.
    """
    found: list[str] = []
    if type(record) is not dict:  # type checks, not isinstance: this runs once per row of stats and gc
        return found
    workload = record.get("workload")
    inputs = workload.get("inputs") if type(workload) is dict else None
    expected = record.get("expected_output")
    for descriptors in (inputs.values() if type(inputs) is dict else (),
                        ((expected,) if "type" in expected else expected.values()) if type(expected) is dict else ()):
        for d in descriptors:
            if type(d) is dict and d.get("type") == "safetensors":
                path = d.get("path")
                if type(path) is str:
                    found.append(path)
    return found


@dataclass(frozen=True)
class BlobReferences:
    """Which blobs the rows and receipts of a dataset use.

    Attributes:
        uses: blob path as written -> how many descriptors name it.
        problems: unreadable lines (torn, malformed) whose references are unknown.
    """

    uses: Counter
    problems: tuple[Problem, ...] = ()

    @property
    def paths(self) -> set[str]:
        return set(self.uses)


def seed_receipt(record: Any) -> Any:
    """A seed-layout receipt as ikdata reads it: one without ``expected_output`` (a workload the seed
    script imported, with no engine output) is an inputs-only receipt, as FlashInfer rows are."""
    if isinstance(record, dict) and "expected_output" not in record:
        return {**record, "expected_output": {}}
    return record


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
        """Open a dataset folder (or return the :class:`Dataset` given); ``definitions`` are extra, trusted
        definition folders. Raises :class:`NotADataset` for a folder that holds no dataset."""
        if isinstance(path, Dataset):  # library functions take a path or a Dataset alike
            extra = tuple(Path(d) for d in definitions if Path(d) not in path.definition_folders)
            return path if not extra else cls(path.root, path.layout, path.definition_folders + extra)
        root = Path(path)
        layout = require_dataset(root)
        folders = tuple(Path(d) for d in definitions)
        for folder in folders:
            if not folder.is_dir():
                raise UsageError(f"{folder}: --definitions must name a folder of definition JSON files")
        return cls(root, layout, folders)

    @property
    def store(self) -> BlobStore:
        return BlobStore(self.root)

    @functools.cached_property
    def paths(self) -> PathResolver:
        """The path rule for this dataset (one folder cache for the dataset's life)."""
        return PathResolver(self.root)

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
            files, problems = self._record_files(folder, "*.json")
            found, read_problems = read_folder(folder, origin=DATASET, display_root=self.root, paths=files)
            problems += read_problems
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
        """Definitions trusted by name (:func:`ikdata.core.trust.is_trusted`): shipped ones, those of
        user-named folders, and the dataset's exact instances of shipped templates."""
        from ikdata.core.templates import trusted_instances

        trusted = trusted_instances(self.definitions)
        shipped, _ = read_folder(shipped_folder(), origin=SHIPPED)
        trusted.update(shipped)
        for extra in self.definition_folders:
            trusted.update(read_folder(extra, origin=USER)[0])
        return trusted

    # -- record files ------------------------------------------------------------------------

    def _record_files(self, folder: Path, pattern: str) -> tuple[list[Path], list[Problem]]:
        """The files matching ``pattern`` under ``folder`` that the path rule lets the dataset read
        (regular files inside it, links followed), and a problem for each one refused."""
        refusal = self.paths.record_file_refusal(folder, folder=True)
        if refusal is not None:
            return [], [refusal.problem()]
        files, problems = [], []
        for path in sorted(folder.rglob(pattern)):
            refusal = self.paths.record_file_refusal(path)
            if refusal is None:
                files.append(path)
            else:
                problems.append(refusal.problem())
        # rglob does not descend into linked folders; one that leaves the dataset is said, not skipped silently.
        for parent, names, _ in os.walk(folder):
            for name in names:
                linked = os.path.join(parent, name)
                if os.path.islink(linked):
                    refusal = self.paths.record_file_refusal(Path(linked), folder=True)
                    if refusal is not None:
                        problems.append(refusal.problem())
        return files, problems

    def _note(self, problems: Iterable[Problem]) -> None:
        self.problems += [p for p in problems if p not in self.problems]

    # -- workloads ---------------------------------------------------------------------------

    def workload_files(self) -> list[Path]:
        """The row files; one that is a link out of the dataset (or a ``workloads/`` folder that
        is one) is left out and reported in ``self.problems``."""
        folder = self.root / "workloads"
        if not folder.is_dir():
            return []
        files, problems = self._record_files(folder, "*.jsonl")
        self._note(problems)
        return files

    def read_records(self, path: Path, kind: str, *, validate: bool) -> Iterator[tuple[int, dict]]:
        """Raw records of one JSONL file with their lines; torn, malformed and (with ``validate``)
        schema-breaking lines land in ``self.problems`` instead."""
        display = self.rel(path)
        # one line at a time: a reader of a million-row file never holds every record (issue 15)
        for line, record in jsonl.iter_records(path, self.problems, display=display, dataset=self.root):
            if kind == "receipt" and self.layout == SEED:
                record = seed_receipt(record)
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
        """The receipt files of this layout; one that is a link out of the dataset is left out and
        reported in ``self.problems``."""
        names = (RECEIPTS,) if self.layout == IKDATA else _SEED_RECEIPTS if self.layout == SEED else ()
        files = []
        for name in names:
            path = self.root / name
            if os.path.lexists(path):
                refusal = self.paths.record_file_refusal(path)
                if refusal is None:
                    files.append(path)
                else:
                    self._note([refusal.problem()])
        return files

    def blob_references(self) -> BlobReferences:
        """Which blobs the rows and receipts use (:func:`blob_paths` of every record), one pass,
        no schema checks: what a pull fetches, what stats counts."""
        problems: list[Problem] = []
        uses = Counter(self.iter_blob_references(problems))
        return BlobReferences(uses, tuple(problems))

    def iter_blob_references(self, problems: list[Problem]) -> Iterator[str]:
        """Every blob path the rows, receipts and every family's own records name, once per use,
        streamed (gc builds its set from it without holding the uses); unreadable lines are
        appended to ``problems``."""
        for path in self.workload_files() + self.receipt_files():  # streamed: no file is held whole
            for _, record in jsonl.iter_records(path, problems, display=self.rel(path)):
                yield from blob_paths(record)
        for references in features.hooks("references", self.root):  # every family's own records (trajectories, models)
            more, more_problems = references(self.root)
            yield from more
            problems += more_problems

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
        """The path of a descriptor path under the root, by the path rule (:mod:`ikdata.core.paths`).

        Raises:
            UnsafePath: the path is absolute, has '..' or a backslash, is not normalised, or a link
                takes it outside the dataset.
        """
        return self.paths.resolve(relative, where=where or None)

    def resolve_all(self, relatives: Iterable[str], *,
                    known_inside: Collection[str] = ()) -> dict[str, Path | UnsafePath]:
        """``resolve`` for many descriptor paths at once: path -> path, or the refusal (not raised).

        ``known_inside``: regular files a directory scan found inside the dataset (no ``lstat``).
        """
        return self.paths.resolve_all(relatives, known_inside=known_inside)

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

    def load_expected(self, record: Receipt | WorkloadRow, *, device: str = "cpu") -> dict[str, Any]:
        """The outputs the engine produced for a workload: given its receipt, or its row (then its receipt,
        :meth:`receipt_of`). Raises RecordError for a row without a receipt (nothing was recorded)."""
        receipt = record if isinstance(record, Receipt) else self.receipt_of(record)
        return {name: self.load_input(d, device=device) for name, d in receipt.expected_output.items()}

    def receipt_of(self, row: WorkloadRow) -> Receipt:
        """The receipt of a workload row: its first, as every reader keeps (:mod:`ikdata.core.repeats`). The
        receipts are read once per Dataset, on the first call."""
        if not isinstance(row, WorkloadRow):
            raise UsageError(f"expected a WorkloadRow (from ds.workloads()) or a Receipt (from ds.receipts()), "
                             f"got {type(row).__name__}")
        receipt = self._first_receipts.get(row.uuid)
        if receipt is None:
            raise RecordError(f"workload {row.uuid} ({row.definition}) has no receipt in {self.root}, so no "
                              "output was recorded for it (FlashInfer Trace rows have none)",
                              path=row.source or None, line=row.line or None)
        return receipt

    @functools.cached_property
    def _first_receipts(self) -> dict[str, Receipt]:
        first: dict[str, Receipt] = {}
        for receipt in self.receipts():
            first.setdefault(receipt.uuid, receipt)
        return first


def open(path: str | os.PathLike, *, definitions: Iterable[str | os.PathLike] = ()) -> Dataset:  # noqa: A001
    """Open a dataset folder in any layout ikdata reads.

    Args:
        path: the dataset folder (or a :class:`Dataset`, returned as it is).
        definitions: extra folders of definitions, trusted because the user named them.

    Raises:
        UsageError: the folder does not exist.
        NotADataset: the folder holds no dataset (:func:`require_dataset` says what was looked for).

    Example:
        >>> import tempfile, ikdata
        >>> from ikdata.core.layout import init_dataset
        >>> root = tempfile.mkdtemp() + "/ds"
        >>> _ = init_dataset(root)
        >>> ds = ikdata.open(root)
        >>> ds.layout, list(ds.workloads())
        ('ikdata', [])
    """
    return Dataset.open(path, definitions=definitions)
