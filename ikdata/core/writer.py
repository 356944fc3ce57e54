"""DatasetWriter: add definitions and workloads to an ikdata dataset, checked against the definition.

Each ``add`` stores the blobs, then appends one workload row and one receipt.
Rows and receipts are single-line locked appends, so several processes may add
to one dataset at once. The capture machinery runs this on a background thread.
"""

from __future__ import annotations

import os
import socket
import time
import uuid as uuid_mod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import orjson

from ikdata.core import jsonl
from ikdata.core.dataset import RECEIPTS
from ikdata.core.definitions import Definition, definition_relpath, workloads_relpath
from ikdata.core.digest import canonical_json
from ikdata.core.errors import DefinitionError, MergeConflict
from ikdata.core.locking import dataset_lock
from ikdata.core.records import Receipt, Scalar, TensorRef, WorkloadRow
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
    from ikdata import __version__

    facts: dict[str, Any] = {"process_id": os.getpid(), "host": socket.gethostname(),
                             "ikdata_version": __version__, "captured_at": time.time()}
    torch = __import__("sys").modules.get("torch")
    if torch is not None:
        facts["torch_version"] = str(torch.__version__)
    return facts


@dataclass(frozen=True)
class AddResult:
    """What ``add`` wrote: the row, the receipt, and the bytes of newly written blobs."""

    row: WorkloadRow
    receipt: Receipt
    new_bytes: int


class DatasetWriter:
    """Writes definitions, blobs, rows and receipts into an ikdata dataset.

    Example:
        >>> writer = DatasetWriter("runs/gemm")
        >>> writer.add_definition(definition)
        >>> writer.add(definition, {"A": a, "W": w}, {"C": c}, {"request_id": "r1", "step": 0})
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.store = BlobStore(self.root)
        self._written_definitions: set[str] = set()

    def add_definition(self, definition: Definition) -> None:
        """Write ``definitions/<op_type>/<name>.json``; refuse a different one of the same name."""
        if definition.name in self._written_definitions:
            return
        path = self.root / definition_relpath(definition)
        data = canonical_json(dict(definition.record)) + b"\n"
        if path.exists():
            existing = orjson.loads(path.read_bytes())
            if canonical_json(existing) + b"\n" != data:
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
        """Check, store blobs, and append one workload row and one receipt.

        Args:
            definition: the definition the tensors must fit.
            inputs: input name -> torch tensor, numpy array, RawTensor or Python scalar.
            outputs: output name -> the tensor the engine produced.
            provenance: engine, model, request_id, step, operation, module_path, ...
        """
        axes = self.check(definition, inputs, outputs)
        self.add_definition(definition)
        new_bytes = 0
        descriptors: dict[str, Any] = {}
        expected: dict[str, Any] = {}
        with dataset_lock(self.root, exclusive=False):
            for target, values in ((descriptors, inputs), (expected, outputs)):
                for name, value in values.items():
                    if isinstance(value, (bool, int, float)):
                        target[name] = Scalar(value)
                        continue
                    put = self.store.put(value)
                    new_bytes += put.nbytes if put.written else 0
                    target[name] = put.ref
            facts = {**default_provenance(), **(provenance or {})}
            uuid = workload_uuid(definition.name, descriptors, facts)
            ordered = {n: descriptors[n] for n in definition.inputs}
            row = WorkloadRow(definition.name, uuid, axes, ordered)
            receipt = Receipt(uuid, definition.name, axes, expected, facts)
            jsonl.append(self.root / RECEIPTS, [receipt.to_dict()])
            jsonl.append(self.root / workloads_relpath(definition.name, definition.op_type), [row.to_dict()])
        return AddResult(row, receipt, new_bytes)

    def commit(self, *, parent: Mapping[str, Any] | None = None) -> str:
        """Bring the manifest up to date under the exclusive dataset lock; return the dataset id."""
        from ikdata.core import manifest

        with dataset_lock(self.root, exclusive=True):
            return manifest.write(self.root, parent=dict(parent) if parent else None)


def _dtype_name(value: Any) -> str:
    if type(value).__module__ == "numpy":
        return raw_tensor(value[:0] if value.ndim else value).dtype
    return str(value.dtype)


__all__ = ["DatasetWriter", "AddResult", "workload_uuid", "default_provenance", "IDENTITY_FIELDS", "TensorRef"]
