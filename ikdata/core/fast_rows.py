"""Records of a JSON Lines file decoded and schema-checked a block at a time, in compiled code.

``validate`` reads every row and receipt of a dataset; checking each record with its own call
(a Python generator step, a schema call, a Python check per field) made it three times the cost
of merely parsing the lines. Here each line is parsed by orjson and a whole block of records is
checked against its schema by one call of the compiled validator (jsonschema-rs, an array of the
kind's schema): the common block, every record valid, costs one C call. Only a block that fails
is checked record by record with :func:`ikdata.core.schema.check`, which explains each failure
with its file, line and JSON pointer exactly as a record-by-record read does, in the same order.

msgspec ``Struct`` decoders were measured against this (docs/validate.md): decoding a row into a
Struct is not cheaper than orjson plus one block check, and a Struct drops the fields a schema
does not name, which the duplicate-uuid rule compares, so the compiled schema is what is kept.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Iterator

import orjson

from ikdata.core import jsonl, schema
from ikdata.core.problems import Problem



_LINES = 1024  # lines parsed and checked by one call


@functools.cache
def _block_validator(kind: str) -> Callable[[list], bool] | None:
    """``is_valid`` over a list of records of ``kind`` (one call for the block), or None without jsonschema-rs."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    identifier = schema.load_schema(kind)["$id"]
    compiled = jsonschema_rs.validator_for({"type": "array", "items": {"$ref": identifier}},
                                           registry=schema._compiled_registry())
    return compiled.is_valid


def valid_blocks(path: str | os.PathLike, kind: str, problems: list[Problem], *, display: str,
                 dataset: str | os.PathLike | None = None,
                 convert: Callable[[Any], Any] | None = None) -> Iterator[list[tuple[int, Any]]]:
    """Blocks of (line, record), every record valid against ``kind``'s schema, in file order.

    Torn, malformed and schema-breaking lines are appended to ``problems`` in line order, as
    :func:`ikdata.core.jsonl.iter_records` followed by :func:`ikdata.core.schema.check` of each
    record reports them (a block's problems land before the block is yielded). ``convert`` maps each
    record before it is checked (the seed layout's receipts)."""
    check_block = _block_validator(kind)
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    for first, lines, read in _line_blocks(path, display, dataset):
        try:  # the common block: every line one JSON value, parsed by one comprehension
            records = [loads(raw) for raw in lines]
            block = list(zip(range(first, first + len(lines)), records))
        except decode_error:
            block = []
            for number, raw in enumerate(lines, first):
                try:
                    block.append((number, loads(raw)))
                except decode_error as exc:
                    if raw.strip():
                        read.append(Problem(display, f"malformed JSON: {exc}; expected one JSON object per line",
                                            number, code="malformed-json"))
            read.sort(key=lambda p: p.line or 0)
        if convert is not None:
            block = [(number, convert(record)) for number, record in block]
        found = _checked(block, kind, check_block, read, problems, display)
        if found:
            yield found


def _line_blocks(path: str | os.PathLike, display: str,
                 dataset: str | os.PathLike | None) -> Iterator[tuple[int, list[bytes], list[Problem]]]:
    """(first line number, whole lines, problems) per :data:`_LINES` lines at most, read as every record file is
    read a block at a time (:func:`ikdata.core.jsonl.line_blocks`); the torn last line (no newline) is a problem
    of a last, empty block, never a line."""
    tail: list[Problem] = []
    for first, lines in jsonl.line_blocks(path, tail, display=display, dataset=dataset):
        for start in range(0, len(lines), _LINES):  # a bounded number of records parsed at once
            yield first + start, lines[start:start + _LINES], []  # type: ignore[misc]
    if tail:
        yield 0, [], tail


def _checked(block: list[tuple[int, Any]], kind: str, check_block: Callable[[list], bool] | None,
             read: list[Problem], problems: list[Problem], display: str) -> list[tuple[int, Any]]:
    if check_block is not None and check_block([record for _, record in block]):
        problems += read
        return block
    kept, found = [], []
    for number, record in block:
        bad = schema.check(kind, record, path=display, line=number)
        if bad:
            found += bad
        else:
            kept.append((number, record))
    # in line order, each record's own problems in the order schema.check gives them (a stable sort);
    # a torn last line has the highest number and comes last
    problems += sorted(read + found, key=lambda p: p.line or 0) if read else found
    return kept


__all__ = ["valid_blocks"]
