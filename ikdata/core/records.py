"""The value types of a dataset: input descriptors, workload rows and receipts.

Dicts exist only at the I/O boundary: ``from_dict`` after a record passed its
schema, ``to_dict`` just before it is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class TensorRef:
    """A tensor stored in a safetensors file: ``{"type": "safetensors", "path", "tensor_key"}``."""

    path: str
    tensor_key: str = "tensor"

    def to_dict(self) -> dict:
        return {"type": "safetensors", "path": self.path, "tensor_key": self.tensor_key}


@dataclass(frozen=True)
class Scalar:
    """A Python scalar input: ``{"type": "scalar", "value"}``."""

    value: int | float | bool

    def to_dict(self) -> dict:
        return {"type": "scalar", "value": self.value}


@dataclass(frozen=True)
class RandomInput:
    """FlashInfer Trace's ``{"type": "random"}``: no data. Never in a captured dataset."""

    def to_dict(self) -> dict:
        return {"type": "random"}


Descriptor = Union[TensorRef, Scalar, RandomInput]


def descriptor_from_dict(record: dict) -> Descriptor:
    """Turn a schema-valid descriptor dict into its value type."""
    kind = record["type"]
    if kind == "safetensors":
        return TensorRef(record["path"], record["tensor_key"])
    if kind == "scalar":
        return Scalar(record["value"])
    return RandomInput()


@dataclass(frozen=True)
class WorkloadRow:
    """One line of ``workloads/<op_type>/<name>.jsonl``, and where it was read from."""

    definition: str
    uuid: str
    axes: dict[str, int]
    inputs: dict[str, Descriptor]
    source: str = ""  # file, relative to the dataset root
    line: int = 0

    @classmethod
    def from_dict(cls, record: dict, *, source: str = "", line: int = 0) -> WorkloadRow:
        workload = record["workload"]
        return cls(record["definition"], workload["uuid"], dict(workload["axes"]),
                   {k: descriptor_from_dict(v) for k, v in workload["inputs"].items()}, source, line)

    def to_dict(self) -> dict:
        return {"definition": self.definition,
                "workload": {"uuid": self.uuid, "axes": self.axes,
                             "inputs": {k: v.to_dict() for k, v in self.inputs.items()}}}

    def content(self) -> dict:
        """The row's content without where it was read from, for comparing rows."""
        return self.to_dict()


@dataclass(frozen=True)
class Receipt:
    """Where a workload came from and what the engine produced.

    ``provenance`` holds the capture facts (engine, model, request_id, step, operation,
    module_path, process_id, host, versions, time); ``expected_output`` maps output
    names to descriptors; ``validation`` is filled in by import.
    """

    uuid: str
    definition: str
    axes: dict[str, int]
    expected_output: dict[str, Descriptor]
    provenance: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] | None = None
    imports: tuple[dict, ...] = ()
    source: str = ""
    line: int = 0

    _FIXED = ("uuid", "definition", "axes", "expected_output", "validation", "imports")

    @classmethod
    def from_dict(cls, record: dict, *, source: str = "", line: int = 0,
                  output_names: list[str] | None = None) -> Receipt:
        expected = record.get("expected_output") or {}
        if "type" in expected:  # the seed writes a bare descriptor for a single output
            name = output_names[0] if output_names else "output"
            expected = {name: expected}
        provenance = {k: v for k, v in record.items() if k not in cls._FIXED}
        return cls(record["uuid"], record["definition"], dict(record.get("axes") or {}),
                   {k: descriptor_from_dict(v) for k, v in expected.items()}, provenance,
                   record.get("validation"), tuple(record.get("imports") or ()), source, line)

    def to_dict(self) -> dict:
        record = dict(self.provenance)
        record.update(uuid=self.uuid, definition=self.definition, axes=self.axes,
                      expected_output={k: v.to_dict() for k, v in self.expected_output.items()})
        if self.validation is not None:
            record["validation"] = self.validation
        if self.imports:
            record["imports"] = list(self.imports)
        return record
