"""Provenance queries: where a workload (or a blob) came from, and the parent graph of a dataset.

A workload's chain, in order: its capture receipt (engine, model, request, step,
module, process, host, time) and the request payload the engine served (the body a
``--request-file`` named as ``request``); every import hop (from which dataset id, when,
how); every validation (the one each import attached, and the cases of the dataset's own
replay report); and, for a clone, where the copy came from (its local note, :mod:`ikdata.core.origin`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from ikdata.core.dataset import Dataset
from ikdata.core.features import hooks as family_hooks
from ikdata.core.index import lookup
from ikdata.core.errors import ProblemsFound, RecordError, UsageError
from ikdata.core.problems import Problem
from ikdata.core.records import Receipt, TensorRef, WorkloadRow
from ikdata.core.store import DIGEST_RE, digest_from_path
from ikdata.core.cases import Case, read_report

CAPTURE_FIELDS = ("engine", "engine_version", "model", "model_revision", "request_id", "step", "variant",
                  "operation", "module_path", "process_id", "host", "rank", "world_size", "local_rank",
                  "process_group", "captured_at", "origin", "source_row")
REQUEST_FIELD = "request"  # the request body the engine served, as the request file (or the seed script) gave it


@dataclass(frozen=True)
class Chain:
    """The lineage of one workload.

    Attributes:
        uses: for a blob query, where this workload uses the blob (``inputs/A``, ``expected_output/C``).
        request: the request payload the engine served (any JSON value), None when the receipt has none.
    """

    uuid: str
    definition: str
    row: str  # file:line
    capture: dict[str, Any] | None
    imports: tuple[dict, ...]
    validations: tuple[dict, ...]
    uses: tuple[str, ...] = ()
    request: Any = None
    call: dict[str, Any] | None = None  # the family record this workload belongs to (a trajectory: its pipeline call)
    cloned: dict[str, Any] | None = None  # the dataset is a clone: from where, which id, when
    call_line: str | None = None  # ``call`` in words, as its family says it (not in the JSON document)

    def to_dict(self) -> dict:
        return {"uuid": self.uuid, "definition": self.definition, "row": self.row, "capture": self.capture,
                "request": self.request, "call": self.call, "imports": list(self.imports),
                "validations": list(self.validations), "uses": list(self.uses), "cloned": self.cloned}


def trace(path: str | os.PathLike, key: str) -> list[Chain]:
    """:func:`_trace`, each chain with the family record it belongs to (the pipeline call of a diffusion
    trajectory it is a step of), if any, and where the dataset was cloned from, if it is a clone."""
    import dataclasses

    from ikdata.core.origin import read_origin

    chains = _trace(path, key)
    origin, _ = read_origin(path)  # a broken note: said by the graph (ikdata lineage DIR), not per workload
    if origin is not None:
        chains = [dataclasses.replace(c, cloned=origin.shown()) for c in chains]  # a claim, marked unverified
    for family in _lineages(path):
        calls = family.calls({c.uuid for c in chains if c.call is None})
        chains = [dataclasses.replace(c, call=calls[c.uuid], call_line=family.line(calls[c.uuid]),
                                      request=c.request if c.request is not None else calls[c.uuid]["request"])
                  if c.uuid in calls else c for c in chains]
    return chains


def _lineages(path: str | os.PathLike) -> list[Any]:
    """The lineage of every family whose records the dataset holds (its declared ``lineage`` hook): only such a
    dataset pays for the family's modules."""
    return [found for lineage in family_hooks("lineage", path) if (found := lineage(path)) is not None]


def _trace(path: str | os.PathLike, key: str) -> list[Chain]:
    """The chain of the workload with uuid ``key`` (a unique prefix is enough), of every
    workload that uses the blob with digest ``key``, or of the workloads of a diffusion trajectory's
    steps (``TRAJECTORY[:STEP[:STREAM]]``).

    Raises:
        UsageError: no workload has this uuid or uses this digest, or the prefix is ambiguous.

    Example:
        >>> [c.capture["host"] for c in trace("shared/gemm", "3f2a")]
    """
    for family in _lineages(path) if not DIGEST_RE.match(key) else ():
        stepped = family.chains(key, _trace)  # TRAJECTORY[:STEP[:STREAM]]: the workloads of its steps
        if stepped is not None:
            return stepped
    ds = Dataset.open(path)
    if not DIGEST_RE.match(key):
        indexed = lookup(ds, key)  # the index: a few lookups and seeks, whatever the number of rows
        if indexed is not None and len({r.uuid for r in indexed[0]}) == 1:
            row, receipts_of = indexed[0][0], indexed[1]
            return [_chain(row, receipts_of[-1] if receipts_of else None, _report_validations(ds, row.uuid),
                           row.uuid, (), root=ds.root)]
    rows = {row.uuid: row for row in _rows(ds)}
    receipts = {r.uuid: r for r in _receipts(ds)}
    if DIGEST_RE.match(key):
        cases = _report_cases(ds)  # every workload that uses the blob: the report's cases by uuid
        uses: dict[str, list[str]] = {}
        for row in rows.values():
            for name, d in row.inputs.items():
                if isinstance(d, TensorRef) and digest_from_path(d.path) == key:
                    uses.setdefault(row.uuid, []).append(f"inputs/{name}")
        for receipt in receipts.values():
            for name, d in receipt.expected_output.items():
                if isinstance(d, TensorRef) and digest_from_path(d.path) == key:
                    uses.setdefault(receipt.uuid, []).append(f"expected_output/{name}")
        if not uses:
            raise UsageError(f"{path}: no workload or receipt uses blob {key}")
        return [_chain(rows.get(u), receipts.get(u), cases.validations(u), u, tuple(names), root=ds.root)
                for u, names in sorted(uses.items())]
    matches = [u for u in rows if u.startswith(key)] or [u for u in receipts if u.startswith(key)]
    if not matches:
        if ds.problems:  # the workload may be in a file that was refused (a link out of the dataset)
            raise ProblemsFound(ds.problems, f"{path}: no workload has uuid {key!r} in the files that "
                                "could be read")
        raise UsageError(f"{path}: no workload has uuid {key!r}; list them with 'ikdata ls {path}'")
    if len(matches) > 1:
        raise UsageError(f"{path}: {key!r} matches {len(matches)} workloads; give more of the uuid")
    uuid = matches[0]
    return [_chain(rows.get(uuid), receipts.get(uuid), _report_validations(ds, uuid), uuid, (), root=ds.root)]


def _bad_uuid(ds: Dataset, record: Any, display: str, line: int, pointer: str) -> bool:
    """Note a record without a string uuid (missing, a number) as a problem of ``ds``; True when it is one."""
    holder = record.get("workload") if pointer.startswith("/workload") and isinstance(record, dict) else record
    uuid = holder.get("uuid") if isinstance(holder, dict) else None
    if isinstance(uuid, str):
        return False
    found = "no uuid" if not isinstance(holder, dict) or "uuid" not in holder else f"uuid {uuid!r}"
    ds.problems.append(Problem(display, f"{found}; expected a string (the workload's uuid)", line, pointer, "schema"))
    return True


def _rows(ds: Dataset) -> Iterator[Any]:
    """Every row that has a string uuid (others are problems of ``ds``, not a traceback)."""
    for path in ds.workload_files():
        display = ds.rel(path)
        for line, record in ds.read_workload_file(path, validate=False):
            if _bad_uuid(ds, record, display, line, "/workload/uuid"):
                continue
            try:
                yield WorkloadRow.from_dict(record, source=display, line=line)
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                ds.problems.append(Problem(display, f"not a workload row ({type(exc).__name__}: {exc}); expected "
                                           "definition and workload {uuid, axes, inputs}", line, code="schema"))


def _receipts(ds: Dataset) -> Iterator[Any]:
    """Every receipt that has a string uuid (others are problems of ``ds``, not a traceback)."""
    for path in ds.receipt_files():
        display = ds.rel(path)
        for line, record in ds.read_records(path, "receipt", validate=False):
            if _bad_uuid(ds, record, display, line, "/uuid"):
                continue
            try:
                yield Receipt.from_dict(record, source=display, line=line)
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                ds.problems.append(Problem(display, f"not a receipt ({type(exc).__name__}: {exc})", line,
                                           code="schema"))


def _chain(row: Any, receipt: Any, reported: list[dict], uuid: str, uses: tuple[str, ...], *,
           root: Any = None) -> Chain:
    capture = None
    imports: tuple[dict, ...] = ()
    validations: list[dict] = []
    request = None
    if receipt is not None:
        capture = {k: receipt.provenance[k] for k in CAPTURE_FIELDS if receipt.provenance.get(k) is not None}
        request = receipt.provenance.get(REQUEST_FIELD)
        imports = receipt.imports
        if receipt.validation:
            validations.append(_summary(_expanded(root, receipt.validation), "receipt (attached by import)"))
    validations += reported
    where = f"{row.source}:{row.line}" if row is not None else "(no row)"
    return Chain(uuid, row.definition if row else receipt.definition, where, capture, imports,
                 tuple(validations), uses, request)


def _expanded(root: Any, validation: dict) -> dict:
    """A validation with the context it shares with its report's others merged back (core.verdicts)."""
    from ikdata.core.errors import RecordError
    from ikdata.core.verdicts import expand_validation

    if root is None:
        return validation
    try:
        return expand_validation(root, validation)
    except RecordError as exc:
        return dict(validation, reason=str(exc))


def _summary(validation: dict, where: str) -> dict:
    keys = ("status", "device", "device_name", "torch", "metrics", "basis", "report", "finished_at", "reason")
    return {"from": where, **{k: validation[k] for k in keys if validation.get(k) is not None}}


REPORT_VALIDATION = "this dataset's replay report"


@dataclass(frozen=True)
class _ReportCases:
    """The dataset's replay report as lineage shows it: each workload's cases, or why the report is unreadable
    (shown in every chain, as an import's validation that cannot be read is)."""

    cases: Mapping[str, list[Case]] = field(default_factory=dict)
    unreadable: str | None = None

    def validations(self, uuid: str) -> list[dict]:
        if self.unreadable is not None:
            return [{"from": REPORT_VALIDATION, "reason": self.unreadable}]
        return [_summary(case.to_json(), REPORT_VALIDATION) for case in self.cases.get(uuid, ())]


def _report_cases(ds: Dataset) -> _ReportCases:
    """The dataset's report cases by uuid (each with the report's device where it names none), read by the one
    reader; a report that cannot be read is named with its JSON pointer, and lists no case."""
    if not ds.report_path.is_file():
        return _ReportCases()
    try:
        report = read_report(ds.report_path)
    except RecordError as exc:
        return _ReportCases(unreadable=str(exc))
    found: dict[str, list[Case]] = {}
    for case in report.cases:
        found.setdefault(case.uuid, []).append(case.with_(device=case.device or report.get("device")))
    return _ReportCases(found)


def _report_validations(ds: Dataset, uuid: str) -> list[dict]:
    """The report's case of one workload, read as a stream (:func:`ikdata.core.cases.iter_report`) that stops at
    it: the report is never held whole, and a bad case after it (or a torn tail) does not hide it. A bad case
    before it, or a report that cannot be read up to it, is named (file and JSON pointer) instead."""
    from ikdata.core.cases import iter_report

    if not ds.report_path.is_file():
        return []
    device = None
    found: list[dict] = []
    try:
        for kind, item in iter_report(ds.report_path):
            if kind == "header":
                device = item[1] if item[0] == "device" and isinstance(item[1], str) else device
                continue
            number, case = item
            if isinstance(case, RecordError):  # the first bad case is named: it may be this workload's
                found[:] = found or [{"from": REPORT_VALIDATION, "reason": str(case)}]
                continue
            if case.uuid == uuid:
                found.append(_summary(case.with_(device=case.device or device).to_json(), REPORT_VALIDATION))
                break
    except RecordError as exc:
        found.append({"from": REPORT_VALIDATION, "reason": str(exc)})
    return found


@dataclass(frozen=True)
class Node:
    """A dataset in the parent graph: its id, name, parents (each with when and how), and for a clone on this
    machine, where it was copied from (``cloned``: how, source, id, at)."""

    id: str
    name: str
    parents: tuple[dict, ...] = ()
    path: str | None = None
    cloned: dict | None = None


@dataclass(frozen=True)
class Graph:
    """The parent graph, from a dataset back through every parent found on this machine."""

    root: str
    nodes: dict[str, Node] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)  # a clone note that cannot be read

    def to_dict(self) -> dict:
        return {"root": self.root, "nodes": {i: {"name": n.name, "path": n.path, "parents": list(n.parents),
                                                 "cloned": n.cloned} for i, n in self.nodes.items()},
                "problems": [p.to_dict() for p in self.problems]}

    def to_dot(self) -> str:
        """Graphviz source: an edge from each dataset to each of its parents."""
        lines = ["digraph lineage {", "  rankdir=BT;"]
        for node_id, node in self.nodes.items():
            lines.append(f'  "{node_id[:12]}" [label="{_escape(node.name)}\\n{node_id[:12]}"];')
            for parent in node.parents:
                label = f"{parent.get('how', '')} {_when(parent.get('at'))}".strip()
                lines.append(f'  "{node_id[:12]}" -> "{parent["id"][:12]}" [label="{_escape(label)}"];')
            if node.cloned:
                source = node.cloned["source"]
                lines.append(f'  "{_escape(source)}" [shape=note];')
                lines.append(f'  "{node_id[:12]}" -> "{_escape(source)}" [style=dashed, '
                             f'label="clone {_when(node.cloned["at"])} (unverified local note)"];')
        lines.append("}")
        return "\n".join(lines) + "\n"


def graph(path: str | os.PathLike) -> Graph:
    """The dataset's parent graph. A parent whose ``source`` is a folder here, still holding that
    id, is followed to its own parents; other parents are leaves known by id only.

    Raises:
        UsageError: the folder has no manifest.
    """
    from ikdata.core import manifest
    from ikdata.core.origin import read_origin

    root = Path(path)
    held = manifest.read(root) if root.is_dir() else None
    if held is None:
        raise UsageError(f"{root}: no manifest (ikdata.json); run 'ikdata manifest {root}' first")
    root_id = manifest.dataset_id(held)
    result = Graph(root_id)
    stack = [(root_id, held, str(root))]
    while stack:
        node_id, record, where = stack.pop()
        if node_id in result.nodes:
            continue
        parents = tuple(record.get("parents") or ())
        origin, problems = read_origin(where)
        result.problems.extend(Problem(str(Path(where) / p.path), p.message, p.line, p.pointer, p.code)
                               for p in problems)
        result.nodes[node_id] = Node(node_id, record.get("name", "?"), parents, where,
                                     origin.shown() if origin is not None else None)  # a claim, marked unverified
        for parent in parents:
            source = parent.get("source")
            found = manifest.read_parent(source)  # capped before reading; unreadable: a leaf
            if found is not None and manifest.dataset_id(found) == parent["id"]:
                stack.append((parent["id"], found, source))
            elif parent["id"] not in result.nodes:
                result.nodes[parent["id"]] = Node(parent["id"], Path(source).name if source else "?", (), source)
    return result


def _escape(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"')


def _when(at: Any) -> str:
    """A time for a label, or ``at ?`` for one outside the bounds a record may hold (the schema's, which
    validate applies too: :func:`ikdata.core.origin.valid_time`): 1e20, negative, NaN, a string."""
    import time

    from ikdata.core.origin import valid_time

    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(at)) if valid_time(at) else "at ?"


__all__ = ["Chain", "Graph", "Node", "trace", "graph"]
