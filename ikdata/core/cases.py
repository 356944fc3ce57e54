"""A replay report as types: its :class:`Case` list, each family's :class:`Group` verdicts, the :class:`Report`;
and :func:`read_report`, the one reader every path uses (torch-free).

The report file stays the JSON document ``schemas/report.schema.json`` describes: a type is made from it
where the file is read (:func:`read_report`, :meth:`Report.from_json`) and turned back where it is written
(:meth:`Report.to_json`), and the JSON it gives back is the JSON it was made from, key for key and in the
same order, so rewriting a report changes no byte. Fields this version does not know are kept as written.

A family's own record in a case (the sampling judge's ``"sampling"``, a trajectory's ``"trajectory"``) is
kept whole in :attr:`Case.records`; a family's group verdicts (the pooled sampling tests) are the report's
top-level list named as the family is.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ikdata.core import features
from ikdata.core.errors import RecordError
from ikdata.core.problems import Problem
from ikdata.core.status import Status

# The fields every case may carry, in the order a case built by replay writes them; any other key is a
# family's record (or a field of a later version) and goes to Case.records.
CASE_FIELDS = ("definition", "uuid", "axes", "status", "reason", "error", "seconds", "reused", "device", "torch",
               "reference_digest", "reuse_key", "input_digests", "expected_digests", "chosen_by", "metrics",
               "tolerance", "max_absolute_errors", "state_comparison")
TOO_SMALL = "too_small"  # a group verdict no test had the power to reach
# Bounds of the one reader, checked before anything walks a report recursively: a report from elsewhere is
# hostile input. The file's size is checked before it is read; nesting and a case's unknown fields after.
MAX_REPORT_BYTES = 1 << 30  # 100k cases of replay's own are ~150 MB
MAX_DEPTH = 64  # nesting of any value (replay's deepest, a trajectory's step records, is under 10)
MAX_UNKNOWN_BYTES = 64 << 10  # per case: the JSON of the fields report.schema.json does not define for a case


@dataclass(frozen=True)
class Case:
    """What replay decided for one workload.

    Attributes:
        definition: the definition (or ``trajectory:<pipeline>``) judged.
        uuid: the workload's uuid (a trajectory's id).
        status: passed, failed, error or skipped.
        axes: the workload's axes.
        reason: why it did not pass (or why it was skipped).
        error: the traceback of an ``error``.
        seconds: how long it took.
        reused: the verdict was taken from an identical case judged before.
        device, torch, reference_digest, reuse_key: what judged it.
        input_digests, expected_digests: the exact bytes judged (tensor digests by name).
        chosen_by, metrics, tolerance: per output, the rule chosen, what was measured and the bound.
        max_absolute_errors, state_comparison: the seed capture script's fields, kept as written.
        records: a family's own record by its key (``"sampling"``, ``"trajectory"``), and any field this
            version does not know.
        order: the keys in the order they were written, so :meth:`to_json` gives the same document back.
    """

    definition: str
    uuid: str
    status: Status
    axes: Mapping[str, Any] = field(default_factory=dict)
    reason: str | None = None
    error: str | None = None
    seconds: float | None = None
    reused: bool | None = None
    device: str | None = None
    torch: str | None = None
    reference_digest: str | None = None
    reuse_key: str | None = None
    input_digests: Mapping[str, str] | None = None
    expected_digests: Mapping[str, str] | None = None
    chosen_by: Mapping[str, str] | None = None
    metrics: Mapping[str, Any] | None = None
    tolerance: Mapping[str, Any] | None = None
    max_absolute_errors: list[Any] | None = None
    state_comparison: Mapping[str, Any] | None = None
    records: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Any, *, path: str = "<case>", pointer: str = "") -> Case:
        """A case from its JSON object.

        Raises:
            RecordError: not an object, or a required field (definition, uuid, status) missing or of the wrong
                type, located at ``path`` and the field's JSON pointer.
        """
        if not isinstance(data, Mapping):
            raise RecordError(f"a case must be a JSON object, got {type(data).__name__}", path=path,
                              pointer=pointer or None)
        for name in ("definition", "uuid"):
            if not isinstance(data.get(name), str):
                raise RecordError(f"expected a string, got {data.get(name)!r}", path=path, pointer=f"{pointer}/{name}")
        status = Status.parse(data.get("status"))
        if status is None:
            raise RecordError(f"expected one of {', '.join(Status)}, got {data.get('status')!r}", path=path,
                              pointer=f"{pointer}/status")
        known = {k: data[k] for k in CASE_FIELDS if k in data}
        known["status"] = status
        return cls(**known, records={k: v for k, v in data.items() if k not in CASE_FIELDS}, order=tuple(data))

    def to_json(self) -> dict[str, Any]:
        """The case as its JSON object: the keys it was read with, in their order, then any set since."""
        found: dict[str, Any] = {}
        for key in (*self.order, *CASE_FIELDS, *self.records):
            if key in found:
                continue
            value = self.records[key] if key in self.records else getattr(self, key)
            written = key in self.order or key in self.records
            if written or (value is not None and (key != "axes" or value or not self.order)):
                found[key] = value  # axes: always in a case built here, as read in one read
        return found

    @classmethod
    def of(cls, value: Case | Mapping[str, Any], *, path: str = "<case>") -> Case:
        """``value`` as a Case: a Case as it is, a case's JSON object read (public functions that callers
        may hand either convert here, once).

        Raises:
            RecordError: a JSON object that is not a case (:meth:`from_json`).
        """
        return value if isinstance(value, Case) else cls.from_json(value, path=path)

    def record(self, name: str) -> Any:
        """A family's record in the case (``"sampling"``, ``"trajectory"``), or None."""
        return self.records.get(name)

    def with_(self, **changes: Any) -> Case:
        """A copy with ``changes`` (a case is never changed in place)."""
        return replace(self, **changes)

    def without(self, *names: str) -> Case:
        """A copy that no longer writes the fields (or family records) ``names``: not even as null."""
        records = {key: value for key, value in self.records.items() if key not in names}
        return replace(self, **{name: None for name in names if name in CASE_FIELDS}, records=records,
                       order=tuple(key for key in self.order if key not in names))

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED


@dataclass(frozen=True)
class Group:
    """One group verdict of a family: a decision over many cases of one definition (the pooled sampling tests).

    Attributes:
        definition: the definition whose cases were decided together.
        verdict: passed, failed, or ``too_small`` (no test had the power to decide).
        not_judged: what could not be judged, and what it would need.
        fields: the whole group as written (its tests, alpha, counts ...), kept for :meth:`to_json`.
    """

    definition: str
    verdict: str
    not_judged: tuple[str, ...] = ()
    fields: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any, *, path: str = "<report>", pointer: str = "") -> Group:
        """A group from its JSON object.

        Raises:
            RecordError: not an object, or without a definition string, located.
        """
        if not isinstance(data, Mapping):
            raise RecordError(f"a group must be a JSON object, got {type(data).__name__}", path=path,
                              pointer=pointer or None)
        if not isinstance(data.get("definition"), str):
            raise RecordError(f"expected a string, got {data.get('definition')!r}", path=path,
                              pointer=f"{pointer}/definition")
        return cls(data["definition"], str(data.get("verdict")), tuple(str(w) for w in data.get("not_judged") or ()),
                   dict(data))

    def to_json(self) -> dict[str, Any]:
        return dict(self.fields)

    def reasons_not_judged(self) -> list[str]:
        """Why no power is claimed here (empty when the verdict was reached)."""
        if self.not_judged:
            return list(self.not_judged)
        return ["too few draws to judge"] if self.verdict == TOO_SMALL else []


@dataclass(frozen=True)
class Report:
    """A replay report: what judged (the header), every case, and each family's group verdicts.

    Attributes:
        header: every top-level field but the cases and the groups (format, torch, device, tolerances, shard,
            refused, times ...), as written.
        cases: the cases, in the report's order.
        groups: family name -> its group verdicts (only the families that wrote any).
        order: the top-level keys in the order they were written.
    """

    header: Mapping[str, Any]
    cases: tuple[Case, ...] = ()
    groups: Mapping[str, tuple[Group, ...]] = field(default_factory=dict)
    order: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Any, *, path: str = "<report>", families: Iterable[str] | None = None) -> Report:
        """A report from its JSON document; ``families`` are the names whose top-level lists are group
        verdicts (default: every family that decides over groups, :attr:`Family.judges`).

        Raises:
            RecordError: located at ``path`` and the JSON pointer of the first bad field.
        """
        if not isinstance(data, Mapping):
            raise RecordError(f"a replay report must be a JSON object, got {type(data).__name__}", path=path)
        cases = data.get("cases")
        if not isinstance(cases, list):
            raise RecordError(f"expected a list of cases, got {type(cases).__name__}", path=path, pointer="/cases")
        names = set(_family_names() if families is None else families)
        groups = {name: tuple(Group.from_json(g, path=path, pointer=f"/{name}/{i}") for i, g in enumerate(found))
                  for name, found in data.items() if name in names and isinstance(found, list)}
        header = {k: v for k, v in data.items() if k != "cases" and k not in groups}
        return cls(header, tuple(Case.from_json(c, path=path, pointer=f"/cases/{i}") for i, c in enumerate(cases)),
                   groups, tuple(data))

    def to_json(self) -> dict[str, Any]:
        """The report as its JSON document, key for key as it was read."""
        found: dict[str, Any] = {}
        for key in (*self.order, *self.header, "cases", *self.groups):
            if key in found:
                continue
            if key == "cases":
                found[key] = [c.to_json() for c in self.cases]
            elif key in self.groups:
                found[key] = [g.to_json() for g in self.groups[key]]
            elif key in self.header:
                found[key] = self.header[key]
        return found

    @classmethod
    def of(cls, value: Report | Mapping[str, Any], *, path: str = "<report>") -> Report:
        """``value`` as a Report: a Report as it is, a report's JSON document read (public functions that
        callers may hand either convert here, once). A document without cases reads as one with none.

        Raises:
            RecordError: a document that is not a report (:meth:`from_json`).
        """
        if isinstance(value, Report):
            return value
        if isinstance(value, Mapping) and "cases" not in value:
            value = {**value, "cases": []}
        return cls.from_json(value, path=path)

    def with_cases(self, changed: Iterable[Case]) -> Report:
        """A copy whose cases of the same uuid as ``changed`` are replaced by them (same places)."""
        by_uuid = {c.uuid: c for c in changed}
        if not by_uuid:
            return self
        return replace(self, cases=tuple(by_uuid.get(c.uuid, c) for c in self.cases))

    def with_groups(self, family: str, groups: Iterable[Group]) -> Report:
        """A copy with ``family``'s group verdicts replaced by ``groups`` (written where they were, else last)."""
        return replace(self, groups={**self.groups, family: tuple(groups)})

    @cached_property
    def document(self) -> dict[str, Any]:
        """:meth:`to_json`, built once for this (frozen) report: what a reader that reads the JSON takes many
        times (import's re-check of each case). Read it only; change a copy (:meth:`to_json` gives a fresh one)."""
        return self.to_json()

    def get(self, key: str, default: Any = None) -> Any:
        """A header field (``device``, ``torch``, ``shard``, ``refused`` ...)."""
        return self.header.get(key, default)

    def case(self, uuid: str) -> Case | None:
        """The case of workload ``uuid``, or None."""
        return next((c for c in self.cases if c.uuid == uuid), None)

    def counts(self) -> dict[str, int]:
        """Cases by status (every status named), and how many were reused."""
        found = {str(s): 0 for s in Status}
        for case in self.cases:
            found[case.status] += 1
        found["reused"] = sum(1 for c in self.cases if c.reused)
        return found

    def not_judged(self) -> list[str]:
        """What replay could not judge: group verdicts with no power ("definition: why, and what it would need"),
        then what a case declared it left unjudged in its family's record (``not_judged``: a trajectory's
        guidance no modelled form rebuilds), "definition uuid: why"."""
        found = [f"{g.definition}: {why}" for groups in self.groups.values() for g in groups
                 for why in g.reasons_not_judged()]
        for case in self.cases:
            for record in case.records.values():
                declared = record.get("not_judged") if isinstance(record, Mapping) else None
                if isinstance(declared, list):
                    found += [f"{case.definition} {case.uuid[:12]}: {why}" for why in declared if isinstance(why, str)]
        return found


def _family_names() -> tuple[str, ...]:
    return tuple(f.name for f in features.families() if f.judges)  # operators (judged case by case) never do


def case_fields() -> frozenset[str]:
    """The fields ``report.schema.json`` defines for a case: :data:`CASE_FIELDS` and the families' records
    (``sampling``, ``trajectory``). Only these travel from a report case into anything ikdata writes."""
    return _schema_case_fields()


@lru_cache(maxsize=1)
def _schema_case_fields() -> frozenset[str]:
    from ikdata.core.schema import load_schema

    return frozenset(load_schema("report")["$defs"]["case"]["properties"]) | frozenset(CASE_FIELDS)


def bound_problems(data: Any, *, path: str) -> list[Problem]:
    """Where a report's JSON passes the reader's bounds: nesting deeper than :data:`MAX_DEPTH` (the first such
    value, by JSON pointer) and a case whose unknown fields' JSON exceeds :data:`MAX_UNKNOWN_BYTES`.

    Nesting is measured level by level over the parsed values (no recursion, no per-value bookkeeping); only a
    report that is too deep is walked again to name the place. So a value nested thousands deep costs a loop,
    never a RecursionError, and a clean report costs a fraction of its parse."""
    import orjson

    problems: list[Problem] = []
    if _depth_exceeds(data, MAX_DEPTH):
        problems.append(Problem(path, f"nested deeper than {MAX_DEPTH} levels; a replay report never is",
                                pointer=_deepest_pointer(data), code="too-deep"))
        return problems
    cases = data.get("cases") if isinstance(data, dict) else None
    if isinstance(cases, list):
        known = case_fields()
        for number, case in enumerate(cases):
            names = case.keys() - known if isinstance(case, dict) else None
            if not names:
                continue
            unknown = {k: case[k] for k in names}
            try:
                size = len(orjson.dumps(unknown))
            except (TypeError, orjson.JSONEncodeError):
                size = MAX_UNKNOWN_BYTES + 1
            if size > MAX_UNKNOWN_BYTES:
                problems.append(Problem(path, f"fields the report schema does not define for a case hold {size:,} "
                                        f"bytes ({', '.join(map(repr, sorted(unknown)[:3]))}); at most "
                                        f"{MAX_UNKNOWN_BYTES:,} are read", pointer=f"/cases/{number}",
                                        code="too-large"))
    return problems


def _depth_exceeds(data: Any, limit: int) -> bool:
    """Whether a container in ``data`` lies deeper than ``limit`` (``data`` itself at 0): one level at a time."""
    level = [data] if type(data) in (dict, list) else []
    for _ in range(limit):
        below: list[Any] = []
        for value in level:
            below += [v for v in (value.values() if type(value) is dict else value) if type(v) in (dict, list)]
        if not below:
            return False
        level = below
    return any(type(x) in (dict, list) for v in level for x in (v.values() if type(v) is dict else v))


def _deepest_pointer(data: Any) -> str:
    """The JSON pointer of the first value nested deeper than :data:`MAX_DEPTH` (walked without recursion)."""
    stack: list[tuple[Any, int, Any]] = [(data, 0, None)]
    while stack:
        value, depth, trail = stack.pop()
        if depth > MAX_DEPTH:
            return _pointer(trail)
        if isinstance(value, dict):
            stack.extend((v, depth + 1, (k, trail)) for k, v in value.items() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1, (i, trail)) for i, v in enumerate(value) if isinstance(v, (dict, list)))
    return ""


def _pointer(trail: Any) -> str:
    """The JSON pointer of a ``(key, parent)`` trail."""
    from ikdata.core.pointers import escape

    parts: list[str] = []
    while trail is not None:
        key, trail = trail
        parts.append(escape(key))
    return "".join("/" + part for part in reversed(parts))


def read_report(path: str | os.PathLike) -> Report:
    """Read and check a replay report (ikdata's or the seed capture script's): the one reader every path uses.

    The file's size is bounded before it is read (:data:`MAX_REPORT_BYTES`), its nesting and each case's
    unknown fields after (:func:`bound_problems`), before anything walks it.

    Raises:
        RecordError: no file there, too large, not JSON, or not a replay report, naming the file and the JSON
            pointer of the first problem (and up to four more).
    """
    import orjson

    from ikdata.core import schema

    path = Path(path)
    try:
        size = os.stat(path).st_size
        if size > MAX_REPORT_BYTES:
            raise RecordError(f"the replay report holds {size:,} bytes, more than the {MAX_REPORT_BYTES:,} ikdata "
                              "reads", path=str(path))
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise RecordError("no replay report here; run 'ikdata replay' on the dataset first", path=str(path)) from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise RecordError(f"cannot read the replay report: {exc}; expected one JSON document",
                          path=str(path)) from exc
    problems = bound_problems(data, path=str(path)) or schema.check("report", data, path=str(path))
    if problems:
        raise RecordError("not a replay report: " + "; ".join(f"{p.pointer} {p.message}" for p in problems[:5]),
                          path=str(path), pointer=problems[0].pointer or None)
    return Report.from_json(data, path=str(path))


class _Scanner:
    """A JSON document read a chunk at a time: one value at a time is decoded (``json``'s C decoder), so a
    report's cases can be taken one by one without holding the document or its parsed objects."""

    _WHITESPACE = re.compile(r"[ \t\n\r]*")

    def __init__(self, handle: Any, chunk: int) -> None:
        self.handle, self.chunk = handle, chunk
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.eof = "", 0, False

    def _more(self, *, grow: bool = False) -> bool:
        """Read the next chunk (keeping what is not consumed yet); False at the end of the file. ``grow``: a value
        longer than what is held is being decoded, so read twice as much (fewer retries as it grows)."""
        if self.eof:
            return False
        data = self.handle.read(len(self.text) - self.pos + self.chunk if grow else self.chunk)
        self.eof = not data
        self.text = self.text[self.pos:] + self.decoder.decode(data, final=self.eof)
        self.pos = 0
        return not self.eof

    def peek(self) -> str:
        while True:
            self.pos = self._WHITESPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text) or not self._more():
                return self.text[self.pos:self.pos + 1]

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise ValueError(f"expected {char!r}, found {found or 'the end of the file'!r}")
        self.pos += 1

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError:
                if not self._more(grow=True):
                    raise
                continue
            if end == len(self.text) and self._more(grow=True):  # a number may go on in the next chunk
                continue
            self.pos = end
            return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def iter_report(path: str | os.PathLike, *, chunk: int = 1 << 20) -> Iterator[tuple[str, Any]]:
    """A replay report read as a stream, in file order: ``("header", (key, value))`` for each top-level field
    but the cases, ``("case", (number, Case | RecordError))`` for each case. What one workload needs
    (``ikdata lineage``) is read without holding the report: the caller stops at what it wants.

    Each case is checked as :func:`read_report` checks it (bounds, schema, types); one that fails comes as a
    RecordError located at ``/cases/N``, and the cases around it still come.

    Raises:
        RecordError: no file there, larger than :data:`MAX_REPORT_BYTES`, or not JSON where the stream got to.
    """
    path = Path(path)
    number = -1
    try:
        size = os.stat(path).st_size
        if size > MAX_REPORT_BYTES:
            raise RecordError(f"the replay report holds {size:,} bytes, more than the {MAX_REPORT_BYTES:,} ikdata "
                              "reads", path=str(path))
        with open(path, "rb") as handle:
            scan = _Scanner(handle, chunk)
            scan.expect("{")
            if scan.peek() == "}":
                return
            while True:
                key = scan.value()
                if not isinstance(key, str):
                    raise ValueError("expected a field name")
                scan.expect(":")
                if key != "cases":
                    yield "header", (key, scan.value())
                else:
                    scan.expect("[")
                    more = scan.peek() != "]"
                    if not more:
                        scan.pos += 1
                    while more:
                        number += 1
                        yield "case", (number, _checked_case(scan.value(), str(path), number))
                        following = scan.peek()
                        if following not in (",", "]"):
                            raise ValueError(f"expected ',' or ']' after a case, found {following!r}")
                        scan.pos += 1
                        more = following == ","
                    number = -1
                following = scan.peek()
                if following == "}":
                    return
                if following != ",":
                    raise ValueError(f"expected ',' or '}}' after a field, found {following or 'the end'!r}")
                scan.pos += 1
    except FileNotFoundError:
        raise RecordError("no replay report here; run 'ikdata replay' on the dataset first", path=str(path)) from None
    except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        why = "nested too deep" if isinstance(exc, RecursionError) else \
            exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)  # its position is in a chunk, not the file
        raise RecordError(f"cannot read the replay report: {why}; expected one JSON document", path=str(path),
                          pointer=f"/cases/{number}" if number >= 0 else None) from None


def _checked_case(data: Any, path: str, number: int) -> Case | RecordError:
    """One streamed case, checked as :func:`read_report` checks a case, or the RecordError saying why not."""
    from ikdata.core import schema

    wrapper = {"torch": "", "device": "", "tolerances": {}, "cases": [data]}
    problems = bound_problems(wrapper, path=path) or schema.check("report", wrapper, path=path)
    if problems:
        first = problems[0]
        pointer = f"/cases/{number}" + (first.pointer or "")[len("/cases/0"):]
        return RecordError(f"not a replay report case: {first.message}", path=path, pointer=pointer)
    try:
        return Case.from_json(data, path=path, pointer=f"/cases/{number}")
    except RecordError as exc:
        return exc


__all__ = ["CASE_FIELDS", "Case", "Group", "MAX_DEPTH", "MAX_REPORT_BYTES", "MAX_UNKNOWN_BYTES", "Report", "TOO_SMALL",
           "bound_problems", "case_fields", "iter_report", "read_report"]
