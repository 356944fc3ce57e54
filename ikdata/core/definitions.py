"""Definitions: axes, symbolic shapes, binding tensors to axes, and references behind the trust rule.

Nothing here executes a reference except :func:`load_reference`, and that only
for a trusted definition: shipped with ikdata, from a folder the user named, or
whose digest the user passed explicitly.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import orjson

from ikdata.core.digest import record_digest
from ikdata.core.errors import DefinitionError, RecordError
from ikdata.core.problems import Problem
from ikdata.core.pointers import escape, pointer_lines
from ikdata.core.references import (MAX_CHAIN, MAX_NESTING, MAX_REFERENCE_CHARS, RunSignature,  # noqa: F401
                                    entry_point, parse_reference, run_signature, takes_inputs, unbound_names)
from ikdata.core.trust import DATASET, SHIPPED, USER, require_trusted  # noqa: F401 (origins, re-exported)

# The most bytes a definition file may hold: a reference at its character limit, every character escaped
# (``\uXXXX``: 6 bytes), and room for the rest. Checked from the file before it is read, so a huge file
# costs a stat, not its size many times over in parsed JSON.
MAX_DEFINITION_BYTES = 2 << 20
# Finding codes that writing the definition again fixes (definition_bytes lists run's order).
REORDERED_BY_WRITING = frozenset({"input-order", "output-order"})


@dataclass(frozen=True)
class Finding:
    """One inconsistency of a definition: what, where in the record (a JSON pointer), and its kind."""

    message: str
    pointer: str
    code: str = "definition"


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

    @functools.cached_property
    def entry(self) -> str:
        """The reference's entry function: ``run``, the record's ``entry``, or FlashInfer's single
        ``_<op>_reference`` (``run`` when none is found, which :meth:`findings` reports)."""
        tree, _ = parse_reference(self.reference)
        named = self.record.get("entry") if isinstance(self.record.get("entry"), str) else None
        return (entry_point(tree, named, single=False) if tree is not None else None) or "run"

    @functools.cached_property
    def call_problem(self) -> str | None:
        """Why calling ``run`` positionally in the listed order would differ from calling it by name, or None.

        Replay calls references positionally, as flashinfer-bench does, and refuses to
        judge a definition for which the two conventions disagree.
        """
        tree, _ = parse_reference(self.reference)
        signature = run_signature(tree, self.entry) if tree is not None else None
        if signature is None:
            return None
        found = [f.message for f in _signature_findings(self, signature)]
        return "; ".join(found) or None

    def check(self) -> list[str]:
        """Every inconsistency of the definition itself, without executing anything."""
        return [f.message for f in self.findings()]

    def findings(self) -> list[Finding]:
        """:meth:`check` with a JSON pointer and a stable code for each finding.

        The reference is parsed (never run) within :data:`MAX_REFERENCE_CHARS` and
        :data:`MAX_NESTING`; ``run``'s parameters must be the inputs in their listed order
        (flashinfer-bench calls it positionally in that order, ikdata by name); a judge
        must be one :mod:`ikdata.core.judge_registry` knows.
        """
        found: list[Finding] = []
        for section, specs in (("inputs", self.inputs), ("outputs", self.outputs)):
            for spec in specs.values():
                for index, symbol in enumerate(spec.shape or ()):
                    if symbol not in self.axes:
                        found.append(Finding(f"tensor {spec.name!r} uses axis {symbol!r}, which is not declared in "
                                             "'axes'", f"/{section}/{escape(spec.name)}/shape/{index}", "axis"))
        for name in sorted(set(self.inputs) & set(self.outputs)):
            found.append(Finding(f"{name!r} is both an input and an output; names must be disjoint",
                                 f"/outputs/{escape(name)}", "disjoint"))
        tree, reason = parse_reference(self.reference)
        if tree is None:
            found.append(Finding(reason, "/reference", "reference"))
        else:
            signature = run_signature(tree, self.entry)
            if signature is None:
                named = self.record.get("entry")
                found.append(Finding(f"reference must define a top-level function {named!r} (its 'entry')"
                                     if isinstance(named, str) else "reference must define a top-level function "
                                     "'run'", "/reference", "reference"))
            else:
                found += _signature_findings(self, signature)
            missing = unbound_names(tree)
            if missing:  # a helper left out: the reference would fail when it runs, wherever it runs
                found.append(Finding(f"reference is not standalone: it uses {', '.join(missing)}, which it does "
                                     "not define or import", "/reference", "not-standalone"))
        found += _judge_findings(self.judge)
        return found

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


def _signature_findings(definition: Definition, signature: RunSignature) -> list[Finding]:
    inputs = list(definition.inputs)
    listed = ", ".join(inputs)
    if not takes_inputs(signature, inputs):
        return [Finding(f"run's parameters ({', '.join(signature.positional)}) are not the inputs ({listed}); "
                        f"expected 'def run({listed})', so that flashinfer-bench (which passes the inputs "
                        "positionally) and ikdata (by name) call it alike", "/reference", "run-signature")]
    found = []
    order = list(signature.positional[:len(inputs)])
    if order != inputs:
        found.append(Finding(f"inputs are listed as ({listed}) but run takes ({', '.join(order)}): flashinfer-bench "
                             "passes inputs positionally in the listed order and would compute something else. "
                             "List them in run's order; for a dataset, run 'ikdata repair DATASET'",
                             "/inputs", "input-order"))
    outputs = list(definition.outputs)
    returns = signature.returns
    if returns is not None and len(outputs) > 1 and set(returns) == set(outputs) and list(returns) != outputs:
        found.append(Finding(f"outputs are listed as ({', '.join(outputs)}) but run returns ({', '.join(returns)}): "
                             "both tools name the returned values in the listed order. List them in run's order; "
                             "for a dataset, run 'ikdata repair DATASET'", "/outputs", "output-order"))
    return found


def _judge_findings(judge: Mapping[str, Any] | None) -> list[Finding]:
    if not judge:
        return []
    from ikdata.core import judge_registry
    from ikdata.core.tolerances import JUDGE_BOUNDS

    name = judge.get("name")
    if name in JUDGE_BOUNDS or name in judge_registry.statistical():  # shipped: no lookup of plugins
        return []
    known = judge_registry.known_names()
    if name in known:
        return []
    return [Finding(f"unknown judge {name!r}; known judges: {', '.join(known)}. A plugin judge must be shipped, "
                    f"installed (entry point group {judge_registry.ENTRY_POINT_GROUP!r}) or named with "
                    f"{judge_registry.ENV}=MODULE", "/judge/name", "unknown-judge")]


def declared_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record with ``inputs`` in ``run``'s parameter order and ``outputs`` in its return order.

    The declared order is what flashinfer-bench relies on (``gen_inputs`` then
    ``ref(*inputs)``). A record whose reference does not say (no parsable ``run``, other
    names, or returns that are not plain names) keeps the order it has.
    """
    record = dict(record)
    reference = record.get("reference")
    tree, _ = parse_reference(reference) if isinstance(reference, str) else (None, None)
    signature = run_signature(tree) if tree is not None else None
    if signature is None:
        return record
    inputs, outputs = record.get("inputs"), record.get("outputs")
    if isinstance(inputs, Mapping) and takes_inputs(signature, list(inputs)):
        record["inputs"] = {n: inputs[n] for n in signature.positional[:len(inputs)]}
    if isinstance(outputs, Mapping) and signature.returns is not None and set(signature.returns) == set(outputs) \
            and len(signature.returns) == len(outputs):
        record["outputs"] = {n: outputs[n] for n in signature.returns}
    return record


def definition_bytes(record: Mapping[str, Any]) -> bytes:
    """A definition file's bytes as ikdata writes it: declared order (:func:`declared_record`), indented.

    Key order is meaningful here (flashinfer-bench reads inputs in file order); the
    definition's digest is over its canonical, key-sorted form, so it does not depend on it.
    """
    return orjson.dumps(declared_record(record), option=orjson.OPT_INDENT_2) + b"\n"


def is_declared_order(record: Mapping[str, Any]) -> bool:
    """Whether a record already lists inputs and outputs in ``run``'s order."""
    declared = declared_record(record)
    return all(list(declared.get(k) or ()) == list(record.get(k) or ()) for k in ("inputs", "outputs"))


def reorder_definitions(root: str | os.PathLike) -> tuple[str, ...]:
    """Rewrite a dataset's definition files whose inputs or outputs are not in ``run``'s order.

    What ``ikdata repair`` runs for datasets written before ikdata kept the declared order
    (it wrote keys sorted: ``K, Q, V, scale`` for ``run(Q, K, V, scale)``). Only the order
    changes: each rewritten record has the same canonical form, hence the same digest, and
    trust given to it by digest still holds. Files that are not valid definitions, or that
    are links, are left for ``validate`` to report. The caller holds the dataset lock and
    refreshes the manifest.

    Returns:
        The rewritten files, relative to ``root``.
    """
    from ikdata.core import schema
    from ikdata.core.store import write_atomic

    root = Path(root)
    folder = root / "definitions"
    rewritten = []
    for path in sorted(folder.rglob("*.json")) if folder.is_dir() and not folder.is_symlink() else []:
        if path.is_symlink() or not path.is_file():
            continue
        try:
            data = read_definition_bytes(path)
            if data is None:
                continue  # too large: validate names it
            record = orjson.loads(data)
        except (OSError, orjson.JSONDecodeError):
            continue
        if schema.check("definition", record, path=str(path)) or is_declared_order(record):
            continue
        data = definition_bytes(record)
        if record_digest(orjson.loads(data)) != record_digest(record):  # only the order may change
            continue
        write_atomic(path, [data])
        rewritten.append(path.relative_to(root).as_posix())
    return tuple(rewritten)


def read_definition_bytes(path: Path) -> bytes | None:
    """A definition file's bytes, or None when it holds more than :data:`MAX_DEFINITION_BYTES` (its size is
    checked on the open file before reading, and at most one byte more than the limit is ever read)."""
    with open(path, "rb") as stream:
        if os.fstat(stream.fileno()).st_size > MAX_DEFINITION_BYTES:
            return None
        data = stream.read(MAX_DEFINITION_BYTES + 1)
    return None if len(data) > MAX_DEFINITION_BYTES else data


def parse_definition(path: Path, *, origin: str, display: str | None = None) -> tuple[Definition | None, list[Problem]]:
    """Read, schema-check and consistency-check one definition file.

    Each consistency problem names the file, the line and the JSON pointer.
    """
    from ikdata.core import schema

    display = display or str(path)
    try:
        data = read_definition_bytes(path)
        if data is None:
            return None, [Problem(display, f"definition file is larger than {MAX_DEFINITION_BYTES} bytes "
                                  f"({MAX_DEFINITION_BYTES >> 20} MiB); not read. Expected one definition, its "
                                  f"reference "
                                  f"under {MAX_REFERENCE_CHARS} characters", code="too-large")]
        record = orjson.loads(data)
    except (orjson.JSONDecodeError, OSError) as exc:
        return None, [Problem(display, f"cannot read definition: {exc}; expected one JSON object",
                              code="malformed-json")]
    problems = schema.check("definition", record, path=display)
    if problems:
        return None, problems
    definition = Definition.from_dict(record, origin=origin, source=display)
    findings = definition.findings()
    if not findings:
        return definition, []
    lines = pointer_lines(data.decode("utf-8", "replace"))
    return definition, [Problem(display, f.message, lines.get(f.pointer), f.pointer, f.code) for f in findings]


def read_folder(folder: Path, *, origin: str, display_root: Path | None = None,
                paths: Iterable[Path] | None = None) -> tuple[dict[str, Definition], list[Problem]]:
    """Every definition under a folder (recursively), with the problems met; ``paths``: only these files
    (a dataset passes the ones the path rule lets it read)."""
    found: dict[str, Definition] = {}
    problems: list[Problem] = []
    for path in sorted(folder.rglob("*.json")) if paths is None else paths:
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
    from ikdata.core.schema import package_folder  # not importlib.resources: it costs start-up

    return Path(str(package_folder("ikdata.shipped_definitions")))


def load_reference(definition: Definition, *, trusted_digests: Iterable[str] = (),
                   trusted_definitions: Mapping[str, Definition] | None = None) -> Callable[..., Any]:
    """Compile a definition's reference and return its ``run``, if the definition is trusted.

    Trusted is decided by :func:`ikdata.core.trust.is_trusted`: shipped or from a user-named
    folder, or its digest is in ``trusted_digests``, or it is identical to a trusted definition
    of the same name.

    Raises:
        UntrustedReference: with the digest to pass and where the definition came from.
        DefinitionError: the reference does not define ``run``.
    """
    require_trusted(definition, digests=trusted_digests, trusted=trusted_definitions)
    namespace: dict[str, Any] = {"__name__": f"ikdata_reference_{definition.name}"}
    try:
        exec(compile(definition.reference, f"<reference {definition.name}>", "exec"), namespace)
    except Exception as exc:
        raise DefinitionError(f"reference failed to load: {type(exc).__name__}: {exc}",
                              definition=definition.name) from exc
    run = namespace.get(definition.entry)
    if not callable(run):
        raise DefinitionError(f"reference does not define a callable {definition.entry!r}", definition=definition.name)
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
