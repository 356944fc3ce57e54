"""Turn a source dataset of any layout into importable form: ikdata rows, receipts and tensor sources.

Three layouts are read (see :mod:`ikdata.core.dataset`):

- **ikdata**: rows and receipts are taken as they are; a blob's digest is its file name.
- **seed** (the capture script of ``seeds/002``): blobs are named by digest under
  ``blob/workloads/<name>/``; receipts in ``results/captures.jsonl`` (a bare descriptor
  for one output); the report in ``results/replay.json``; definitions live outside the
  dataset, so ``--definitions`` must name them.
- **flashinfer** (FlashInfer Trace): blobs hold several tensors and are named by uuid,
  so every tensor is hashed here and becomes its own ikdata blob. Rows with ``random``
  inputs have no data: they are left out, or kept with ``keep_random`` and marked as
  having no expected output. FlashInfer rows carry no receipt; one is made for them
  (``expected_output: {}``, ``origin: "flashinfer-trace"``) so that lineage can show
  where they came from.

A folder in a capture source's own format (FlashInfer's recorder dumps and trace definitions) is first
read by that source's declared ``importer`` (:class:`ForeignRead`): staged as an ikdata dataset, or read
as it is with what is never imported listed (flashinfer-bench's solution traces).

Nothing here writes anything: SRC is read-only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ikdata.core import repeats
from ikdata.core import jsonl, manifest, schema
from ikdata.core.dataset import FLASHINFER, IKDATA, SEED, Dataset, seed_receipt
from ikdata.core.definitions import REORDERED_BY_WRITING, Definition
from ikdata.core.digest import bytes_digest
from ikdata.core.errors import RecordError
from ikdata.core.paths import PathResolver, text_refusal
from ikdata.core.problems import Problem
from ikdata.core.records import RandomInput, Receipt, TensorRef, WorkloadRow
from ikdata.core.safetensors_format import BLOB_KEY, TensorEntry
from ikdata.core.store import BlobCheck, blob_path, digest_from_path, rehash_file
from ikdata.core.cases import Case, Report, read_report

FLASHINFER_ORIGIN = "flashinfer-trace"


@dataclass(frozen=True)
class TensorSource:
    """Where the bytes of one tensor lie in SRC.

    Attributes:
        path: the file in SRC.
        tensor_key: the tensor's key in that file.
        canonical: the file is an ikdata blob (one tensor, canonical header), so it may be hardlinked.
        entry: the tensor's place in the file, once the file was rehashed (None: not read yet).
    """

    path: Path
    tensor_key: str
    canonical: bool
    entry: TensorEntry | None = None


@dataclass(frozen=True)
class LeftOut:
    """A workload left out of an import, or refused, and why."""

    uuid: str
    definition: str
    reason: str
    where: str | None = None  # the file the reason is about (a report), when it is not the row's
    pointer: str | None = None  # JSON pointer into ``where`` (a report's case)
    code: str = "unvalidated"  # "cannot-rejudge": its verdict is a claim import cannot check here

    def to_dict(self) -> dict:
        found = {"uuid": self.uuid, "definition": self.definition, "reason": self.reason}
        if self.where is not None:
            found.update(where=self.where, pointer=self.pointer)
        return found


@dataclass(frozen=True)
class ForeignRead:
    """What a capture source's declared ``importer`` (:class:`ikdata.core.features.Source`) makes of SRC, a
    folder in the source's own format (FlashInfer's recorder dumps and trace definitions, flashinfer-bench).

    Attributes:
        root: the dataset to read: a staging copy of SRC in ikdata's layout, or SRC itself.
        definitions: the definition folders to read it with (trusted: named by the user, or installed).
        staged: ``root`` is a staging copy (SRC is never written); the user's folder is still SRC's name.
        left_out: each call or file of SRC the staging left out, and why.
        traces: called with the opened dataset: what it holds that is never imported, each listed with why
            (flashinfer-bench's solution traces); its files' problems land in the dataset's own.
    """

    root: Path
    definitions: tuple[str, ...] = ()
    staged: bool = False
    left_out: tuple[LeftOut, ...] = ()
    traces: Callable[[Dataset], Iterable[LeftOut]] | None = None


@dataclass
class Source:
    """SRC in importable form: every descriptor already points at ``blob/sha256/...``.

    ``rows`` and ``receipts`` are keyed by uuid and hold ikdata-layout dicts; ``where``
    maps a uuid to the file:line of its row (for messages); ``tensors`` maps a digest to
    the bytes that carry it; ``report`` is SRC's replay report and ``cases`` maps a uuid to its cases there.
    """

    root: Path
    layout: str
    dataset_id: str
    definitions: dict[str, Definition]
    built: dict = field(default_factory=dict)  # the manifest SRC's files call for (never written)
    trusted: dict[str, Definition] = field(default_factory=dict)
    rows: dict[str, dict] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)  # uuid -> file:line of rows DST holds verbatim
    held_definitions: set = field(default_factory=set)  # the definitions of those rows
    where: dict[str, str] = field(default_factory=dict)
    receipts: dict[str, dict] = field(default_factory=dict)
    tensors: dict[str, TensorSource] = field(default_factory=dict)
    report: Report | None = None
    report_digest: str | None = None
    report_name: str | None = None
    cases: dict[str, list[Case]] = field(default_factory=dict)
    case_numbers: dict[str, list[int]] = field(default_factory=dict)  # uuid -> index in the report of each case
    left_out: list[LeftOut] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    paths: PathResolver | None = None  # SRC's path rule: every file read from SRC passes it first
    extra_definitions: tuple = ()  # trusted definition folders SRC's reading added (FlashInfer staging)
    definitions_alone: tuple = ()  # definitions SRC brings without workloads (a FlashInfer definitions folder)
    staged_from: Path | None = None  # the folder the user named, when SRC was staged from it (FlashInfer)

    @property
    def named(self) -> Path:
        """SRC as the user named it: the FlashInfer folder a staged dataset came from, else SRC itself."""
        return self.staged_from or self.root


def read_source(src: str | os.PathLike, *, definitions: Sequence[str | os.PathLike] = (),
                keep_random: bool = False, known: Mapping[str, dict] | None = None,
                known_receipts: Mapping[str, Any] | None = None) -> Source:
    """Read SRC (any layout) into a :class:`Source`; problems are collected, not raised.

    Args:
        src: the source dataset folder.
        definitions: extra definition folders (required for the seed layout).
        keep_random: keep FlashInfer rows with ``random`` inputs (marked, no expected output).
        known: DST's rows as written, by uuid. A SRC row equal to one of them is only noted
            in ``Source.held`` (DST has it; nothing to check, convert or bring in), so the
            cost of reading SRC grows with what is new to DST.
        known_receipts: DST's receipts' ``expected_output`` as written, by uuid: a SRC receipt
            of a held row is compared with it (a difference is a conflict) and otherwise skipped.

    Example:
        >>> source = read_source("seed-capture", definitions=["seed/definitions"])
        >>> len(source.rows), [p.message for p in source.problems]
    """
    named = src
    foreign = _foreign(Path(src), definitions)
    if foreign is not None:  # a source's own format (FlashInfer's dumps): staged as an ikdata dataset first
        src, definitions = foreign.root, foreign.definitions
    ds = Dataset.open(src, definitions=definitions)
    known = known or {}
    built = manifest.build(ds.root)
    source = Source(ds.root, ds.layout, source_id(ds, built), ds.definitions, built,
                    ds.trusted_definitions, paths=ds.paths)
    # Inputs or outputs out of run's order do not refuse an import: it writes them in run's order.
    source.problems += [p for p in ds.definition_problems if p.code not in REORDERED_BY_WRITING]
    if ds.layout == SEED and not definitions:
        source.problems.append(Problem(str(ds.root), "a seed-layout capture keeps its definitions outside the "
                                       "dataset; name them with --definitions DIR", code="seed-definitions"))
    hashed: dict[Path, Any] = {}
    for row in _records(ds, ds.workload_files(), "workload", known, source):
        _add_row(ds, row, source, hashed, keep_random)
    seen = repeats.Repeats()
    for receipt in _records(ds, ds.receipt_files(), "receipt", known_receipts or {}, source):
        where = f"{receipt.source}:{receipt.line}"
        record = receipt.to_dict()
        expected = {}
        for name, descriptor in receipt.expected_output.items():
            expected[name] = _convert(ds, descriptor, source, hashed, where, f"/expected_output/{name}")
        if any(v is None for v in expected.values()):
            continue
        record["expected_output"] = expected
        if not seen.see(receipt.uuid, receipt.expected_output, receipt.source, receipt.line):
            continue  # the same capture again (one workload), or a finding (core.repeats) listed below
        source.receipts[receipt.uuid] = record
    source.problems += seen.problems()
    if foreign is not None and foreign.traces is not None:  # flashinfer-bench's solution traces: each listed
        source.left_out += list(foreign.traces(ds))
    source.problems += ds.problems  # record files the path rule refused (links out of SRC)
    _read_report(ds, source)
    if foreign is not None and foreign.staged:
        source.staged_from = Path(named)
        source.left_out += foreign.left_out
        source.extra_definitions = tuple(definitions)
        if not source.rows:
            source.definitions_alone = tuple(sorted(source.definitions))
    return source


def _foreign(src: Path, definitions: Sequence[str | os.PathLike]) -> ForeignRead | None:
    """What the first capture source whose declared ``importer`` reads SRC makes of it (in declaration order),
    or None when SRC is in no source's own format."""
    from ikdata.core import features

    for source in features.sources():
        importer = source.hook("importer")  # its signature checked on first use
        found = importer(src, [str(d) for d in definitions]) if importer is not None else None
        if found is not None:
            return found
    return None


def _records(ds: Dataset, files: list[Path], kind: str, known: Mapping[str, dict], source: Source) -> Iterator[Any]:
    """Rows or receipts of SRC files; schema-checked unless they are rows DST already holds verbatim."""
    for path in files:
        display = ds.rel(path)
        content = jsonl.read(path, display=display)
        source.problems += content.problems
        for line, record in content.records:
            if kind == "receipt" and ds.layout == SEED:
                record = seed_receipt(record)  # no expected_output: an inputs-only row
            uuid = _uuid(record, kind)
            if uuid is not None and uuid in known and (kind == "workload" or uuid in source.held):
                if kind == "workload" and known[uuid] == record:
                    source.held[uuid] = f"{display}:{line}"  # DST holds this very row
                    source.held_definitions.add(record.get("definition"))
                    continue
                if kind == "receipt" and known[uuid] == record.get("expected_output"):
                    continue  # the receipt of a held row, naming the same outputs
            found = schema.check(kind, record, path=display, line=line)
            if found:
                source.problems += found
                continue
            try:
                if kind == "workload":
                    yield WorkloadRow.from_dict(record, source=display, line=line)
                else:
                    definition = ds.definitions.get(record["definition"])
                    yield Receipt.from_dict(record, source=display, line=line,
                                            output_names=list(definition.outputs) if definition else None)
            except (KeyError, TypeError, AttributeError) as exc:
                source.problems.append(Problem(display, f"malformed {kind}: {exc!r}", line))


def _uuid(record: Any, kind: str) -> str | None:
    try:
        return record["workload"]["uuid"] if kind == "workload" else record["uuid"]
    except (KeyError, TypeError):
        return None


def _add_row(ds: Dataset, row: WorkloadRow, source: Source, hashed: dict, keep_random: bool) -> None:
    where = f"{row.source}:{row.line}"
    if row.definition not in source.definitions:
        source.problems.append(Problem(row.source, f"unknown definition {row.definition!r}; pass the folder "
                                       "that defines it with --definitions", row.line, "/definition"))
        return
    randoms = [name for name, d in row.inputs.items() if isinstance(d, RandomInput)]
    if randoms and ds.layout != FLASHINFER:
        source.problems.append(Problem(row.source, f"random inputs {randoms} in a captured dataset",
                                       row.line, "/workload/inputs"))
        return
    if randoms and not keep_random:
        source.left_out.append(LeftOut(row.uuid, row.definition, f"random inputs {randoms} have no data "
                                       "(pass --keep-random to import it without expected output)"))
        return
    inputs = {name: _convert(ds, d, source, hashed, where, f"/workload/inputs/{name}") for name, d in row.inputs.items()}
    if any(v is None for v in inputs.values()):
        return
    previous = source.rows.get(row.uuid)
    record = {"definition": row.definition, "workload": {"uuid": row.uuid, "axes": row.axes, "inputs": inputs}}
    if previous is not None and previous != record:
        source.problems.append(Problem(row.source, f"uuid {row.uuid} is also used by a different row at "
                                       f"{source.where[row.uuid]}", row.line, "/workload/uuid"))
        return
    source.rows[row.uuid] = record
    source.where[row.uuid] = where
    if ds.layout == FLASHINFER:
        receipt = {"uuid": row.uuid, "definition": row.definition, "axes": row.axes, "expected_output": {},
                   "origin": FLASHINFER_ORIGIN, "source_row": where}
        if randoms:
            receipt["random_inputs"] = randoms
        source.receipts[row.uuid] = receipt


def _convert(ds: Dataset, descriptor: Any, source: Source, hashed: dict, where: str,
             pointer: str) -> dict | None:
    """An ikdata descriptor for a SRC descriptor; records where its bytes are.

    A path is checked textually here; whether links take it outside SRC is checked
    only for the files actually read (``ds.paths``), so tensors DST already holds
    cost no file-system calls.
    """
    if not isinstance(descriptor, TensorRef):
        return descriptor.to_dict()
    refusal = text_refusal(descriptor.path)
    if refusal is not None:
        source.problems.append(Problem(where, refusal.reason, pointer=pointer, code="unsafe-path"))
        return None
    path = ds.root / descriptor.path
    claimed = digest_from_path(descriptor.path)
    if claimed and descriptor.tensor_key == BLOB_KEY and ds.layout != FLASHINFER:
        canonical = ds.layout == IKDATA and descriptor.path == blob_path(claimed)
        source.tensors.setdefault(claimed, TensorSource(path, BLOB_KEY, canonical))
        return TensorRef(blob_path(claimed), BLOB_KEY).to_dict()
    # A file not named by its digest (FlashInfer: by uuid, several tensors): hash it now.
    if path not in hashed:
        refusal = ds.paths.refusal(descriptor.path)
        hashed[path] = BlobCheck(str(path), error=refusal.reason) if refusal else rehash_file(path)
    check = hashed[path]
    if check.error:
        source.problems.append(Problem(where, f"{descriptor.path}: {check.error}", pointer=pointer))
        return None
    for entry, digest in zip(check.entries, check.digests):
        if entry.key == descriptor.tensor_key:
            source.tensors.setdefault(digest, TensorSource(path, entry.key, False, entry))
            return TensorRef(blob_path(digest), BLOB_KEY).to_dict()
    source.problems.append(Problem(where, f"{descriptor.path} has no tensor {descriptor.tensor_key!r}; it holds "
                                   f"{[e.key for e in check.entries]}", pointer=pointer))
    return None


def _read_report(ds: Dataset, source: Source) -> None:
    """SRC's replay report, read by the one reader (:func:`ikdata.core.cases.read_report`) once the path rule
    allows it: its cases by uuid, or a problem naming the report and the JSON pointer of what is wrong."""
    path = ds.report_path
    if not os.path.lexists(path):
        return
    display = ds.rel(path)
    refusal = ds.paths.record_file_refusal(path)
    if refusal is not None:
        source.problems.append(refusal.problem())
        return
    try:
        report = read_report(path)
        data = path.read_bytes()  # the bytes the receipts name it by
    except RecordError as exc:
        source.problems.append(_report_problem(exc, display))
        return
    except OSError as exc:
        source.problems.append(Problem(display, f"cannot read the replay report: {exc}", code="malformed-json"))
        return
    source.report, source.report_digest, source.report_name = report, bytes_digest(data), display
    for number, case in enumerate(report.cases):
        source.cases.setdefault(case.uuid, []).append(case)
        source.case_numbers.setdefault(case.uuid, []).append(number)


def _report_problem(exc: RecordError, display: str) -> Problem:
    """The reader's error as a problem of SRC: at the report's dataset-relative name and the error's JSON pointer
    (``schema`` when the report is JSON but not a replay report, else ``malformed-json``)."""
    where = (exc.path or "") + (f":{exc.line}" if exc.line is not None else "") + \
        (f": {exc.pointer}" if exc.pointer else "")
    message = str(exc)[len(where) + 2:] if where and str(exc).startswith(where + ": ") else str(exc)
    return Problem(display, message, pointer=exc.pointer,
                   code="schema" if message.startswith("not a replay report") else "malformed-json")


def source_id(ds: Dataset, built: dict | None = None) -> str:
    """SRC's dataset id, computed without writing into SRC.

    For an ikdata dataset it is the id of the manifest its files call for; the caller
    compares it with the manifest SRC holds. For the seed layout the receipts and the
    report (which the manifest does not track) are folded in.
    """
    built = built if built is not None else manifest.build(ds.root)
    built = dict(built, files=dict(built["files"]))  # a copy: the seed's extra files go in the id only
    if ds.layout == SEED:
        for path in ds.receipt_files() + [ds.report_path]:
            if path.is_file():
                built["files"][ds.rel(path)] = bytes_digest(path.read_bytes())
    return manifest.dataset_id(built)
