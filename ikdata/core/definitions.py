"""Definitions: axes, symbolic shapes, binding tensors to axes, and references behind the trust rule.

Nothing here executes a reference except :func:`load_reference`, and that only
for a trusted definition: shipped with ikdata, from a folder the user named, or
whose digest the user passed explicitly.
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import orjson

from ikdata.core.digest import record_digest
from ikdata.core.errors import DefinitionError, RecordError, UntrustedReference
from ikdata.core.problems import Problem

SHIPPED = "shipped"  # origin of definitions installed with ikdata
USER = "user"        # origin of definitions from a folder the user named
DATASET = "dataset"  # origin of definitions read from a dataset: untrusted


@dataclass(frozen=True)
class Axis:
    name: str
    kind: str  # "const" or "var"
    value: int | None = None


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[str, ...] | None  # None: a Python scalar
    dtype: str  # FlashInfer name, e.g. "bfloat16"

    @property
    def torch_dtype(self) -> str:
        return "torch." + self.dtype


@dataclass(frozen=True)
class Definition:
    """An operator definition (FlashInfer Trace fields plus ikdata's tolerance and judge).

    Attributes:
        record: the definition as read, for writing it back unchanged.
        origin: SHIPPED, USER or DATASET: decides whether its reference may run.
        source: the file it was read from.
    """

    name: str
    op_type: str
    axes: Mapping[str, Axis]
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    reference: str
    record: Mapping[str, Any] = field(repr=False)
    origin: str = DATASET
    source: str = ""

    @classmethod
    def from_dict(cls, record: Mapping[str, Any], *, origin: str = DATASET, source: str = "") -> Definition:
        """Build from a schema-valid record."""
        axes = {n: Axis(n, a["type"], a.get("value")) for n, a in record["axes"].items()}

        def specs(section: Mapping[str, Any]) -> dict[str, TensorSpec]:
            return {n: TensorSpec(n, None if s["shape"] is None else tuple(s["shape"]), s["dtype"])
                    for n, s in section.items()}

        return cls(record["name"], record["op_type"], axes, specs(record["inputs"]),
                   specs(record["outputs"]), record["reference"], dict(record), origin, source)

    @property
    def digest(self) -> str:
        """sha256 of the definition's canonical JSON: its identity for conflicts and trust."""
        return record_digest(dict(self.record))

    @property
    def reference_digest(self) -> str:
        """sha256 of the reference source alone: what replay reuse keys on."""
        return hashlib.sha256(self.reference.encode()).hexdigest()

    @property
    def const_axes(self) -> dict[str, int]:
        return {n: a.value for n, a in self.axes.items() if a.kind == "const"}

    @property
    def var_axes(self) -> list[str]:
        return [n for n, a in self.axes.items() if a.kind == "var"]

    @property
    def tolerance(self) -> Mapping[str, Any]:
        return self.record.get("tolerance") or {}

    @property
    def judge(self) -> Mapping[str, Any] | None:
        return self.record.get("judge")

    def check(self) -> list[str]:
        """Every inconsistency of the definition itself, without executing anything."""
        problems = []
        for spec in [*self.inputs.values(), *self.outputs.values()]:
            for symbol in spec.shape or ():
                if symbol not in self.axes:
                    problems.append(f"tensor {spec.name!r} uses axis {symbol!r}, which is not declared in 'axes'")
        for name in sorted(set(self.inputs) & set(self.outputs)):
            problems.append(f"{name!r} is both an input and an output; names must be disjoint")
        try:
            tree = ast.parse(self.reference)
        except SyntaxError as exc:
            problems.append(f"reference does not parse: line {exc.lineno}: {exc.msg}")
        else:
            if not any(isinstance(node, ast.FunctionDef) and node.name == "run" for node in tree.body):
                problems.append("reference must define a top-level function 'run'")
        return problems

    def bind(self, shapes: Mapping[str, tuple[int, ...] | None], dtypes: Mapping[str, str] | None = None,
             *, tensors: Iterable[str] | None = None, axes: Mapping[str, int] | None = None) -> dict[str, int]:
        """Bind tensor shapes to the definition's axes and return the var axes' values.

        Args:
            shapes: tensor name -> shape (None for a scalar).
            dtypes: tensor name -> torch dtype name, checked if given.
            tensors: which names must be present (default: the inputs).
            axes: var axis values already known (a workload's "axes"), checked for agreement.

        Raises:
            DefinitionError: naming the tensor, the axis and the values that disagree.
        """
        specs = {**self.inputs, **self.outputs}
        names = list(tensors) if tensors is not None else list(self.inputs)
        missing = [n for n in names if n not in shapes]
        if missing:
            raise DefinitionError(f"missing tensors {missing}; the definition needs {names}", definition=self.name)
        bound: dict[str, int] = dict(self.const_axes)
        known = dict(axes or {})
        for name in names:
            spec, shape = specs[name], shapes[name]
            if spec.shape is None:
                if shape is not None:
                    raise DefinitionError(f"{name!r} must be a Python scalar, got a tensor of shape {list(shape)}",
                                          definition=self.name)
                continue
            if shape is None:
                raise DefinitionError(f"{name!r} must be a tensor of shape {list(spec.shape)}, got a scalar",
                                      definition=self.name)
            if dtypes is not None and name in dtypes and dtypes[name] != spec.torch_dtype:
                raise DefinitionError(f"{name!r} has dtype {dtypes[name]}, expected {spec.torch_dtype}",
                                      definition=self.name)
            if len(shape) != len(spec.shape):
                raise DefinitionError(f"{name!r} has rank {len(shape)} (shape {list(shape)}), expected rank "
                                      f"{len(spec.shape)} {list(spec.shape)}", definition=self.name)
            for symbol, size in zip(spec.shape, shape):
                axis = self.axes.get(symbol)
                if axis is None:
                    raise DefinitionError(f"{name!r} uses undeclared axis {symbol!r}", definition=self.name)
                if axis.kind == "const" and axis.value != size:
                    raise DefinitionError(f"{name!r} axis {symbol!r} is {size}, expected the constant {axis.value}",
                                          definition=self.name)
                if symbol in bound and bound[symbol] != size:
                    raise DefinitionError(f"{name!r} axis {symbol!r} is {size}, but another tensor bound it to "
                                          f"{bound[symbol]}", definition=self.name)
                if symbol in known and known[symbol] != size:
                    raise DefinitionError(f"{name!r} axis {symbol!r} is {size}, but the workload's axes say "
                                          f"{known[symbol]}", definition=self.name)
                bound[symbol] = size
        return {n: bound[n] for n in self.var_axes if n in bound}

    def shape_of(self, name: str, axes: Mapping[str, int]) -> tuple[int, ...] | None:
        """The concrete shape of a tensor given the var axes (None for scalars or unknown axes)."""
        spec = {**self.inputs, **self.outputs}[name]
        if spec.shape is None:
            return None
        values = {**self.const_axes, **axes}
        if any(s not in values for s in spec.shape):
            return None
        return tuple(values[s] for s in spec.shape)


def parse_definition(path: Path, *, origin: str, display: str | None = None) -> tuple[Definition | None, list[Problem]]:
    """Read, schema-check and consistency-check one definition file."""
    from ikdata.core import schema

    display = display or str(path)
    try:
        record = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError) as exc:
        return None, [Problem(display, f"cannot read definition: {exc}; expected one JSON object",
                              code="malformed-json")]
    problems = schema.check("definition", record, path=display)
    if problems:
        return None, problems
    definition = Definition.from_dict(record, origin=origin, source=display)
    return definition, [Problem(display, m, code="definition") for m in definition.check()]


def read_folder(folder: Path, *, origin: str, display_root: Path | None = None) -> tuple[dict[str, Definition], list[Problem]]:
    """Every definition under a folder (recursively), with the problems met."""
    found: dict[str, Definition] = {}
    problems: list[Problem] = []
    for path in sorted(folder.rglob("*.json")):
        display = os.path.relpath(path, display_root) if display_root else str(path)
        definition, found_problems = parse_definition(path, origin=origin, display=display)
        problems += found_problems
        if definition is None:
            continue
        if definition.name in found and found[definition.name].digest != definition.digest:
            problems.append(Problem(display, f"definition {definition.name!r} is also defined differently in "
                                    f"{found[definition.name].source}", code="duplicate-definition"))
            continue
        found[definition.name] = definition
    return found, problems


def shipped_folder() -> Path:
    """Where the definitions installed with ikdata live."""
    return Path(str(resources.files("ikdata.shipped_definitions")))


def load_reference(definition: Definition, *, trusted_digests: Iterable[str] = (),
                   trusted_definitions: Mapping[str, Definition] | None = None) -> Callable[..., Any]:
    """Compile a definition's reference and return its ``run``, if the definition is trusted.

    Trusted means: shipped or from a user-named folder, or its digest is in
    ``trusted_digests``, or it is identical to a trusted definition of the same name.

    Raises:
        UntrustedReference: with the digest to pass and where the definition came from.
        DefinitionError: the reference does not define ``run``.
    """
    trusted = definition.origin in (SHIPPED, USER) or definition.digest in set(trusted_digests)
    if not trusted and trusted_definitions:
        twin = trusted_definitions.get(definition.name)
        trusted = twin is not None and twin.digest == definition.digest
    if not trusted:
        raise UntrustedReference(definition.name, definition.digest, definition.source or "a dataset")
    namespace: dict[str, Any] = {"__name__": f"ikdata_reference_{definition.name}"}
    try:
        exec(compile(definition.reference, f"<reference {definition.name}>", "exec"), namespace)
    except Exception as exc:
        raise DefinitionError(f"reference failed to load: {type(exc).__name__}: {exc}",
                              definition=definition.name) from exc
    run = namespace.get("run")
    if not callable(run):
        raise DefinitionError("reference does not define a callable 'run'", definition=definition.name)
    return run


def definition_relpath(definition: Definition) -> str:
    """Where a definition lives in a dataset: ``definitions/<op_type>/<name>.json``."""
    return f"definitions/{definition.op_type}/{definition.name}.json"


def workloads_relpath(definition_name: str, op_type: str) -> str:
    """Where a definition's rows live: ``workloads/<op_type>/<name>.jsonl``."""
    return f"workloads/{op_type}/{definition_name}.jsonl"


def require_record(record: Any, *, path: str) -> Definition:
    """Build a Definition from a record or raise a RecordError listing every problem."""
    from ikdata.core import schema

    problems = schema.check("definition", record, path=path)
    if problems:
        raise RecordError("; ".join(f"{p.pointer} {p.message}" for p in problems), path=path)
    definition = Definition.from_dict(record, origin=USER, source=path)
    issues = definition.check()
    if issues:
        raise RecordError("; ".join(issues), path=path)
    return definition
