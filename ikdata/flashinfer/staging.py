"""Tie each recorded call to its definition and write both as an ikdata dataset (a staging folder).

A dump does not name its definition, so it is recomputed: each installed TraceTemplate
whose required inputs the call passes gives, from the call's shapes and the template's
const axes, a definition name (``rmsnorm_h4096``); a definitions folder, when given,
must hold that name with the call's ``fi_api`` tag. ``arg_i`` / ``kwarg_x`` are mapped to
parameters through the recorded signature (:mod:`.dumps`), parameters to the definition's
inputs through the template's ``param``; ``result`` / ``result_i`` become its outputs in
order. The staging dataset is what ``ikdata import`` then reads; SRC is never written.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import orjson

from ikdata.core.definitions import USER, Definition
from ikdata.core.errors import IkdataError
from ikdata.flashinfer import loader
from ikdata.flashinfer.convert import SCRATCH, Refused, convert
from ikdata.flashinfer.dumps import Call, read_calls
from ikdata.flashinfer.inline import inlined, input_params, reference_name
from ikdata.flashinfer.sampling_calls import as_declared, provenance, samples_as_declared


@dataclass
class Staged:
    """What staging wrote and what it left out (folder or call, and why)."""

    root: Path
    workloads: int = 0
    calls: int = 0
    definitions: dict[str, Definition] = field(default_factory=dict)
    left_out: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Match:
    template: Any
    key: str
    record: dict  # the FlashInfer definition as fi_trace renders it for this call


def read_definition_folder(folder: Path) -> tuple[dict[str, dict], list[tuple[str, str]]]:
    """FlashInfer Trace definition records by name, and the files that are not one (with why)."""
    found, bad = {}, []
    for path in sorted(folder.rglob("*.json")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            record = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            bad.append((str(path), f"not JSON: {exc}"))
            continue
        if not isinstance(record, dict) or not isinstance(record.get("name"), str):
            bad.append((str(path), "not a definition: no 'name'"))
            continue
        found[record["name"]] = record
    return found, bad


def is_definition_folder(folder: Path) -> bool:
    """Whether ``folder`` holds FlashInfer Trace definitions (a JSON with ``fi_api:`` tags) at its top."""
    for path in sorted(folder.glob("*.json"))[:20]:
        with contextlib.suppress(OSError, orjson.JSONDecodeError):
            record = orjson.loads(path.read_bytes())
            if isinstance(record, dict) and any(str(t).startswith("fi_api:") for t in record.get("tags") or ()):
                return True
    return False


@contextlib.contextmanager
def _no_trace_dump() -> Iterator[None]:
    """fi_trace writes a file when FLASHINFER_TRACE_DUMP_DIR is set; rendering here must write nothing."""
    saved = os.environ.pop("FLASHINFER_TRACE_DUMP_DIR", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["FLASHINFER_TRACE_DUMP_DIR"] = saved


_MATCHED: dict[tuple, Match | Refused] = {}


def match(call: Call, folder_definitions: Mapping[str, dict] | None) -> Match:
    """The template and definition of a call (calls of one API with the same shapes, dtypes and plain
    arguments are matched once).

    Raises:
        Refused: no template fits, several do, or the folder has no definition of that name.
    """
    import torch

    def described(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(v.shape), str(v.dtype))
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(described(i) for i in v))
        return repr(v)

    key = (call.fi_api, id(folder_definitions), tuple(sorted((p, described(v)) for p, v in call.arguments.items())))
    found = _MATCHED.get(key)
    if found is None:
        try:
            found = _match(call, folder_definitions)
        except Refused as exc:
            found = exc
        _MATCHED[key] = found
    if isinstance(found, Refused):
        raise found
    return found


def _match(call: Call, folder_definitions: Mapping[str, dict] | None) -> Match:
    import torch

    fitting = []
    for ref in loader.templates():
        template = ref.template
        tensors = [(n, d) for n, d in template.inputs.items() if type(d).__name__ == "Tensor"]
        ok = True
        for _, d in tensors:
            value = _argument(call.arguments, d.param or _, d.tuple_idx)
            if value is None and not d.optional:
                ok = False
                break
            if isinstance(value, torch.Tensor) and value.ndim != len(d.dim_names):
                ok = False
                break
        if ok and tensors:
            used = {d.param or n for n, d in {**template.inputs, **template.outputs}.items()}
            passed = {p for p, v in call.arguments.items() if isinstance(v, torch.Tensor) and p not in SCRATCH}
            if passed <= used:  # every tensor the call passed is one the template reads or writes
                fitting.append(ref)
    named = {ref.key for ref in loader.declared_templates(call.fi_api)}
    if named:  # a FlashInfer API: its own decorator names its templates, and no other template is its call
        picked = loader.dispatched(call.fi_api, dict(call.arguments))  # a dispatcher picks one by the arguments
        named = {ref.key for ref in picked} if picked else named
        fitting = [ref for ref in fitting if ref.key in named]
    kwargs = call.arguments
    found = []
    with _no_trace_dump():
        for ref in fitting:
            try:
                record = ref.template.build_fi_trace_fn(call.fi_api)(**kwargs)
            except Exception:  # noqa: BLE001  a template that does not fit this call
                continue
            if folder_definitions is not None:
                theirs = folder_definitions.get(record["name"])
                if theirs is None or f"fi_api:{call.fi_api}" not in (theirs.get("tags") or ()):
                    continue
            found.append(Match(ref.template, ref.key, record))
    if folder_definitions is None and len(found) > 1:
        named = [m for m in found if _named_after(m, call.function)]
        longest = max((len(m.template.name_prefix or m.template.op_type) for m in named), default=0)
        found = [m for m in named if len(m.template.name_prefix or m.template.op_type) == longest] or found
    if len(found) != 1:
        where = "in the definitions folder" if folder_definitions is not None else "among FlashInfer's templates"
        if not found:
            raise Refused(f"no definition {where} fits {call.fi_api} with these arguments", "no-definition")
        raise Refused(f"{len(found)} definitions {where} fit {call.fi_api}: "
                      f"{', '.join(sorted(m.record['name'] for m in found))}", "ambiguous")
    return found[0]


def _named_after(m: Match, function: str) -> bool:
    prefix = m.template.name_prefix or m.template.op_type
    return function == prefix or function.endswith(prefix)


def _argument(arguments: Mapping[str, Any], param: str, tuple_idx: int | None) -> Any:
    value = arguments.get(param)
    if tuple_idx is not None:
        value = value[tuple_idx] if isinstance(value, (list, tuple)) and len(value) > tuple_idx else None
    return value


def stage(calls_folder: Path | None, definitions_folder: Path | None, out: Path,
          exclude: Mapping[str, str] | None = None) -> Staged:
    """Write the calls (and their definitions) under ``out`` as an ikdata dataset.

    ``exclude``: call folder names left out, with why (the sampling calls an earlier staging could not judge).

    Raises:
        IkdataError: from the writer, for a dataset it cannot write.
    """
    from ikdata.core.writer import DatasetWriter

    staged = Staged(out)
    writer = DatasetWriter(out)
    _MATCHED.clear()  # keyed by the folder's identity: valid within one staging only
    folder_definitions = None
    if definitions_folder is not None:
        folder_definitions, bad = read_definition_folder(definitions_folder)
        staged.left_out += bad
    calls, skipped = read_calls(calls_folder) if calls_folder is not None else ([], [])
    staged.left_out += [(s.folder, s.reason) for s in skipped]
    for call in calls:
        staged.calls += 1
        if exclude and call.folder.name in exclude:
            staged.left_out.append((str(call.folder), exclude[call.folder.name]))
            continue
        try:
            call = as_declared(call)  # a sampling API's settings and indices in its template's form
            found = match(call, folder_definitions)
            fi_record = folder_definitions[found.record["name"]] if folder_definitions is not None else found.record
            definition, inputs, outputs = workload(found, fi_record, call.arguments, call.results,
                                                   source=str(definitions_folder or "flashinfer"))
            writer.add(definition, inputs, outputs, provenance(call))
            staged.definitions[definition.name] = definition
        except Refused as exc:
            staged.left_out.append((str(call.folder), exc.reason))
        except IkdataError as exc:
            staged.left_out.append((str(call.folder), str(exc)))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, RuntimeError) as exc:
            # a record that passed every check yet does not fit the template: its call is left out, named
            staged.left_out.append((str(call.folder), f"cannot be read as a {call.fi_api} call: "
                                                      f"{type(exc).__name__}: {exc}"))
    if folder_definitions is not None and calls_folder is None:
        for name, record in folder_definitions.items():  # a definitions folder alone: its definitions
            try:
                converted = convert(record, template_key=template_key_of(record))
                definition = Definition.from_dict(converted.record, origin=USER, source=str(definitions_folder))
                issues = definition.check()
                if issues:
                    raise Refused("; ".join(issues), "definition")
                writer.add_definition(definition)
                staged.definitions[definition.name] = definition
            except Refused as exc:
                staged.left_out.append((name, exc.reason))
    staged.workloads = len({r for r in _uuids(out)})
    writer.commit()
    return staged


def workload(found: Match, fi_record: Mapping[str, Any], arguments: Mapping[str, Any], results: list,
             *, source: str) -> tuple[Definition, dict[str, Any], dict[str, Any]]:
    """The ikdata definition, inputs and outputs of one call of ``found``'s template.

    Absent optional inputs pick the definition variant without them; a 0-d tensor where the
    definition has a scalar becomes a Python number; ``results`` are the outputs in order.

    Raises:
        Refused: the definition cannot be converted, or the results do not fit its outputs.
    """
    import torch

    absent = [n for n, d in found.template.inputs.items()
              if getattr(d, "optional", False) and n in (fi_record.get("inputs") or {})
              and _argument(arguments, getattr(d, "param", None) or n, getattr(d, "tuple_idx", None)) is None]
    converted = convert(inlined(fi_record, found.template), absent=absent, template_key=found.key,
                        params=input_params(found.template), entry=reference_name(found.template))
    definition = Definition.from_dict(converted.record, origin=USER, source=source)
    issues = definition.check()
    if issues:
        raise Refused("; ".join(issues), "definition")
    inputs = {}
    for name, spec in definition.inputs.items():
        descriptor = found.template.inputs.get(name)
        param = (getattr(descriptor, "param", None) or name) if descriptor is not None else name
        value = _argument(arguments, param, getattr(descriptor, "tuple_idx", None))
        if spec.shape is None and isinstance(value, torch.Tensor) and value.ndim == 0:
            value = value.item()  # a 0-d tensor where the definition has a scalar
        inputs[name] = _checked(value, spec, f"input {name!r} (parameter {param!r})")
    outputs = samples_as_declared(_outputs(results, definition), definition)
    for name, value in outputs.items():
        _checked(value, definition.outputs[name], f"output {name!r}")
    return definition, inputs, outputs


def _checked(value: Any, spec: Any, what: str) -> Any:
    """``value`` when it is what the definition's ``spec`` needs (a tensor, or a number for a scalar)."""
    import torch

    if spec.shape is None:
        if isinstance(value, (bool, int, float)):
            return value
        raise Refused(f"{what} is {_kind(value)}; the definition needs a {spec.dtype} scalar", "argument-type")
    if isinstance(value, torch.Tensor):
        return value
    raise Refused(f"{what} is {_kind(value)}; the definition needs a {spec.dtype} tensor", "argument-type")


def _kind(value: Any) -> str:
    if value is None:
        return "None (not passed)"
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return f"a recorded {value['type']} value"
    return f"a {type(value).__name__}"


def template_key_of(record: Mapping[str, Any]) -> str | None:
    """The installed template that renders a definition of this name and op_type (for trust after import)."""
    const = {n: a.get("value") for n, a in (record.get("axes") or {}).items() if a.get("type") == "const"}
    for ref in loader.templates():
        t = ref.template
        if t.op_type == record.get("op_type") and set(t.inputs) == set(record.get("inputs") or ()) \
                and t.definition_name(const) == record.get("name"):
            return ref.key
    return None


def _outputs(results: list, definition: Definition) -> dict[str, Any]:
    import torch

    names = list(definition.outputs)
    if not any(isinstance(r, torch.Tensor) for r in results):
        raise Refused("the recorder holds no output tensor for this call (an in-place API that returns None "
                      "writes its outputs into its inputs after they were dumped)", "no-outputs")
    if len(results) != len(names):
        raise Refused(f"the call returned {len(results)} value(s); the definition has {len(names)} outputs "
                      f"({', '.join(names)})", "outputs")
    return dict(zip(names, results))


def _uuids(root: Path) -> Iterator[str]:
    for path in sorted((root / "workloads").rglob("*.jsonl")) if (root / "workloads").is_dir() else []:
        for line in path.read_bytes().splitlines():
            if line.strip():
                yield orjson.loads(line)["workload"]["uuid"]


__all__ = ["Match", "Staged", "is_definition_folder", "match", "read_definition_folder", "stage"]
