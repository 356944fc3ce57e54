"""Validate records against ``schemas/*.schema.json`` and turn errors into located problems.

The JSON Schemas installed with the package are the single source of truth: this
module loads them, nothing else describes a record's shape.
"""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from ikdata.core import features
from ikdata.core.problems import Problem

if TYPE_CHECKING:  # jsonschema is imported when a record fails (to explain it): importing it costs ~0.4 s
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError
    from referencing import Registry

CORE_KINDS = ("descriptor", "definition", "workload", "receipt", "validation", "report", "manifest", "pack-index",
              "census", "origin")
# Core's schemas, then every schema a registered feature's kinds follow or it declares (diffusion's trajectory and
# model, FlashInfer's calls): read from the registry each time, so a feature left out brings none.
KINDS: Sequence[str] = features.Live(lambda: tuple(dict.fromkeys(CORE_KINDS + features.schemas())))


def package_folder(package: str):
    """The folder of an installed package's data files (a Path; a Traversable for a package in a zip).
    ``importlib.resources`` says the same for a package on disk, but importing it costs every command
    ~8 ms of start-up (it loads tempfile and zipfile), so it is asked only when the folder is not one."""
    folder = Path(next(iter(importlib.import_module(package).__path__)))
    if folder.is_dir():
        return folder
    from importlib import resources

    return resources.files(package)


@functools.cache
def load_schema(kind: str) -> dict:
    """The schema of one record kind, read from the installed ``schemas/`` folder."""
    text = package_folder("ikdata.schemas").joinpath(f"{kind}.schema.json").read_text()
    return json.loads(text)


def _registry() -> Registry:
    return _registry_of(tuple(KINDS))


@functools.cache
def _registry_of(kinds: tuple[str, ...]) -> Registry:
    from referencing import Registry, Resource

    return Registry().with_resources(
        (load_schema(kind)["$id"], Resource.from_contents(load_schema(kind))) for kind in kinds)


@functools.cache
def validator(kind: str) -> Draft202012Validator:
    """A validator for one record kind, with cross-schema references resolved."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load_schema(kind), registry=_registry())


def _pointer(error: ValidationError) -> str:
    return "/" + "/".join(str(p) for p in error.absolute_path) if error.absolute_path else "/"


def _deepest(error: ValidationError) -> ValidationError:
    from jsonschema.exceptions import best_match

    while error.context:
        error = best_match(error.context)
    return error


def check(kind: str, record: Any, *, path: str, line: int | None = None) -> list[Problem]:
    """Every schema violation of one record, each as a Problem naming file, line and pointer."""
    fast = fast_validator(kind)
    if fast is not None and fast(record):
        return []
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
    """Whether a record passes its schema (the compiled fast path where the schema allows it)."""
    fast = fast_validator(kind)
    return fast(record) if fast is not None else validator(kind).is_valid(record)


# -- the compiled fast path -----------------------------------------------------------------------
#
# jsonschema (pure Python) costs ~0.5 ms per record, which dominated validating 100,000 rows. Most
# records are valid, so each schema is also compiled by jsonschema-rs (Rust) to answer "valid or
# not"; jsonschema runs only when a record fails, to explain it with located messages. Both read the
# same schema files; tests/test_schema.py proves they agree over valid and mutated records.


def _compiled_registry():
    return _compiled_registry_of(tuple(KINDS))


@functools.cache
def _compiled_registry_of(kinds: tuple[str, ...]):
    import jsonschema_rs

    return jsonschema_rs.Registry([(load_schema(kind)["$id"], load_schema(kind)) for kind in kinds])


@functools.cache
def fast_validator(kind: str) -> Callable[[Any], bool] | None:
    """``is_valid`` of the compiled validator for one record kind, or None without jsonschema-rs."""
    try:
        import jsonschema_rs
    except ImportError:  # an install without the compiled wheel: jsonschema alone still works
        return None
    compiled = jsonschema_rs.validator_for(load_schema(kind), registry=_compiled_registry())
    return compiled.is_valid
