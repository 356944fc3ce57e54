"""A FlashInfer Trace definition (what ``FLASHINFER_TRACE_DUMP=1`` writes) as an ikdata definition.

torch-free: it reads the JSON and parses the reference and check sources, running neither.
What changes, and why (docs/flashinfer.md):

- **entry point**: FlashInfer's references are ``_<op>_reference(...)``; flashinfer-bench
  and ikdata call ``run``. A ``run`` is appended that calls the entry by keyword, so the
  definition loads in flashinfer-bench 0.1.2 too. The reference must be standalone: a
  name nothing in it binds (a helper left out) refuses the definition.
- **optional inputs**: a call that leaves one out (None) gets the definition without it,
  named ``<name>__without_<input>``; ``run`` passes None for it.
- **in-place outputs** whose name is an input's (``residual``) become ``<name>_out``:
  flashinfer-bench and ikdata keep inputs and outputs disjoint.
- **check thresholds**: the rtol/atol of the template's ``check`` (read from its source)
  become the definition's ``tolerance`` for every float output dtype, with
  ``matched_ratio`` from ``max_mismatch_pct``; a check with per-output thresholds keeps
  ikdata's table and is tagged ``ikdata:flashinfer-check=unmapped``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ikdata.core.references import entry_point, parse_reference, unbound_names

SOURCE_TAG = "ikdata:flashinfer"  # ikdata:flashinfer=<template key>: converted from an installed template
UNMAPPED_CHECK_TAG = "ikdata:flashinfer-check=unmapped"
OUT_SUFFIX = "_out"
WITHOUT = "__without_"
# A reference parameter that is a kernel's scratch buffer, not an input of the math (trtllm_batch_decode's
# workspace_buffer): ``run`` passes None for it when the definition does not hold it.
SCRATCH = frozenset({"workspace_buffer", "workspace"})

# flashinfer.trace.template.default_tolerances, the thresholds standard_check uses (flashinfer-python 0.7.2)
FLASHINFER_DEFAULTS: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7), "float32": (1e-5, 1e-5), "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2),
    "float8_e4m3fn": (1e-1, 1e-1), "float8_e5m2": (1e-1, 1e-1), "float8_e8m0fnu": (1e-1, 1e-1),
    "float4_e2m1": (1.0, 1.0),
}
FLOAT_DTYPES = frozenset(FLASHINFER_DEFAULTS)


class Refused(Exception):
    """A FlashInfer definition ikdata cannot hold; ``reason`` says why (counted in the closing figures)."""

    def __init__(self, reason: str, code: str) -> None:
        super().__init__(reason)
        self.reason, self.code = reason, code


@dataclass(frozen=True)
class Converted:
    """The ikdata record, and how FlashInfer's names map onto it."""

    record: dict
    entry: str
    renamed_outputs: Mapping[str, str] = field(default_factory=dict)  # ikdata output name -> FlashInfer's
    dropped_inputs: tuple[str, ...] = ()


def convert(fi: Mapping[str, Any], *, absent: Sequence[str] = (), template_key: str | None = None,
            params: Mapping[str, str] | None = None, entry: str | None = None) -> Converted:
    """The ikdata definition for a FlashInfer Trace definition record.

    Args:
        fi: the record as FlashInfer wrote it.
        absent: optional inputs a call left out.
        template_key: ``module:attr`` of the installed template it was rendered from (tags it, for trust).
        params: the template's input mapping, input name -> the API's parameter name (``hidden_states`` ->
            ``input``): a reference whose parameters are the API's names gets each input under that name.
        entry: the reference function's name, when known (helpers inlined after it are not the entry).

    Raises:
        Refused: an unknown dtype, a reference that is not standalone, no entry point, an absent
            input that is not optional, an undeclared axis.
    """
    name = fi.get("name")
    inputs, outputs = dict(fi.get("inputs") or {}), dict(fi.get("outputs") or {})
    reference = fi.get("reference")
    if not isinstance(name, str) or not isinstance(reference, str) or not inputs or not outputs:
        raise Refused("not a FlashInfer definition (needs name, inputs, outputs and reference)", "not-definition")
    tree, reason = parse_reference(reference)
    if tree is None:
        raise Refused(f"reference: {reason}", "reference-syntax")
    entry = (entry_point(tree, entry) if entry else None) or entry_point(tree)
    if entry is None:
        raise Refused("reference defines no entry point (no 'run', no single top-level function, no single "
                      "_<op>_reference)", "no-entry")
    missing = unbound_names(tree)
    if missing:
        raise Refused(f"reference is not standalone: it uses {', '.join(missing)}, which it does not define",
                      "not-standalone")
    for section, specs in (("inputs", inputs), ("outputs", outputs)):
        for tensor, spec in specs.items():
            dtype = spec.get("dtype")
            if dtype == "unknown" and section == "inputs" and spec.get("optional"):
                continue
            if dtype not in _KNOWN_DTYPES:
                raise Refused(f"{section} {tensor!r} has dtype {dtype!r}, which ikdata does not hold", "dtype")
            for axis in spec.get("shape") or ():
                if axis not in (fi.get("axes") or {}):
                    raise Refused(f"{section} {tensor!r} uses axis {axis!r}, not declared", "axis")
    for axis, spec in (fi.get("axes") or {}).items():
        if spec.get("type") == "const" and not isinstance(spec.get("value"), int):
            raise Refused(f"const axis {axis!r} has no value (nothing in the call carried it)", "axis-value")
    for tensor in absent:
        if tensor not in inputs or not inputs[tensor].get("optional"):
            raise Refused(f"input {tensor!r} is absent but not optional", "absent-input")
    entry_params = _entry_params(tree, entry)
    scratch: list[str] = []
    kept = {n: s for n, s in inputs.items() if n not in absent}
    for tensor, spec in kept.items():
        if spec.get("dtype") == "unknown":
            raise Refused(f"optional input {tensor!r} is present but its dtype is unknown", "dtype")
    passed_as = {}  # input name -> the entry's parameter it is passed as
    tuple_items: dict[str, dict[int, str]] = {}  # a tuple parameter -> its items' inputs by position
    if entry_params is not None:
        required, accepted = entry_params
        for input_name in inputs:
            api_name = (params or {}).get(input_name)
            if api_name and api_name.endswith("]") and "[" in api_name:  # item i of a tuple parameter
                base, _, index = api_name[:-1].partition("[")
                if input_name in kept and base not in inputs and (accepted is None or base in accepted):
                    passed_as[input_name] = base
                    tuple_items.setdefault(base, {})[int(index)] = input_name
                continue
            takes = (lambda p: p in accepted) if accepted is not None else (lambda p: p in required)
            if input_name not in (accepted or ()) and api_name and api_name != input_name and takes(api_name) \
                    and api_name not in inputs:
                passed_as[input_name] = api_name
        known = set(inputs) | set(passed_as.values())
        scratch = [p for p in required if p not in known and p in SCRATCH]  # a scratch buffer: not the math
        extra = [p for p in required if p not in known and p not in SCRATCH]
        if extra:
            raise Refused(f"{entry} needs {', '.join(extra)}, which are not inputs", "entry-params")
        if accepted is not None:
            unused = [n for n in kept if n not in accepted and passed_as.get(n) not in accepted]
            if unused:
                raise Refused(f"{entry} does not take the inputs {', '.join(unused)}", "entry-params")
    renamed = {}
    out_specs = {}
    for tensor, spec in outputs.items():
        target = tensor + OUT_SUFFIX if tensor in inputs else tensor
        renamed[target] = tensor
        out_specs[target] = {k: v for k, v in spec.items() if k != "optional"}
    record = {k: v for k, v in fi.items() if k not in ("inputs", "outputs", "reference")}
    record["name"] = name + (WITHOUT + "_".join(absent) if absent else "")
    record["inputs"] = {n: {k: v for k, v in s.items() if k != "optional"} for n, s in kept.items()}
    record["outputs"] = out_specs
    if absent:  # a var axis only an absent input had (min_p_sampling's num_indices) has no value: not declared
        used = {a for spec in [*record["inputs"].values(), *out_specs.values()] for a in spec.get("shape") or ()}
        unused = {a for a, spec in (fi.get("axes") or {}).items() if spec.get("type") == "var" and a not in used}
        if unused:
            record["axes"] = {a: spec for a, spec in (fi.get("axes") or {}).items() if a not in unused}
            constraints = [str(c) for c in fi.get("constraints") or []]
            record["constraints"] = [c for c in constraints
                                     if not set(c.replace("(", " ").replace(")", " ").split()) & unused]
            if not record["constraints"]:
                record.pop("constraints")
    record["reference"] = _with_run(reference, entry, list(kept), list(absent), entry_params, passed_as,
                                    [s.get("dtype") for s in out_specs.values()], _defaulted(tree, entry), scratch,
                                    tuple_items, _written_inputs(tree, entry, list(outputs), kept))
    tags = list(fi.get("tags") or [])
    if template_key:
        tags.append(f"{SOURCE_TAG}={template_key}")
    from ikdata.flashinfer.sampling import judge_of, per_row_settings

    judge = judge_of(fi)
    if judge is not None and "judge" not in record:  # drawn ids: the sampling family judges them, not equality
        record["judge"] = judge
        record = per_row_settings(record)  # a setting passed as a scalar or a per-row tensor: one definition
    tolerance = check_tolerance(fi.get("check"), [s["dtype"] for s in out_specs.values()])
    if tolerance is None:
        tags.append(UNMAPPED_CHECK_TAG)
    else:
        record["tolerance"] = tolerance
    record["tags"] = tags
    return Converted(record, entry, {k: v for k, v in renamed.items() if k != v}, tuple(absent))


def absent_inputs(name: str, candidates: Sequence[str]) -> list[str] | None:
    """The absent inputs a ``<name>__without_<a>_<b>`` variant's name encodes, read against the inputs that may be
    absent (``dt_bias`` is one input, not ``dt`` and ``bias``); [] for a name without the suffix, None when the
    suffix is not such a list."""
    if WITHOUT not in name:
        return []
    suffix = name.split(WITHOUT, 1)[1]

    def split(rest: str) -> list[str] | None:
        if not rest:
            return []
        for candidate in sorted(candidates, key=len, reverse=True):
            if rest == candidate or rest.startswith(candidate + "_"):
                tail = split(rest[len(candidate) + 1:])
                if tail is not None and candidate not in tail:
                    return [candidate, *tail]
        return None

    return split(suffix)


_KNOWN_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
                           "float8_e8m0fnu", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64",
                           "bool"})


def _entry_params(tree: ast.Module, entry: str) -> tuple[list[str], set[str] | None] | None:
    """(parameters without a default, every parameter name or None when it takes **kwargs)."""
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry)
    args = node.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    required = positional[:len(positional) - len(args.defaults)]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    accepted = None if args.kwarg else set(positional) | {a.arg for a in args.kwonlyargs}
    return required, accepted


# In-place outputs a reference computes but does not return (FlashInfer's fused_add_rmsnorm references return
# the normed output only; the API also writes residual + input into residual): appended to what ``run`` returns.
COMPLETED_OUTPUTS = {
    "_fused_add_rmsnorm_reference": "(hidden_states.to(torch.float32) + residual.to(torch.float32)).to(residual.dtype)",
    "_gemma_fused_add_rmsnorm_reference":
        "(hidden_states.to(torch.float32) + residual.to(torch.float32)).to(residual.dtype)",
}

_DECLARED = """
def _ikdata_as_declared(returned, dtypes):
    # a reference computing in float32 where the API returns bfloat16: each float output in its declared dtype
    import torch

    items = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    for i, (value, dtype) in enumerate(zip(items, dtypes)):
        target = getattr(torch, dtype, None) if isinstance(dtype, str) else None
        if isinstance(value, torch.Tensor) and isinstance(target, torch.dtype) and value.dtype != target \\
                and value.is_floating_point() and target.is_floating_point:
            items[i] = value.to(target)
    return tuple(items) if isinstance(returned, (tuple, list)) else items[0]
"""


def _written_inputs(tree: ast.Module, entry: str, outputs: Sequence[str], kept: Mapping[str, Any]) -> list[str]:
    """The inputs a reference writes its outputs into, in output order, when it returns nothing (a reference of an
    in-place API, ``fused_topk_deepseek``'s writing ``topk_values`` and ``topk_indices``); [] when it returns a
    value or an output is not one of its inputs."""
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry)
    if any(isinstance(n, ast.Return) and n.value is not None and not _is_none(n.value) for n in ast.walk(node)):
        return []
    return list(outputs) if outputs and all(o in kept for o in outputs) else []


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _defaulted(tree: ast.Module, entry: str) -> set[str]:
    """The entry's parameters that have a default (an absent input is left to it)."""
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry)
    args = node.args
    positional = args.posonlyargs + args.args
    named = positional[len(positional) - len(args.defaults):] if args.defaults else []
    return {a.arg for a in named} | {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}


def _with_run(reference: str, entry: str, inputs: list[str], absent: list[str],
              params: tuple[list[str], set[str] | None] | None, passed_as: Mapping[str, str] | None = None,
              dtypes: Sequence[Any] = (), defaulted: set[str] | frozenset = frozenset(),
              scratch: Sequence[str] = (), tuple_items: Mapping[str, Mapping[int, str]] | None = None,
              written: Sequence[str] = ()) -> str:
    passed_as = passed_as or {}
    tuple_items = tuple_items or {}
    if entry == "run" and not absent and not passed_as and not scratch and not written:
        return reference
    required, accepted = params if params else ([], None)
    in_tuples = {n for items in tuple_items.values() for n in items.values()}
    passed = [f"{passed_as.get(n, n)}={n}" for n in inputs if n not in in_tuples]
    passed += [f"{base}=({', '.join(items[i] for i in sorted(items))},)" for base, items in tuple_items.items()]
    # an absent input is left to the entry's own default when it has one (eps=1e-6), else passed as None
    passed += [f"{passed_as.get(n, n)}=None" for n in absent if passed_as.get(n, n) not in defaulted
               and (accepted is None or passed_as.get(n, n) in required)]
    passed += [f"{n}=None" for n in scratch]  # a workspace the kernel needs and the reference does not read
    call = f"{entry}({', '.join(passed)})"
    completed = COMPLETED_OUTPUTS.get(entry)
    if completed is not None and len(dtypes) == 2:
        call = f"({call}, {completed})"
    if written:  # a reference that writes its outputs into its inputs and returns nothing: run returns them
        items = written[0] if len(written) == 1 else f"({', '.join(written)})"
        call = f"({call}, {items})[1]"
    body = f"def run({', '.join(inputs)}):\n    return _ikdata_as_declared({call}, {tuple(dtypes)!r})\n"
    if entry == "run":  # the original run stays reachable under another name
        reference = reference.replace("def run(", "def _run_with_all_inputs(", 1)
        body = body.replace("_ikdata_as_declared(run(", "_ikdata_as_declared(_run_with_all_inputs(")
    return (reference.rstrip("\n") + "\n\n\n# ----- ikdata entry (flashinfer-bench calls run) -----\n" + _DECLARED
            + "\n\n" + body)


def check_tolerance(check: Any, output_dtypes: Sequence[str]) -> dict | None:
    """ikdata's ``tolerance`` for a FlashInfer ``check`` source (None: thresholds not one rtol/atol pair).

    ``standard_check`` (and no check) use FlashInfer's per-dtype defaults; a check whose
    signature or body sets ``rtol``/``atol`` (``rtol = 1e-3 if rtol is None else rtol``) uses them
    for every float dtype; ``max_mismatch_pct`` becomes ``matched_ratio``.
    """
    floats = sorted({d for d in output_dtypes if d in FLOAT_DTYPES})
    thresholds = {"rtol": None, "atol": None, "max_mismatch_pct": 0.0}
    if isinstance(check, str) and check.strip():
        tree, _ = parse_reference(check)
        function = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None) if tree else None
        if function is None:
            return None
        if function.name != "standard_check":
            found = _thresholds(function)
            if found is None:
                return None
            thresholds.update({k: v for k, v in found.items() if v is not None})
            if thresholds["rtol"] is None or thresholds["atol"] is None:
                return None
    tolerance: dict[str, Any] = {}
    for dtype in floats:
        rtol, atol = FLASHINFER_DEFAULTS[dtype]
        tolerance[dtype] = {"rtol": thresholds["rtol"] if thresholds["rtol"] is not None else rtol,
                            "atol": thresholds["atol"] if thresholds["atol"] is not None else atol}
    pct = thresholds["max_mismatch_pct"] or 0.0
    if pct >= 100:  # no elementwise bound at all: FlashInfer gates by cosine similarity alone (GEMM), not mapped
        return None
    if pct > 0:
        tolerance["matched_ratio"] = max(1e-9, 1.0 - pct / 100.0)
    return tolerance


def _thresholds(function: ast.FunctionDef) -> dict[str, float | None] | None:
    """rtol, atol and max_mismatch_pct a check applies; None when it names other thresholds (per output)."""
    args = function.args
    names = [a.arg for a in args.kwonlyargs]
    if any(n.endswith(("_rtol", "_atol")) for n in names):
        return None
    found: dict[str, float | None] = {}
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if arg.arg in ("rtol", "atol", "max_mismatch_pct"):
            found[arg.arg] = _number(default)
    for node in ast.walk(function):  # rtol = 1e-3 if rtol is None else rtol
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("rtol", "atol") and isinstance(node.value, ast.IfExp):
            value = _number(node.value.body)
            if value is not None:
                found[node.targets[0].id] = value
    return found


def _number(node: ast.AST | None) -> float | None:
    try:
        value = ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


__all__ = ["Converted", "FLASHINFER_DEFAULTS", "Refused", "SOURCE_TAG", "absent_inputs", "check_tolerance", "convert"]
