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

from ikdata.core import jsonl, schema
from ikdata.core.problems import Problem

BLOCK = 4096  # records checked by one call of the compiled validator


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
    read: list[Problem] = []  # the reader's own problems (malformed, torn), merged by line with the schema's
    block: list[tuple[int, Any]] = []
    for number, record in jsonl.iter_records(path, read, display=display, dataset=dataset):
        block.append((number, record if convert is None else convert(record)))
        if len(block) >= BLOCK:
            yield _checked(block, kind, check_block, read, problems, display)
            block, read = [], []
    if block or read:
        found = _checked(block, kind, check_block, read, problems, display)
        if found:
            yield found


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


__all__ = ["BLOCK", "valid_blocks"]
