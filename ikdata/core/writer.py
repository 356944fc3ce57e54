"""DatasetWriter: add definitions and workloads to an ikdata dataset, checked against the definition.

:meth:`DatasetWriter.add_many` is the one place that turns workloads into rows and
receipts; :meth:`DatasetWriter.add` and the capture writer both go through it.
Blobs are stored first, then the rows, then the receipts (see :meth:`DatasetWriter.append`
for why that order), each file in one locked whole-line append, so several
processes may add to one dataset at once.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid as uuid_mod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from ikdata.core.repeats import outputs_key
from ikdata.core import faults, jsonl
from ikdata.core.dataset import RECEIPTS
from ikdata.core.definitions import (MAX_DEFINITION_BYTES, Definition, definition_bytes, definition_relpath,
                                     workloads_relpath)
from ikdata.core.digest import canonical_json
from ikdata.core.errors import DefinitionError, MergeConflict
from ikdata.core.locking import dataset_lock
from ikdata.core.records import Receipt, Scalar, TensorRef, WorkloadRow
from ikdata.core.paths import read_capped
from ikdata.core.store import BlobStore, RawTensor, raw_tensor, write_atomic

# Provenance fields that identify what was captured; time, host and pid do not.
IDENTITY_FIELDS = ("engine", "model", "model_revision", "request_id", "step", "variant", "operation", "module_path")


def workload_uuid(definition: str, inputs: Mapping[str, Any], provenance: Mapping[str, Any]) -> str:
    """A uuid derived from the definition, the input descriptors and the identifying provenance."""
    identity = {k: provenance.get(k) for k in IDENTITY_FIELDS if provenance.get(k) is not None}
    descriptors = {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in inputs.items()}
    return str(uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, canonical_json([definition, descriptors, identity]).decode()))


def default_provenance() -> dict[str, Any]:
    """Facts every receipt carries: process, host, versions, time."""
    from ikdata._version import __version__

    facts: dict[str, Any] = {"process_id": os.getpid(), "host": socket.gethostname(),
                             "ikdata_version": __version__, "captured_at": time.time()}
    torch = __import__("sys").modules.get("torch")
    if torch is not None:
        facts["torch_version"] = str(torch.__version__)
    return facts


@dataclass(frozen=True)
class AddResult:
    """What ``add`` wrote: the row, the receipt, the bytes of newly written blobs, and the row's file."""

    row: WorkloadRow
    receipt: Receipt
    new_bytes: int
    path: str = ""  # the workload file, relative to the dataset root


@dataclass(frozen=True)
class NewWorkload:
    """One workload to add: values are tensors, scalars or stored TensorRefs; ``axes`` given: already checked."""

    definition: Definition
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    provenance: Mapping[str, Any] = field(default_factory=dict)
    axes: Mapping[str, int] | None = None


class DatasetWriter:
    """Writes definitions, blobs, rows and receipts into an ikdata dataset.

    Call :meth:`commit` when done: rows and receipts are appended as they are added, but the dataset
    is committed (its manifest lists them, its id changes) only then; until then ``validate`` names an
    uncommitted DatasetWriter. docs/library.md walks through it.

    Example:
        >>> writer = DatasetWriter("runs/gemm")
        >>> writer.add_definition(definition)
        >>> writer.add(definition, {"A": a, "W": w}, {"C": c}, {"request_id": "r1", "step": 0})
        >>> dataset_id = writer.commit()
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.store = BlobStore(self.root)
        self._written_definitions: set[str] = set()
        self._written: dict[str, bytes] = {}  # uuid -> digest of its outputs, as this writer appended them

    def add_definition(self, definition: Definition) -> None:
        """Write ``definitions/<op_type>/<name>.json``; refuse a different one of the same name."""
        if definition.name in self._written_definitions:
            return
        path = self.root / definition_relpath(definition)
        data = definition_bytes(definition.record)  # declared order: flashinfer-bench reads inputs in file order
        if path.exists():
            existing = orjson.loads(read_capped(path, MAX_DEFINITION_BYTES, what="definition"))
            if canonical_json(existing) != canonical_json(dict(definition.record)):
                raise MergeConflict(f"{path}: a different definition named {definition.name!r} is already there; "
                                    "rename yours or remove the old one", paths=[str(path)])
        else:
            write_atomic(path, [data])
        self._written_definitions.add(definition.name)

    def check(self, definition: Definition, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, int]:
        """Check inputs and outputs against the definition; return the var axes.

        Raises:
            DefinitionError: a missing or extra tensor, a wrong dtype, rank, constant or inconsistent axis.
        """
        extra = set(inputs) - set(definition.inputs)
        if extra:
            raise DefinitionError(f"unknown inputs {sorted(extra)}; expected {list(definition.inputs)}",
                                  definition=definition.name)
        missing_out = set(definition.outputs) - set(outputs)
        if missing_out or set(outputs) - set(definition.outputs):
            raise DefinitionError(f"outputs {sorted(outputs)} do not match {list(definition.outputs)}",
                                  definition=definition.name)
        values = {**inputs, **outputs}
        shapes, dtypes = {}, {}
        for name, value in values.items():
            if isinstance(value, (bool, int, float)):
                shapes[name] = None
            else:
                raw = value if isinstance(value, RawTensor) else None
                shapes[name] = tuple(raw.shape if raw else value.shape)
                dtypes[name] = raw.dtype if raw else _dtype_name(value)
        return definition.bind(shapes, dtypes, tensors=[*definition.inputs, *definition.outputs])

    def add(self, definition: Definition, inputs: Mapping[str, Any], outputs: Mapping[str, Any],
            provenance: Mapping[str, Any] | None = None) -> AddResult:
        """Check, store blobs, and append one workload row and then its receipt.

        Args:
            definition: the definition the tensors must fit.
            inputs: input name -> torch tensor, numpy array, RawTensor, Python scalar, or a
                TensorRef already stored in this dataset.
            outputs: output name -> the tensor the engine produced (same kinds).
            provenance: engine, model, request_id, step, operation, module_path, ...

        Raises:
            DefinitionError: the tensors do not fit the definition.
            OSError, StoreError: a blob, the row or the receipt could not be written.
        """
        result = self.add_many([NewWorkload(definition, inputs, outputs, provenance or {})])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def add_many(self, workloads: Sequence[NewWorkload]) -> list[AddResult | BaseException]:
        """Add several workloads: one append per workload file and one for the receipts.

        Each workload is checked (unless its ``axes`` are given: checked already), its
        definition written and its blobs stored; those that fail get their exception in the
        result, in order, and the others are appended together (:meth:`append`).
        """
        results: list[AddResult | BaseException] = []
        with dataset_lock(self.root, exclusive=False):
            for item in workloads:
                try:
                    results.append(self._prepare(item))
                except Exception as exc:  # noqa: BLE001  reported per workload
                    results.append(exc)
            good = [r for r in results if isinstance(r, AddResult)]
            try:
                self.append(good)
            except Exception as exc:  # noqa: BLE001  none of them was kept
                results = [exc if isinstance(r, AddResult) else r for r in results]
        return results

    def _prepare(self, item: NewWorkload) -> AddResult:
        definition = item.definition
        axes = dict(item.axes) if item.axes is not None else self.check(definition, item.inputs, item.outputs)
        self.add_definition(definition)
        new_bytes = 0
        descriptors: dict[str, Any] = {}
        expected: dict[str, Any] = {}
        for target, values in ((descriptors, item.inputs), (expected, item.outputs)):
            for name, value in values.items():
                if isinstance(value, (bool, int, float)):
                    target[name] = Scalar(value)
                elif isinstance(value, TensorRef):
                    target[name] = value
                else:
                    put = self.store.put(value)
                    new_bytes += put.nbytes if put.written else 0
                    target[name] = put.ref
        facts = {**default_provenance(), **item.provenance}
        uuid = workload_uuid(definition.name, descriptors, facts)
        ordered = {n: descriptors[n] for n in definition.inputs}
        return AddResult(WorkloadRow(definition.name, uuid, axes, ordered),
                         Receipt(uuid, definition.name, axes, expected, facts), new_bytes,
                         workloads_relpath(definition.name, definition.op_type))

    def append(self, results: Sequence[AddResult]) -> None:
        """Append the rows, then the receipts, of workloads whose blobs are already stored.

        The order is the crash-safe one. A process killed between the two appends leaves
        rows without receipts: inputs-only workloads, which validate, replay (``skipped``)
        and import accept. The other order would leave receipts naming no row, which import
        refuses ("receipt ... names no workload row"). When the receipts cannot be written
        (disk full, file-size limit), the rows just appended are cut off again, so an error,
        unlike a kill, leaves no row without its receipt; if another writer appended behind
        them meanwhile they stay, and the error says how many.

        Raises:
            OSError: the rows or the receipts could not be written (nothing of them was kept,
                except as said above).
        """
        rows: dict[str, list[dict]] = {}
        fresh, keys = [], {}
        for result in results:  # the same capture again is one workload (core.repeats): written once
            key = hashlib.sha256(outputs_key(result.receipt.expected_output)).digest()
            if self._written.get(result.row.uuid, keys.get(result.row.uuid)) == key:
                continue
            keys.setdefault(result.row.uuid, key)
            fresh.append(result)
        for result in fresh:
            rows.setdefault(result.path, []).append(result.row.to_dict())
        self.append_records(rows, [r.receipt.to_dict() for r in fresh])
        self._written.update(keys)

    def append_records(self, rows: Mapping[str, Sequence[dict]], receipts: Sequence[dict]) -> None:
        """:meth:`append` for records already made: workload file (relative) -> rows, and receipts."""
        written: list[tuple[Path, tuple[int, int]]] = []
        try:
            for path, records in rows.items():
                if records:
                    written.append((self.root / path, jsonl.append(self.root / path, records)))
            faults.checkpoint("rows-appended")
            if receipts:
                jsonl.append(self.root / RECEIPTS, receipts)
        except OSError as exc:
            kept = [str(path) for path, (start, end) in written if not jsonl.truncate_tail(path, start, end)]
            if kept:
                exc.add_note(f"rows were left without receipts in {', '.join(kept)} (another writer appended "
                             "after them); replay reports them as skipped")
            raise

    def commit(self, *, parent: Mapping[str, Any] | None = None) -> str:
        """Bring the manifest up to date under the exclusive dataset lock; return the dataset id. The temp files
        of writers that were killed (a blob or record half written) go first, by the one temp-file rule
        (:func:`ikdata.core.paths.sweep_temps`: a live writer's stay)."""
        from ikdata.core import manifest
        from ikdata.core.paths import sweep_temps

        with dataset_lock(self.root, exclusive=True):
            sweep_temps(self.root, recursive=True)
            return manifest.write(self.root, parent=dict(parent) if parent else None)


def _dtype_name(value: Any) -> str:
    if type(value).__module__ == "numpy":
        return raw_tensor(value[:0] if value.ndim else value).dtype
    return str(value.dtype)


__all__ = ["DatasetWriter", "AddResult", "NewWorkload", "workload_uuid", "default_provenance", "IDENTITY_FIELDS", "TensorRef"]
