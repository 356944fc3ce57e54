"""Validate a dataset: every record, every reference between records, every blob header; with
``deep``, every blob's digest. All problems are collected; nothing is modified."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import orjson

from ikdata.core import fast_rows, features, repeats, spill
from ikdata.core.dataset import Dataset
from ikdata.core.features import hooks as family_hooks
from ikdata.core.definitions import DATASET, Definition
from ikdata.core.digest import bytes_digest
from ikdata.core.errors import RecordError, StoreError, UsageError
from ikdata.core.problems import Problem
from ikdata.core.record_kinds import KINDS, RecordKind
from ikdata.core.records import TensorRef
from ikdata.core.safetensors_format import TensorEntry, canonical_problem
from ikdata.core.progress import Progress, ProgressCallback
from ikdata.core.packs import check_packed_uses, has_packs
from ikdata.core.store import BlobCheck, digest_from_path, read_entries, rehash_files


@dataclass
class ValidationReport:
    """The outcome of a validation: every problem, and how much was looked at."""

    problems: list[Problem] = field(default_factory=list)
    definitions: int = 0
    workloads: int = 0
    receipts: int = 0
    counted: dict[str, int] = field(default_factory=dict)  # what each family's validate hook counted
    blobs_checked: int = 0
    blobs_rehashed: int = 0
    deep: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def __getattr__(self, name: str) -> int:
        """A family's count by the name its validate hook gave it (``report.trajectories``)."""
        counted = self.__dict__.get("counted") or {}
        if name in counted:
            return counted[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_dict(self) -> dict:
        return {"ok": self.ok, "deep": self.deep, "definitions": self.definitions,
                "workloads": self.workloads, "receipts": self.receipts, **self.counted,
                "blobs_checked": self.blobs_checked, "blobs_rehashed": self.blobs_rehashed,
                "problems": [p.to_dict() for p in self.problems]}

    def json_lines(self) -> Iterator[dict]:
        """The report as JSON Lines records, what ``--json-lines`` prints one per line: each problem
        (``{"kind": "problem", ...}``), then the summary (``"kind": "summary"``, ``problems``: how many)."""
        for problem in self.problems:
            yield {"kind": "problem", **problem.to_dict()}
        summary = self.to_dict()
        summary["problems"] = len(self.problems)
        yield {"kind": "summary", **summary}


@dataclass(slots=True)
class _Use:
    """One place a tensor descriptor is used, to check against its blob once headers are read."""

    where: str
    line: int | None
    pointer: str
    ref: TensorRef
    dtype: str | None
    shape: tuple[int, ...] | None
    context: str


class _Uses:
    """Every tensor use, held until the blob headers are read: 3 integers each (the site: file,
    pointer, expected dtype and shape, context, numbered once; the line; the blob ref, numbered
    once: :class:`ikdata.core.spill.Interned`), on disk past the spill threshold."""

    def __init__(self) -> None:
        self._records = spill.RecordList(3)
        self._sites, self._refs = spill.Interned(), spill.Interned()

    def add(self, where: str, line: int | None, pointer: str, ref: TensorRef, dtype: str | None,
            shape: tuple[int, ...] | None, context: str) -> None:
        self._records.append(self._sites.id((where, pointer, dtype, None if shape is None else tuple(shape), context)),
                             -1 if line is None else line, self._refs.id((ref.path, ref.tensor_key)))

    def paths(self) -> list[str]:
        """Each blob path used, once, in the order first used."""
        return list(dict.fromkeys(path for path, _ in self._refs.values))

    def __len__(self) -> int:
        return len(self._records)

    def raw(self) -> Iterator[tuple[tuple, int | None, TensorRef]]:
        """(site, line, ref) of every use, in order; a site is (where, pointer, dtype, shape, context)."""
        sites, refs = self._sites.values, self._refs.values
        made: dict[int, TensorRef] = {}  # one TensorRef per blob ref in flight, not kept
        for site, line, ref in self._records:
            found = made.get(ref)
            if found is None:
                if len(made) > 4096:
                    made.clear()
                found = made[ref] = TensorRef(*refs[ref])
            yield sites[site], None if line < 0 else line, found

    def __iter__(self) -> Iterator[_Use]:
        for (where, pointer, dtype, shape, context), line, ref in self.raw():
            yield _Use(where, line, pointer, ref, dtype, shape, context)

    def close(self) -> None:
        self._records.close()


class _Shapes:
    """``Definition.shape_of`` remembered per (definition, tensor, axes): rows repeat a few shapes."""

    def __init__(self) -> None:
        self._known: dict[tuple, tuple[int, ...] | None] = {}

    def of(self, definition: Definition, name: str, axes: tuple) -> tuple[int, ...] | None:
        key = (id(definition), name, axes)
        try:
            return self._known[key]
        except KeyError:
            pass
        except TypeError:  # an axis value that is not hashable: not remembered
            return definition.shape_of(name, dict(axes))
        if len(self._known) > 1 << 16:
            self._known.clear()
        found = self._known[key] = definition.shape_of(name, dict(axes))
        return found


_shared = sys.intern


def _row_key(record: dict) -> bytes:
    """16 bytes that differ between different row contents (canonical JSON, hashed): what the
    duplicate-uuid check keeps per row instead of the row itself."""
    return bytes.fromhex(bytes_digest(orjson.dumps(record, option=orjson.OPT_SORT_KEYS))[:32])


def validate(ds: Dataset | str | os.PathLike, *, deep: bool = False, jobs: int | None = None,
             progress: ProgressCallback | None = None) -> ValidationReport:
    """Check a dataset and return every problem found.

    Args:
        ds: the dataset, as returned by :func:`ikdata.open`, or its folder.
        deep: also rehash every blob and compare with the digest its name carries.
        jobs: threads for reading and hashing blobs (default: all cores).
        progress: called with :class:`~ikdata.core.progress.Progress` ("rehash", blobs done, total)
            as a deep validation rehashes blobs (possibly from another thread).

    Example:
        >>> import tempfile, ikdata
        >>> from ikdata.core.layout import init_dataset
        >>> root = tempfile.mkdtemp() + "/gemm"
        >>> _ = init_dataset(root)
        >>> report = ikdata.validate(root, deep=True)  # a folder or ikdata.open(root) alike
        >>> report.ok, [str(p) for p in report.problems]
        (True, [])
    """
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"--jobs {jobs!r}: expected a whole number of threads, 1 or more")
    ds = Dataset.open(ds)  # a path or a Dataset alike
    report = ValidationReport(deep=deep)
    prehash = _prehash(ds, jobs, progress) if deep else None  # hashes blobs while the records are checked
    # Per-row state (each uuid's row and first receipt, each tensor use) moves to temporary files past the spill
    # threshold (ikdata.core.spill), so memory stays bounded at 10M rows; results are the same.
    rows, first_receipts, uses = spill.UuidMap(), spill.UuidMap(), _Uses()
    try:
        _validate(ds, report, prehash, rows, first_receipts, uses, deep=deep, jobs=jobs, progress=progress)
    finally:
        if prehash is not None:
            prehash.cancel()
        rows.close()
        first_receipts.close()
        uses.close()
    return report


PROCESS_ENV = "IKDATA_REHASH_PROCESS"  # 1: rehash in a process of its own always, 0: never; unset: past PROCESS_FROM
PROCESS_FROM = 2 << 20  # receipts.jsonl bytes (about 8,000 receipts) from which a process pays for its start


def _prehash(ds: Dataset, jobs: int | None, progress: ProgressCallback | None) -> "_Prehash | _ProcessPrehash":
    """The blobs rehashed from the start of a deep validation: in a process of its own for a large dataset
    (both cores busy: :mod:`ikdata.core.rehash_process`), on threads of this one for a small one."""
    chosen = os.environ.get(PROCESS_ENV, "")
    if chosen == "1" or (chosen != "0" and _size(ds.root / "receipts.jsonl") >= PROCESS_FROM):
        try:
            return _ProcessPrehash(ds, jobs, progress)
        except OSError:  # no process can be started here: threads
            pass
    return _Prehash(ds, jobs, progress)


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class _ProcessPrehash:
    """:class:`_Prehash`'s contract, kept by a child process (:class:`ikdata.core.rehash_process.RehashProcess`)
    that scans and rehashes every regular file under ``blob/``; links are left to the foreground as there."""

    def __init__(self, ds: Dataset, jobs: int | None, progress: ProgressCallback | None = None) -> None:
        from ikdata.core.rehash_process import RehashProcess

        inside = ds.paths.refusal("blob") is None  # blob/ is not a link out of the dataset: its files are read
        report = (lambda done, total: progress(Progress("rehash", done, total))) if progress else None
        self._ds, self._scan = ds, None
        self._child = RehashProcess(str(ds.root), jobs or os.cpu_count() or 1, inside, report)

    def _scanned(self) -> tuple[dict[str, int], list[str]]:
        """The child's scan; made here if the child died before sending it (the blobs it did not rehash are
        rehashed by the foreground, as links are: nothing is skipped)."""
        if self._scan is None:
            stored, paths = self._child.scanned()
            if self._child.error is not None and not stored:
                stored, inside = _scan(self._ds)
                paths = sorted(inside)
            self._scan = stored, paths
        return self._scan

    @property
    def stored(self) -> dict[str, int]:
        return self._scanned()[0]

    @property
    def paths(self) -> list[str]:
        return self._scanned()[1]

    def wait(self) -> dict[str, _Checked]:
        found = self._child.wait()
        shared = _ENTRIES.setdefault
        for rel, check in found.items():  # equal header entries shared: one small entry per blob
            if not isinstance(check, str) and len(_ENTRIES) < 1 << 16:
                found[rel] = (shared(check[0], check[0]), check[1])
        return found

    def cancel(self) -> None:
        self._child.cancel()


class _Prehash:
    """Rehash every regular file under ``blob/`` on background threads, from the start of a deep
    validation: the records are checked (GIL-bound) while the blobs are read and hashed (GIL
    released). Symlinks, and a ``blob/`` folder that is itself a link out of the dataset, are
    left to the foreground, which refuses links that leave the dataset before reading them."""

    def __init__(self, ds: Dataset, jobs: int | None, progress: ProgressCallback | None = None) -> None:
        self.stored, inside = _scan(ds)
        self.paths = sorted(inside)
        self.results: dict[str, _Checked] = {}
        self.progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(str(ds.root), jobs), daemon=True,
                                        name="ikdata-prehash")
        self._thread.start()

    def _run(self, root: str, jobs: int | None) -> None:
        checks = rehash_files([os.path.join(root, p) for p in self.paths], jobs=jobs)
        try:
            for rel, check in zip(self.paths, checks):
                self.results[rel] = _checked(rel, check)
                if self.progress:
                    self.progress(Progress("rehash", len(self.results), len(self.paths)))
                if self._stop.is_set():
                    break
        finally:
            checks.close()

    def wait(self) -> dict[str, _Checked]:
        self._thread.join()
        return self.results

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join()


def _validate(ds: Dataset, report: ValidationReport, prehash: _Prehash | None, rows_by_uuid: spill.UuidMap,
              first_receipts: spill.UuidMap, uses: _Uses, *, deep: bool, jobs: int | None, progress: ProgressCallback | None = None) -> None:
    problems = report.problems
    definitions = ds.definitions
    problems += ds.definition_problems
    misnamed = _misnamed_definitions(ds, problems)
    report.definitions = len(definitions)
    # rows_by_uuid: uuid -> (file, line, content key, definition, axes items): what receipts and
    # duplicates need, not the row itself
    randoms: list[tuple[str, str, Problem]] = []  # (uuid, input, problem) unless its receipt declares it
    shapes, clean_layouts = _Shapes(), set()

    _check_workloads(ds, report, rows_by_uuid, uses, randoms, shapes, clean_layouts, misnamed)
    declared: dict[str, list[str]] = {}
    contexts: dict[str, tuple[str, int | None]] = {}  # shared contexts receipts name (core.verdicts): checked once
    seen = repeats.Repeats(first_receipts)  # one uuid, two receipts: the one rule (core.repeats)
    _check_receipts(ds, report, rows_by_uuid, uses, shapes, seen, declared, contexts)
    problems += seen.problems()
    problems += [p for uuid, name, p in randoms if name not in declared.get(uuid, ())]
    problems += _context_problems(ds, contexts)
    problems += ds.problems
    for check_family in family_hooks("validate"):  # every family's own records (trajectories, models)
        found = check_family(ds, rows_by_uuid)
        problems += found.problems
        report.counted.update(found.counted)
        for use in found.uses:
            uses.add(*use)
    problems += _schema_problems(ds)  # every other kind with a schema (capture's census): record by record

    _check_blobs(ds, uses, report, deep=deep, jobs=jobs, prehash=prehash, progress=progress)

    if ds.layout == "ikdata":
        _check_reports(ds, problems)
        problems += _unexplained_files(ds)
    if ds.layout == "ikdata" and not (ds.root / "ikdata.json").exists():
        problems.append(_missing_manifest(ds))
    if ds.layout == "ikdata" and (ds.root / "ikdata.json").exists():
        from ikdata.core.layout import repair_hint
        from ikdata.core.manifest import check_manifest

        stale = check_manifest(ds)
        # a refused file is said once (the manifest refuses it too); a blob/ linked out, by each use of it
        said = {p.path for p in problems if p.code == "unsafe-path"}
        said |= {"blob"} if said else set()
        problems += [p for p in stale if p.code != "unsafe-path" or p.path not in said]
        hint = repair_hint(ds.root, manifest_stale=bool(stale))  # a killed writer that repair can finish
        if hint:
            problems.append(Problem("ikdata.json", hint, code="needs-repair"))



def _check_workloads(ds: Dataset, report: ValidationReport, rows_by_uuid: spill.UuidMap, uses: _Uses,
                     randoms: list[tuple[str, str, Problem]], shapes: _Shapes, clean_layouts: set,
                     misnamed: dict[str, str]) -> None:
    """Every workload row: schema (a block of rows per compiled call, :mod:`ikdata.core.fast_rows`), duplicate
    uuids, the definition it names, its inputs and axes; each tensor use kept for the blob checks. The loop is
    the hot path of a large dataset: a row whose layout and inputs were seen before costs a few dict lookups."""
    problems = report.problems
    definitions = ds.definitions
    rows_get = rows_by_uuid.get
    records, refs = uses._records, uses._refs
    ref_ids, new_ref = refs._ids, refs.id
    flat: list[int] = []  # a block's uses (site, line, ref), appended to the records at once
    push = flat.extend
    sites: dict[tuple, int | None] = {}  # (file, definition, input, axes) -> its use site, None: not a tensor use
    for path in ds.workload_files():
        display = ds.rel(path)
        for block in fast_rows.valid_blocks(path, "workload", ds.problems, display=display, dataset=ds.root):
            report.workloads += len(block)
            for line, record in block:
                workload = record["workload"]
                uuid = workload["uuid"]
                previous = rows_get(uuid)
                key = _row_key(record)
                if previous is not None and previous[2] != key:
                    problems.append(Problem(display, f"uuid {uuid} is also used by a different row at "
                                            f"{previous[0]}:{previous[1]}; expected one content per uuid",
                                            line, "/workload/uuid", "duplicate-uuid"))
                    continue
                axes, inputs, name = workload["axes"], workload["inputs"], record["definition"]
                axes_items = tuple(axes.items())
                rows_by_uuid[uuid] = (display, line, key, _shared(name), axes_items)
                definition = definitions.get(name)
                if definition is None:
                    hint = f"; {misnamed[name]} has that file name but another 'name'" if name in misnamed else ""
                    problems.append(Problem(display, f"unknown definition {name!r}; expected one of "
                                            f"definitions/**/*.json or a folder passed with --definitions{hint}",
                                            line, "/definition", "unknown-definition"))
                    continue
                layout = (id(definition), tuple(inputs), tuple(axes))  # which inputs and axes, not their values
                if layout not in clean_layouts:
                    before = len(problems)
                    _check_names(definition, inputs, axes, display, line, problems)
                    if len(problems) == before and len(clean_layouts) < 1 << 16:
                        clean_layouts.add(layout)
                for input_name, raw in inputs.items():
                    if raw["type"] != "safetensors":
                        records.extend(flat)  # the slow path adds its use itself: the order stays the rows'
                        flat.clear()
                        _check_input(ds, definition, workload, input_name, raw, display, line, problems, uses,
                                     randoms, shapes, axes_items)
                        continue
                    where = (display, layout[0], input_name, axes_items)
                    try:
                        site = sites[where]
                    except KeyError:
                        site = _site(definition, input_name, display, uses, shapes, axes_items)
                        if len(sites) > 1 << 16:
                            sites.clear()
                        sites[where] = site
                    except TypeError:  # an axis value that is not hashable: no site remembered
                        site = _site(definition, input_name, display, uses, shapes, axes_items)
                    if site is None:  # not an input of the definition, or a scalar one: said the slow way
                        records.extend(flat)
                        flat.clear()
                        _check_input(ds, definition, workload, input_name, raw, display, line, problems, uses,
                                     randoms, shapes, axes_items)
                        continue
                    pair = (raw["path"], raw["tensor_key"])
                    ref = ref_ids.get(pair)
                    push((site, line, new_ref(pair) if ref is None else ref))
            records.extend(flat)
            flat.clear()


def _site(definition: Definition, name: str, display: str, uses: _Uses, shapes: _Shapes,
          axes_items: tuple) -> int | None:
    """The use site of tensor input ``name`` of rows of ``definition`` with these axes in ``display`` (file,
    pointer, dtype and shape expected, context), numbered once; None where the input is not a tensor input."""
    spec = definition.inputs.get(name)
    if spec is None or spec.shape is None:
        return None
    shape = shapes.of(definition, name, axes_items)
    return uses._sites.id((display, f"/workload/inputs/{name}", spec.torch_dtype,
                           None if shape is None else tuple(shape), f"input {name!r} of {definition.name!r}"))


def _receipt_outputs(record: dict, definition: Definition | None) -> dict[str, dict]:
    """A receipt's expected outputs, name -> descriptor dict; the seed's bare descriptor named as
    :meth:`ikdata.core.records.Receipt.from_dict` names it (the definition's first output, else 'output')."""
    expected = record.get("expected_output") or {}
    if "type" in expected:
        names = list(definition.outputs) if definition else None
        return {names[0] if names else "output": expected}
    return expected


def _descriptor_key(raw: dict) -> tuple:
    """What a descriptor is, as its value type keeps it (extra fields ignored): for the repeats' key."""
    kind = raw["type"]
    if kind == "safetensors":
        return ("safetensors", raw["path"], raw["tensor_key"])
    if kind == "scalar":
        return ("scalar", raw["value"])
    return ("random",)


def _check_receipts(ds: Dataset, report: ValidationReport, rows_by_uuid: spill.UuidMap, uses: _Uses,
                    shapes: _Shapes, seen: repeats.Repeats, declared: dict[str, list[str]],
                    contexts: dict[str, tuple[str, int | None]]) -> None:
    """Every receipt: schema (a block per compiled call), repeats of a uuid, the row and outputs it names;
    each output tensor kept for the blob checks. Read as the records they are (no value objects per receipt)."""
    from ikdata.core.dataset import seed_receipt

    problems = report.problems
    definitions = ds.definitions
    convert = seed_receipt if ds.layout == "seed" else None
    dumps, sort_keys = orjson.dumps, orjson.OPT_SORT_KEYS
    records, refs = uses._records, uses._refs
    ref_ids, new_ref = refs._ids, refs.id
    flat: list[int] = []  # a block's uses (site, line, ref), appended to the records at once
    push = flat.extend
    sites: dict[tuple, int] = {}  # (file, definition, output, axes) -> its use site
    for path in ds.receipt_files():
        source = ds.rel(path)
        for block in fast_rows.valid_blocks(path, "receipt", ds.problems, display=source, dataset=ds.root,
                                            convert=convert):
            report.receipts += len(block)
            rows_get = rows_by_uuid.get_many([record["uuid"] for _, record in block]).get  # one query per 900 on disk
            for line, record in block:
                uuid, name = record["uuid"], record["definition"]
                definition = definitions.get(name)
                outputs = _receipt_outputs(record, definition)
                if len(outputs) == 1:  # the common receipt, one output: its name and blob ref (numbered once)
                    (output, raw), = outputs.items()
                    pair = (raw.get("path"), raw.get("tensor_key")) if raw["type"] == "safetensors" else None
                    ref = None if pair is None else ref_ids.get(pair)
                    key = (output, new_ref(pair) if pair is not None and ref is None else ref, _descriptor_key(raw)
                           if pair is None else None)
                else:  # 16 bytes of the outputs' canonical digest (orjson's own bytes hold a 4 KB buffer each)
                    key = bytes.fromhex(bytes_digest(dumps({k: _descriptor_key(v) for k, v in outputs.items()},
                                                           option=sort_keys))[:32])
                if not seen.see_key(uuid, key, source, line):
                    continue  # a repeat: the same capture again (clean), or a finding listed below
                validation = record.get("validation")
                if validation and isinstance(validation.get("shared"), str):
                    contexts.setdefault(validation["shared"], (source, line))
                if not outputs and isinstance(record.get("random_inputs"), list):
                    declared[uuid] = record["random_inputs"]  # imported with --keep-random
                row = rows_get(uuid)
                if row is None:
                    problems.append(Problem(source, f"receipt names workload {uuid}, which no workload row holds",
                                            line, "/uuid", "unknown-workload"))
                    continue
                if row[3] != name:
                    problems.append(Problem(source, f"receipt says definition {name!r} but the row at "
                                            f"{row[0]}:{row[1]} says {row[3]!r}", line, "/definition",
                                            "receipt-mismatch"))
                for output, raw in outputs.items():
                    if definition is not None and output not in definition.outputs:
                        problems.append(Problem(source, f"output {output!r} is not an output of "
                                                f"{definition.name!r}; expected {sorted(definition.outputs)}",
                                                line, f"/expected_output/{output}", "receipt-output"))
                        continue
                    if raw["type"] != "safetensors":
                        continue
                    where = (source, name, output, row[4])
                    site = sites.get(where)
                    if site is None:
                        spec = definition.outputs[output] if definition else None
                        shape = shapes.of(definition, output, row[4]) if definition else None
                        site = uses._sites.id((source, f"/expected_output/{output}",
                                               spec.torch_dtype if spec else None,
                                               None if shape is None else tuple(shape),
                                               f"output {output!r} of {name!r}"))
                        if len(sites) > 1 << 16:
                            sites.clear()
                        sites[where] = site
                    pair = (raw["path"], raw["tensor_key"])
                    ref = ref_ids.get(pair)
                    push((site, line, new_ref(pair) if ref is None else ref))
            records.extend(flat)
            flat.clear()

# The record kinds validate reads with readers of its own, which check their schema and what they name.
_OWN_READERS = ("definition", "workload", "receipt", "validation", "report")


def schema_checked_kinds() -> tuple[RecordKind, ...]:
    """The record kinds validate checks by their schema alone, record by record: those with a schema that no
    reader of validate's own (definitions, rows, receipts, shared validations, reports) and no family's
    ``validate`` hook reads. A kind declared with a schema is checked with no code here."""
    by_family = {kind for feature in features.features() for kind in feature.kinds
                 if feature.family is not None and feature.family.validate is not None}
    return tuple(k for k in KINDS if k.schema is not None and k.schema not in _OWN_READERS and k not in by_family)


def _schema_problems(ds: Dataset) -> list[Problem]:
    """Every torn or malformed line, and every record off its schema, in the files of :func:`schema_checked_kinds`
    (files the path rule refuses are named, never read)."""
    from ikdata.core.record_checks import check_file, pattern_problem

    problems: list[Problem] = []
    for kind in schema_checked_kinds():
        place = ds.root / kind.top
        if not kind.folder:
            files = [place] if place.is_file() else []
        elif os.path.lexists(place):
            files, refused = ds._record_files(place, f"*{kind.suffix}")
            problems += refused
        else:
            continue
        for path in files:
            misnamed = pattern_problem(ds.rel(path))  # census/sub/x.jsonl: named, never read (import refuses it)
            if misnamed is not None:
                problems.append(misnamed)
                continue
            problems += check_file(kind.schema, path, display=ds.rel(path), dataset=ds.root,
                                   lines=kind.suffix == ".jsonl")
    return problems


def _unexplained_files(ds: Dataset) -> list[Problem]:
    """Files in record folders that no record kind describes (a binary saved as ``reports/x.jsonl``), and the
    temp files of writers that were killed (the one temp-file rule, :func:`ikdata.core.paths.stale_temp`): each
    named by its path, with what to do."""
    import shlex

    from ikdata.core.paths import sweep_temps
    from ikdata.core.record_checks import shown, unknown_files

    found = unknown_files(ds.root)
    repair = f"ikdata repair {shlex.quote(str(ds.root))}"
    for relative in sweep_temps(ds.root, recursive=True, remove=False):
        found.append(Problem(shown(relative.replace(os.sep, "/")), f"a temporary file of a writer that was killed; "
                             f"run '{repair}' to remove it", code="stale-temp"))
    return found


def _misnamed_definitions(ds: Dataset, problems: list[Problem]) -> dict[str, str]:
    """Report each definition file whose ``name`` is not its file name (rows name definitions by
    name, so such a file is silently unused); return file stem -> file, for the rows' messages."""
    misnamed = {}
    for definition in ds.definitions.values():
        source = definition.source or ""
        stem = os.path.basename(source).removesuffix(".json")
        if definition.origin == DATASET and source.endswith(".json") and stem != definition.name:
            misnamed[stem] = source
            problems.append(Problem(source, f"the definition is named {definition.name!r} but its file is "
                                    f"{stem}.json; rename the file to {definition.name}.json, or set 'name' to "
                                    f"{stem!r} if rows call it that", pointer="/name", code="definition-name"))
    return misnamed


def _check_reports(ds: Dataset, problems: list[Problem]) -> None:
    """Each replay report (``reports/*.json``) is JSON of the one report format ikdata reads, by its
    schema: import trusts nothing else, so validate says so first."""
    import orjson

    from ikdata.core import schema
    from ikdata.core.cases import MAX_REPORT_BYTES
    from ikdata.core.paths import TooLarge, read_capped
    from ikdata.core.verdicts import REPORT_FORMAT

    folder = ds.root / "reports"
    linked = ds.paths.record_file_refusal(folder, folder=True) if os.path.islink(folder) else None
    if linked is not None:  # a reports/ folder linked out of the dataset: none of it is read
        problems.append(linked.problem())
        return
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        display = ds.rel(path)
        refusal = ds.paths.record_file_refusal(path)  # a link out of the dataset, a FIFO: never read
        if refusal is not None:
            problems.append(refusal.problem())
            continue
        try:
            report = orjson.loads(read_capped(path, MAX_REPORT_BYTES, what="replay report", display=display))
        except TooLarge as exc:
            problems.append(exc.problem())
            continue
        except orjson.JSONDecodeError as exc:
            problems.append(Problem(display, f"malformed JSON: {exc}; replay again to rewrite it",
                                    code="malformed-json"))
            continue
        except OSError as exc:
            problems.append(Problem(display, f"cannot read: {exc.strerror or exc}", code="bad-report"))
            continue
        if not isinstance(report, dict) or report.get("format") != REPORT_FORMAT:
            found = report.get("format") if isinstance(report, dict) else type(report).__name__
            problems.append(Problem(display, f"format {found!r} is not a replay report ikdata reads; expected "
                                    f"{REPORT_FORMAT!r}", pointer="/format", code="bad-report"))
            continue
        from ikdata.core.cases import bound_problems  # the one report reader's bounds: depth, unknown fields

        problems += bound_problems(report, path=display) or schema.check("report", report, path=display)


def _missing_manifest(ds: Dataset) -> Problem:
    """An ikdata dataset without ikdata.json: no id, nothing committed; say how to get one."""
    import shlex

    from ikdata.core.layout import repair_hint

    hint = repair_hint(ds.root)
    folder = shlex.quote(str(ds.root))
    return Problem("ikdata.json", "missing: an ikdata dataset's manifest is its commit marker and id; "
                   + (hint if hint else f"run 'ikdata manifest {folder}' to write it"), code="manifest")


def _check_names(definition: Definition, inputs: dict, axes: dict, display: str, line: int,
                 problems: list[Problem]) -> None:
    """The row names every input and var axis of its definition, and nothing else."""
    for name in definition.inputs:
        if name not in inputs:
            problems.append(Problem(display, f"input {name!r} is missing; {definition.name!r} needs "
                                    f"{list(definition.inputs)}", line, "/workload/inputs", "missing-input"))
    for name in inputs:
        if name not in definition.inputs:
            problems.append(Problem(display, f"input {name!r} is not an input of {definition.name!r}; expected "
                                    f"{list(definition.inputs)}", line, f"/workload/inputs/{name}", "unknown-input"))
    for axis in definition.var_axes:
        if axis not in axes:
            problems.append(Problem(display, f"var axis {axis!r} has no value; expected an integer",
                                    line, "/workload/axes", "missing-axis"))
    for axis in axes:
        if axis not in definition.axes or definition.axes[axis].kind != "var":
            problems.append(Problem(display, f"axis {axis!r} is not a var axis of {definition.name!r}; expected "
                                    f"{definition.var_axes}", line, f"/workload/axes/{axis}", "unknown-axis"))


def _check_input(ds: Dataset, definition: Definition, workload: dict, name: str, raw: dict, display: str,
                 line: int, problems: list[Problem], uses: _Uses, randoms: list[tuple[str, str, Problem]],
                 shapes: _Shapes, axes_items: tuple) -> None:
    """One input descriptor against its spec, the slow way (a random or scalar input, one its definition does
    not declare); a tensor use kept for the blob checks."""
    spec = definition.inputs.get(name)
    if spec is None:
        return
    pointer = f"/workload/inputs/{name}"
    kind = raw["type"]
    if kind == "random":
        if ds.is_captured:
            randoms.append((workload["uuid"], name, Problem(
                display, "a 'random' input in a captured dataset; expected the captured tensor as a "
                "safetensors descriptor", line, pointer, "random-input")))
        return
    if kind == "scalar":
        if spec.shape is not None:
            problems.append(Problem(display, f"input {name!r} is a scalar, expected a {spec.dtype} tensor of "
                                    f"shape {list(spec.shape)}", line, pointer, "scalar-mismatch"))
        return
    if spec.shape is None:
        problems.append(Problem(display, f"input {name!r} is a tensor, expected a Python scalar",
                                line, pointer, "scalar-mismatch"))
        return
    uses.add(display, line, pointer, TensorRef(raw["path"], raw["tensor_key"]), spec.torch_dtype,
             shapes.of(definition, name, axes_items), f"input {name!r} of {definition.name!r}")


def _check_blobs(ds: Dataset, uses: _Uses, report: ValidationReport, *, deep: bool,
                 jobs: int | None, prehash: _Prehash | None = None,
                 progress: ProgressCallback | None = None) -> None:
    problems = report.problems
    root = ds.root
    files: dict[str, str | None] = {}  # descriptor path -> itself, or None where the path rule refuses it
    refused: dict[str, RecordError] = {}
    if prehash is not None:
        stored, inside = prehash.stored, set(prehash.paths)
    else:
        stored, inside = _scan(ds)
    wanted = uses.paths()
    for i in range(0, len(wanted), 8192):  # a chunk at a time: no Path object is kept per blob
        for rel, found in ds.resolve_all(wanted[i:i + 8192], known_inside=inside).items():
            if isinstance(found, RecordError):
                refused[rel] = found
                files[rel] = None
            else:
                files[rel] = rel
    del wanted
    if refused:  # a refused path: said at each use of it
        for use in uses:
            found = refused.get(use.ref.path)
            if found is not None:
                problems.append(Problem(use.where, str(found).lstrip(": "), use.line, use.pointer + "/path",
                                        "unsafe-path"))
    readable = [rel for rel, ok in files.items() if ok is not None and (rel in stored or (root / rel).is_file())]
    entries: dict[str, list[TensorEntry] | str] = {}
    if deep:
        unreferenced = ds.resolve_all(rel for rel in stored if rel not in files)
        for rel, found in unreferenced.items():
            if isinstance(found, RecordError):
                problems.append(Problem(rel, str(found).lstrip(": ") + "; not rehashed", code="unsafe-path"))
        paths = sorted(set(readable) | {rel for rel, found in unreferenced.items() if isinstance(found, Path)})
        done = prehash.wait() if prehash is not None else {}
        rest = [p for p in paths if p not in done]
        found = dict(zip(rest, rehash_files([os.path.join(str(root), p) for p in rest], jobs=jobs)))
        if progress and rest:  # links and late files, rehashed here rather than by the prehash
            progress(Progress("rehash", len(paths), len(paths)))
        for rel in paths:
            check = done.get(rel) or _checked(rel, found[rel])
            report.blobs_rehashed += 1
            if isinstance(check, str):
                entries[rel] = check
                continue
            entries[rel], mismatch = check
            if mismatch:
                problems.append(Problem(rel, mismatch, code="digest-mismatch"))
    else:
        workers = jobs or os.cpu_count() or 1
        paths = [root / rel for rel in readable]
        batch = max(1, min(256, len(paths) // (workers * 8) or 1))
        batches = [paths[i:i + batch] for i in range(0, len(paths), batch)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            found = [f for group in pool.map(lambda g: [_entries_or_error(p) for p in g], batches) for f in group]
        for rel, got in zip(readable, found):  # equal header entries shared: one small entry per blob
            if not isinstance(got, str):
                got = tuple(got)
                got = _ENTRIES.setdefault(got, got) if len(_ENTRIES) < 1 << 16 else got
            entries[rel] = got
    packed = 0
    if has_packs(ds.root):  # blobs in packs (ikdata.core.packs): one read per pack, each tensor's slice hashed
        rehashed, packed = check_packed_uses(ds.root, files, entries, problems, deep=deep, jobs=jobs)
        report.blobs_rehashed += rehashed
    report.blobs_checked = len(readable) + packed
    if ds.layout == "ikdata":
        _check_canonical(entries, problems)
    # Each distinct (site, blob ref) pair is checked once (a set per block of records, built in C); only the
    # pairs that fail are walked again, use by use in order, to name every line that uses them.
    sites, refs = uses._sites.values, uses._refs.values
    verdicts: dict[tuple[int, int], bool] = {}
    failed: set[tuple[int, int]] = set()
    for block in uses._records.blocks():
        for start in range(0, len(block), 3 << 14):  # 16,384 uses at a time: the set stays small
            part = block[start:start + (3 << 14)]
            for pair in set(zip(part[0::3], part[2::3])):
                if pair in verdicts:
                    continue
                bad = bool(_use_problems(sites[pair[0]], None, refs[pair[1]], files, entries, set()))
                if bad:
                    failed.add(pair)
                if len(verdicts) > 1 << 14:
                    verdicts.clear()
                verdicts[pair] = bad
    if not failed:
        return
    reported_files: set[str] = set()
    for block in uses._records.blocks():
        for i in range(0, len(block), 3):
            site, line, ref = block[i], block[i + 1], block[i + 2]
            if (site, ref) in failed:
                problems += _use_problems(sites[site], None if line < 0 else line, refs[ref], files, entries,
                                          reported_files)


def _use_problems(site: tuple, line: int | None, ref: tuple[str, str], files: dict[str, str | None],
                  entries: dict, reported_files: set[str]) -> list[Problem]:
    """What is wrong with one tensor use (site: file, pointer, dtype, shape, context; ref: blob path and tensor
    key) given the blobs' header entries: a missing or unreadable blob, a missing key, another dtype or shape.
    An unreadable blob is also said once by its own path (``reported_files`` remembers it)."""
    ref_path, tensor_key = ref
    if files.get(ref_path) is None:  # a path the path rule refused: said where it was refused
        return []
    where, pointer, dtype, shape, context = site
    found = entries.get(ref_path)
    if found is None:
        return [Problem(where, f"blob {ref_path} does not exist; {context} needs it", line, pointer + "/path",
                        "missing-blob")]
    if isinstance(found, str):
        said = []
        if ref_path not in reported_files:
            reported_files.add(ref_path)
            said.append(Problem(ref_path, f"unreadable safetensors file: {found}", code="bad-blob"))
        said.append(Problem(where, f"blob {ref_path} is unreadable ({context})", line, pointer + "/path", "bad-blob"))
        return said
    entry = next((e for e in found if e.key == tensor_key), None)
    if entry is None:
        return [Problem(where, f"blob {ref_path} has no tensor {tensor_key!r}; it holds {[e.key for e in found]}",
                        line, pointer + "/tensor_key", "missing-key")]
    said = []
    if dtype and entry.dtype != dtype:
        said.append(Problem(where, f"blob {ref_path} holds {entry.dtype}, expected {dtype} ({context})",
                            line, pointer, "dtype-mismatch"))
    if shape is not None and tuple(entry.shape) != tuple(shape):
        said.append(Problem(where, f"blob {ref_path} has shape {list(entry.shape)}, expected {list(shape)} "
                            f"({context})", line, pointer, "shape-mismatch"))
    return said


_Checked = "tuple[tuple[TensorEntry, ...], str | None] | str"
_ENTRIES: dict[tuple, tuple] = {}


def _checked(rel: str, check: BlobCheck) -> _Checked:
    """What validate keeps of one rehash, small (one per blob, held until the uses are checked): the
    error, or the entries (equal ones shared) and why the digest disagrees with the name, if it does."""
    from ikdata.core.rehash_process import summary

    found = summary(rel, check)
    if isinstance(found, str) or len(_ENTRIES) >= 1 << 16:
        return found
    return _ENTRIES.setdefault(found[0], found[0]), found[1]


def _context_problems(ds: Dataset, contexts: dict[str, tuple[str, int | None]]) -> list[Problem]:
    """Each shared context a receipt's validation names exists and is what its digest says."""
    from ikdata.core.verdicts import expand_validation

    found = []
    for digest, (where, line) in sorted(contexts.items()):
        try:
            expand_validation(ds.root, {"shared": digest})
        except RecordError as exc:
            found.append(Problem(where, f"{exc.path}: {str(exc).split(': ', 1)[-1]}", line, "/validation/shared",
                                 "shared-context"))
    return found


def _check_canonical(entries: dict[str, list[TensorEntry] | str], problems: list[Problem]) -> None:
    """Every ikdata blob (``blob/sha256/...``) is one tensor in the canonical header, so equal
    digests give byte-identical files (the header parser marks canonical headers: no extra read)."""
    for rel, found in entries.items():
        if isinstance(found, str) or not rel.startswith("blob/sha256/"):
            continue
        reason = canonical_problem(found)
        if reason:
            problems.append(Problem(rel, f"not a canonical ikdata blob: {reason}; restore it from its source",
                                    code="bad-blob"))


def _scan(ds: Dataset) -> tuple[dict[str, int], set[str]]:
    """One directory scan instead of a stat per descriptor: every blob's size, and the regular
    files that are inside the dataset for sure (no link on the way)."""
    scanned = list(ds.store.scan_blobs())
    inside = ds.paths.refusal("blob") is None  # the path rule: blob/ is not a link out of the dataset
    return ({rel: size for rel, size, _ in scanned},
            {rel for rel, _, link in scanned if not link} if inside else set())


def _entries_or_error(path: Path) -> list[TensorEntry] | str:
    try:
        return read_entries(path)
    except StoreError as exc:
        return str(exc).split(": ", 1)[-1]
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
