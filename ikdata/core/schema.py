"""Validate records against ``schemas/*.schema.json`` and turn errors into located problems.

The JSON Schemas installed with the package are the single source of truth: this
module loads them, nothing else describes a record's shape.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any, Callable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

from ikdata.core.problems import Problem

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


# -- a fast path for valid records ---------------------------------------------------------------
#
# jsonschema costs ~0.5 ms per record, which dominates validating 100,000 rows. Most records are
# valid, so each schema file is also compiled into plain Python predicates that only answer
# "valid or not"; jsonschema runs only when a record fails, to produce its located messages. The
# compiler covers the keywords these schemas use; a schema using any other keyword is not
# compiled, and jsonschema answers for it. The schema files stay the single source of truth.

_ANNOTATIONS = frozenset({"$schema", "$id", "title", "description", "$defs", "$comment", "examples",
                          "default", "deprecated", "readOnly", "writeOnly"})
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}


class _Unsupported(Exception):
    """A schema uses a keyword the fast path does not implement."""


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON Schema defines it (true is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return a == b


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Compiler:
    def __init__(self) -> None:
        self.compiled: dict[str, Callable[[Any], bool]] = {}

    def root(self, kind: str) -> Callable[[Any], bool]:
        key = f"urn:ikdata:{kind}"
        if key not in self.compiled:
            cell: list[Callable[[Any], bool]] = []
            self.compiled[key] = lambda v: cell[0](v)  # placeholder for recursive references
            document = load_schema(kind)
            cell.append(self.node(document, document))
            self.compiled[key] = cell[0]
        return self.compiled[key]

    def ref(self, target: str, document: dict) -> Callable[[Any], bool]:
        if target.startswith("#/$defs/") and "/" not in target[len("#/$defs/"):]:
            name = target[len("#/$defs/"):]
            key = f"{document.get('$id')}{target}"
            if key not in self.compiled:
                cell: list[Callable[[Any], bool]] = []
                self.compiled[key] = lambda v: cell[0](v)
                cell.append(self.node(document["$defs"][name], document))
                self.compiled[key] = cell[0]
            return self.compiled[key]
        if target.startswith("urn:ikdata:") and target[len("urn:ikdata:"):] in KINDS:
            kind = target[len("urn:ikdata:"):]
            self.root(kind)
            return lambda v: self.compiled[f"urn:ikdata:{kind}"](v)
        raise _Unsupported(target)

    def node(self, schema: Any, document: dict) -> Callable[[Any], bool]:  # noqa: C901 (one keyword each)
        if schema is True:
            return lambda v: True
        if schema is False:
            return lambda v: False
        if not isinstance(schema, dict):
            raise _Unsupported(repr(schema))
        checks: list[Callable[[Any], bool]] = []
        for key, value in schema.items():
            if key in _ANNOTATIONS or key in ("properties", "additionalProperties"):
                continue
            if key == "type":
                names = [value] if isinstance(value, str) else list(value)
                if any(n not in _TYPES for n in names):
                    raise _Unsupported(f"type {value}")
                tests = [_TYPES[n] for n in names]
                checks.append(tests[0] if len(tests) == 1 else lambda v, tests=tests: any(t(v) for t in tests))
            elif key == "required":
                keys = frozenset(value)
                checks.append(lambda v, keys=keys: not isinstance(v, dict) or v.keys() >= keys)
            elif key == "const":
                checks.append(lambda v, c=value: _json_equal(v, c))
            elif key == "enum":
                checks.append(lambda v, options=list(value): any(_json_equal(v, o) for o in options))
            elif key == "minLength":
                checks.append(lambda v, n=value: not isinstance(v, str) or len(v) >= n)
            elif key == "pattern":
                regex = re.compile(value)
                checks.append(lambda v, r=regex: not isinstance(v, str) or r.search(v) is not None)
            elif key == "minimum":
                checks.append(lambda v, n=value: not _is_number(v) or v >= n)
            elif key == "maximum":
                checks.append(lambda v, n=value: not _is_number(v) or v <= n)
            elif key == "exclusiveMinimum":
                checks.append(lambda v, n=value: not _is_number(v) or v > n)
            elif key == "minProperties":
                checks.append(lambda v, n=value: not isinstance(v, dict) or len(v) >= n)
            elif key == "items":
                item = self.node(value, document)
                checks.append(lambda v, f=item: not isinstance(v, list) or all(f(x) for x in v))
            elif key == "oneOf":
                options = [self.node(s, document) for s in value]
                generic = functools.partial(_one_of, tuple(options))
                tag = _discriminator(value)
                if tag is None:
                    checks.append(generic)
                else:  # options told apart by a required string constant: test only the one it names
                    field, by_value = tag[0], {c: options[i] for c, i in tag[1].items()}
                    checks.append(functools.partial(_tagged_one_of, field, by_value, generic))
            elif key == "not":
                inner = self.node(value, document)
                checks.append(lambda v, f=inner: not f(v))
            elif key == "$ref":
                checks.append(self.ref(value, document))
            else:
                raise _Unsupported(key)
        properties = {k: self.node(s, document) for k, s in (schema.get("properties") or {}).items()}
        extra = schema.get("additionalProperties")
        extra_check = self.node(extra, document) if extra is not None else None
        if properties or extra_check is not None:
            def objects(v: Any, props=properties, extra=extra_check) -> bool:
                if not isinstance(v, dict):
                    return True
                for k, x in v.items():
                    f = props.get(k)
                    if f is not None:
                        if not f(x):
                            return False
                    elif extra is not None and not extra(x):
                        return False
                return True
            checks.append(objects)
        if not checks:
            return lambda v: True
        if len(checks) == 1:
            return checks[0]
        return functools.partial(_all_of, tuple(checks))


def _all_of(checks: tuple[Callable[[Any], bool], ...], value: Any) -> bool:
    for check in checks:
        if not check(value):
            return False
    return True


def _discriminator(options: list[Any]) -> tuple[str, dict[str, int]] | None:
    """The property whose string ``const`` differs in every option and every option requires."""
    if not options or not all(isinstance(o, dict) for o in options):
        return None
    for field in (options[0].get("properties") or {}):
        consts = {}
        for i, option in enumerate(options):
            spec = (option.get("properties") or {}).get(field)
            if not (isinstance(spec, dict) and isinstance(spec.get("const"), str)
                    and field in (option.get("required") or ())):
                break
            consts[spec["const"]] = i
        else:
            if len(consts) == len(options):
                return field, consts
    return None


def _tagged_one_of(field: str, by_value: dict[str, Callable[[Any], bool]],
                   generic: Callable[[Any], bool], value: Any) -> bool:
    if isinstance(value, dict):
        tag = value.get(field)
        if isinstance(tag, str):
            option = by_value.get(tag)
            return option(value) if option is not None else False
        if field not in value:
            return False
    return generic(value)


def _one_of(options: tuple[Callable[[Any], bool], ...], value: Any) -> bool:
    matched = 0
    for option in options:
        if option(value):
            matched += 1
            if matched > 1:
                return False
    return matched == 1


@functools.cache
def fast_validator(kind: str) -> Callable[[Any], bool] | None:
    """A compiled ``is_valid`` for one record kind, or None if its schema uses other keywords."""
    try:
        return _Compiler().root(kind)
    except _Unsupported:
        return None
