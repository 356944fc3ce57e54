"""Any Diffusers denoiser's forward call as a workload, discovered from the call itself.

A denoiser (a Diffusers ``ModelMixin`` that the pipeline calls between scheduler steps) is called with
tensors, Python scalars, ``None`` and small containers of them (``added_cond_kwargs``, a tuple of rotary
embeddings). :func:`flatten` turns one call into named values (``added_cond_kwargs__resolution``,
``image_rotary_emb__0``), :func:`definition_for` makes the definition those values are a workload of
(named by the denoiser class, the latent dtype and the call's structure, so every step of a pipeline
is a workload of one definition), and :func:`forward` calls the denoiser again from the values. The
definition's reference is generated from the same structure (:func:`reference_source`); replay runs
:func:`forward` itself, ikdata's own code, and only for a definition whose reference is exactly the
generated one, so no dataset's code runs.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Mapping

from ikdata.core.definitions import Definition

GENERIC_TAG = "ikdata:denoiser-call"
NONE_TAG = "ikdata:call-none="  # a value passed as None
TUPLE_TAG = "ikdata:call-tuple="  # a container rebuilt as a tuple (else a dict)
SEP = "__"
SKIPPED_KWARGS = ("return_dict",)  # forward is always called with return_dict=False
_SUFFIX = {"torch.float32": "f32", "torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float64": "f64"}
_DTYPES = {"torch.float64": "float64", "torch.float32": "float32", "torch.float16": "float16",
           "torch.bfloat16": "bfloat16", "torch.int64": "int64", "torch.int32": "int32", "torch.int16": "int16",
           "torch.int8": "int8", "torch.uint8": "uint8", "torch.bool": "bool"}
_SIGNATURES: dict[Any, inspect.Signature] = {}
_DEFINITIONS: dict[tuple, Definition] = {}


@dataclass(frozen=True)
class FlatCall:
    """One forward call as named values (tensors and Python scalars), with the structure to rebuild it."""

    values: dict[str, Any]
    nones: tuple[str, ...]
    tuples: tuple[str, ...]


def flatten(module: Any, args: tuple, kwargs: dict) -> FlatCall:
    """The call's arguments, bound to ``module.forward``'s parameters, as named values.

    Raises:
        ValueError: an argument ikdata cannot record (an object that is no tensor, scalar, None, dict,
            list or tuple of them), naming it.
    """
    forward = type(module).forward
    signature = _SIGNATURES.get(forward)
    if signature is None:
        signature = _SIGNATURES[forward] = inspect.signature(forward)
    bound = signature.bind(module, *args, **kwargs)
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(signature.parameters)), None)  # self
    for name, param in signature.parameters.items():
        if param.kind == param.VAR_KEYWORD and isinstance(arguments.get(name), dict):
            arguments.update(arguments.pop(name))
        elif param.kind == param.VAR_POSITIONAL and arguments.get(name):
            raise ValueError(f"{type(module).__name__}.forward got extra positional arguments")
    values: dict[str, Any] = {}
    nones: list[str] = []
    tuples: list[str] = []

    def put(name: str, value: Any, depth: int) -> None:
        if _is_tensor(value) or isinstance(value, (bool, int, float)):
            values[name] = value
        elif value is None:
            nones.append(name)
        elif isinstance(value, (tuple, list)) and depth < 2:
            tuples.append(name)
            if not value:
                raise ValueError(f"argument {name!r} is an empty {type(value).__name__}")
            for i, item in enumerate(value):
                put(f"{name}{SEP}{i}", item, depth + 1)
        elif isinstance(value, dict) and depth < 2 and all(isinstance(k, str) and k.isidentifier() for k in value):
            if not value:
                nones.append(name)  # an empty dict: nothing to pass (same as None for Diffusers' kwargs dicts)
            for key, item in value.items():
                put(f"{name}{SEP}{key}", item, depth + 1)
        else:
            raise ValueError(f"argument {name!r} is a {type(value).__name__}, which ikdata cannot record as a "
                             "workload input (tensors, Python scalars, None, and dicts or tuples of them)")

    for name, value in arguments.items():
        if name not in SKIPPED_KWARGS:
            put(name, value, 0)
    return FlatCall(values, tuple(nones), tuple(tuples))


def outputs_of(output: Any) -> dict[str, Any]:
    """The forward's tensor outputs by name: ``out``, then ``out_1``, ``out_2``... in the returned order."""
    if isinstance(output, tuple):
        items = list(output)
    elif hasattr(output, "to_tuple"):
        items = list(output.to_tuple())
    else:
        items = [output]
    tensors = [t for t in items if _is_tensor(t)]
    if not tensors:
        raise ValueError("the denoiser returned no tensor")
    return {("out" if i == 0 else f"out_{i}"): t for i, t in enumerate(tensors)}


def definition_for(module: Any, call: FlatCall, outputs: Mapping[str, Any]) -> Definition:
    """The definition of this call's structure: ``denoiser_<Class>_<dtype>_<digest of the structure>``."""
    from ikdata.core.digest import record_digest

    cls = type(module).__name__
    key = (cls, call.nones, call.tuples, *((n, _kind(v)) for n, v in call.values.items()), None,
           *((n, _kind(v)) for n, v in outputs.items()))
    cached = _DEFINITIONS.get(key)
    if cached is not None:  # every step of a call makes the same structure: made once
        return cached
    inputs = {n: _spec(n, v) for n, v in call.values.items()}
    outs = {n: _spec(n, v) for n, v in outputs.items()}
    main = next((v for v in call.values.values() if _is_tensor(v) and v.is_floating_point()), None)
    suffix = _SUFFIX.get(str(main.dtype), "x") if main is not None else "x"
    structure = {"class": cls, "inputs": inputs, "outputs": outs, "nones": list(call.nones),
                 "tuples": list(call.tuples)}
    name = f"denoiser_{cls}_{suffix}_{record_digest(structure)[:10]}"
    axes = {axis: {"type": "var"} for spec in (*inputs.values(), *outs.values()) for axis in (spec["shape"] or [])}
    tags = ["ikdata:diffusion", "ikdata:denoiser", "ikdata:needs-model", GENERIC_TAG, f"diffusers:{cls}",
            *(NONE_TAG + n for n in call.nones), *(TUPLE_TAG + n for n in call.tuples)]
    record = {"name": name, "op_type": "denoiser",
              "description": f"{cls}.forward as its pipeline calls it between scheduler steps (discovered from the "
                             "call: every tensor and scalar argument is an input, every returned tensor an output).",
              "tags": tags, "axes": axes, "inputs": inputs, "outputs": outs}
    record["reference"] = reference_source(Definition.from_dict({**record, "reference": "-"}))
    if len(_DEFINITIONS) > 64:
        _DEFINITIONS.clear()
    found = _DEFINITIONS[key] = Definition.from_dict(record)
    return found


def _kind(value: Any) -> tuple:
    return (str(value.dtype), value.dim()) if _is_tensor(value) else (type(value).__name__,)


def _spec(name: str, value: Any) -> dict[str, Any]:
    if not _is_tensor(value):
        return {"shape": None, "dtype": "bool" if isinstance(value, bool) else
                "int64" if isinstance(value, int) else "float32"}
    dtype = _DTYPES.get(str(value.dtype))
    if dtype is None:
        raise ValueError(f"argument {name!r} has dtype {value.dtype}, which a definition cannot declare")
    return {"shape": [f"{name}_{d}" for d in range(value.dim())], "dtype": dtype}


def is_generic(definition: Any) -> bool:
    record = getattr(definition, "record", None) or {}
    return GENERIC_TAG in (record.get("tags") or ())


def structure(definition: Definition) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names passed as None, containers that are tuples) of a generic definition, from its tags."""
    tags = definition.record.get("tags") or ()
    return (tuple(t[len(NONE_TAG):] for t in tags if t.startswith(NONE_TAG)),
            tuple(t[len(TUPLE_TAG):] for t in tags if t.startswith(TUPLE_TAG)))


def unflatten(values: Mapping[str, Any], nones: tuple[str, ...], tuples: tuple[str, ...]) -> dict[str, Any]:
    """The keyword arguments of the forward call ``values`` were flattened from."""
    tree: dict[str, Any] = {}
    for name, value in [*values.items(), *((n, None) for n in nones)]:
        parts = name.split(SEP)
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if parts[-1] not in node:  # an empty dict recorded as None stays {}: keep the container
            node[parts[-1]] = value

    def build(node: Any, path: str) -> Any:
        if not isinstance(node, dict):
            return node
        built = {k: build(v, f"{path}{SEP}{k}" if path else k) for k, v in node.items()}
        if path in tuples:
            return tuple(built[str(i)] for i in range(len(built)))
        return built

    return {k: build(v, k) for k, v in tree.items()}


def reference_source(definition: Definition) -> str:
    """The reference of a generic denoiser definition: rebuild the call, run the model (replay passes it)."""
    nones, tuples = structure(definition)
    names = list(definition.inputs)
    cls = next((t.split(":", 1)[1] for t in definition.record.get("tags") or () if t.startswith("diffusers:")), "")
    params = ", ".join(names)
    return f'''import torch

CLASS = {cls!r}
NAMES = {tuple(names)!r}
NONES = {nones!r}
TUPLES = {tuples!r}
_BUILT = {{}}


def _module(model):
    """The denoiser: an nn.Module, or {{"record": model record, "state_dict": {{name: tensor}}}} built once by its
    Diffusers class and config, cached by the record's digest."""
    if hasattr(model, "forward"):
        return model
    if model is None:
        raise ValueError("this reference needs the model: replay resolves it from the trajectory's model record")
    record = model["record"]
    built = _BUILT.get(record["digest"])
    if built is None:
        import diffusers

        built = getattr(diffusers, record["class"]).from_config(record["config"])
        built.load_state_dict(model["state_dict"])
        built = built.to(next(iter(model["state_dict"].values())).dtype).eval()
        _BUILT[record["digest"]] = built
    return built


def _call(values):
    tree = {{}}
    for name, value in [*values.items(), *((n, None) for n in NONES)]:
        parts = name.split("{SEP}")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {{}})
        node.setdefault(parts[-1], value)

    def build(node, path):
        if not isinstance(node, dict):
            return node
        built = {{k: build(v, path + "{SEP}" + k if path else k) for k, v in node.items()}}
        return tuple(built[str(i)] for i in range(len(built))) if path in TUPLES else built

    return {{k: build(v, k) for k, v in tree.items()}}


def run({params}, *, model=None):
    """{cls}.forward on the call's arguments (flattened: a__b is a["b"], a__0 is a[0]). Needs the model."""
    kwargs = _call(dict(zip(NAMES, ({params},))))
    with torch.no_grad():
        out = _module(model)(**kwargs, return_dict=False)
    out = [t for t in (out if isinstance(out, tuple) else (out,)) if torch.is_tensor(t)]
    return out[0] if len(out) == 1 else tuple(out)
'''


def check_generic(definition: Definition) -> str | None:
    """Why ``definition`` is not a generic denoiser definition ikdata made (its reference is not the one
    generated from its own inputs and tags), or None."""
    if definition.reference != reference_source(definition):
        return (f"definition {definition.name} is tagged {GENERIC_TAG} but its reference is not the one ikdata "
                "generates for its inputs; replay runs no other code for it")
    return None


def vouches(definition: Any) -> bool:
    """Whether replay judges ``definition``'s workloads with ikdata's own forward, never its reference text (the
    diffusion family's ``vouches``: re-judging them at import needs no trust in the definition)."""
    return is_generic(definition) and check_generic(definition) is None


def model_class(name: object) -> type:
    """The Diffusers model class a model record names: a ``ModelMixin`` subclass diffusers exports.

    Raises:
        ValueError: any other name.
    """
    import diffusers

    found = getattr(diffusers, name, None) if isinstance(name, str) and name.isidentifier() else None
    base = diffusers.ModelMixin
    if not (isinstance(found, type) and issubclass(found, base) and found is not base):
        raise ValueError(f"model class {name!r} is not a model diffusers exports (a ModelMixin subclass); replay "
                         "builds no other class a record names")
    return found


_BUILT: dict[str, Any] = {}


def build(model: Mapping[str, Any]) -> Any:
    """The denoiser of ``{"record", "state_dict"}`` (replay's model), built once per model digest."""
    record = model["record"]
    built = _BUILT.get(record["digest"])
    if built is None:
        built = model_class(record["class"]).from_config(record["config"])
        built.load_state_dict(model["state_dict"])
        built = built.to(next(iter(model["state_dict"].values())).dtype).eval()
        if len(_BUILT) > 4:
            _BUILT.clear()
        _BUILT[record["digest"]] = built
    return built


def forward(definition: Definition, values: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    """Run the denoiser on a generic definition's input values; its outputs by the definition's names."""
    import torch

    nones, tuples = structure(definition)
    kwargs = unflatten({n: values[n] for n in definition.inputs}, nones, tuples)
    with torch.inference_mode():
        output = build(model)(**kwargs, return_dict=False)
    found = outputs_of(output)
    return {n: found[n] for n in definition.outputs if n in found}


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "element_size")


__all__ = ["FlatCall", "GENERIC_TAG", "build", "check_generic", "definition_for", "flatten", "forward", "is_generic",
           "model_class", "outputs_of", "reference_source", "structure", "unflatten", "vouches"]
