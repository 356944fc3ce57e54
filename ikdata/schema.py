"""Validate records against ``schemas/*.schema.json`` and turn errors into located problems.

The JSON Schemas installed with the package are the single source of truth: this
module loads them, nothing else describes a record's shape.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

from ikdata.problems import Problem

KINDS = ("descriptor", "definition", "workload", "receipt", "validation", "report", "manifest")


@functools.cache
def load_schema(kind: str) -> dict:
    """The schema of one record kind, read from the installed ``schemas/`` folder."""
    text = resources.files("ikdata.schemas").joinpath(f"{kind}.schema.json").read_text()
    return json.loads(text)


@functools.cache
def _registry() -> Registry:
    return Registry().with_resources(
        (load_schema(kind)["$id"], Resource.from_contents(load_schema(kind))) for kind in KINDS)


@functools.cache
def validator(kind: str) -> Draft202012Validator:
    """A validator for one record kind, with cross-schema references resolved."""
    return Draft202012Validator(load_schema(kind), registry=_registry())


def _pointer(error: ValidationError) -> str:
    return "/" + "/".join(str(p) for p in error.absolute_path) if error.absolute_path else "/"


def _deepest(error: ValidationError) -> ValidationError:
    while error.context:
        error = best_match(error.context)
    return error


def check(kind: str, record: Any, *, path: str, line: int | None = None) -> list[Problem]:
    """Every schema violation of one record, each as a Problem naming file, line and pointer."""
    problems = []
    for error in validator(kind).iter_errors(record):
        deepest = _deepest(error)
        message = deepest.message
        if len(message) > 200:
            message = message[:200] + "..."
        problems.append(Problem(path, f"{message} ({kind}.schema.json)", line, _pointer(deepest),
                                code="schema"))
    return sorted(problems, key=lambda p: p.pointer or "")


def is_valid(kind: str, record: Any) -> bool:
    return validator(kind).is_valid(record)
