"""A recorded call of a FlashInfer sampling API in the form its template declares, with the same draws' law.

FlashInfer's sampling APIs take more forms than their templates declare: ``top_k`` as an int or a
per-row tensor where ``top_k_sampling``'s template declares a ``[batch_size]`` tensor, ``min_p`` as a
per-row tensor where ``min_p_sampling`` declares a scalar, ``indices`` on every sampler though only
some templates have it, and samples returned as ``int32`` (or ``indices``' dtype) where some
templates declare ``int64``. Each form is rewritten here into the template's, without changing which
distribution any draw comes from (FlashInfer's kernels read the row ``indices[i]`` and that row's
setting, ``top_k_arr[row_idx]``):

- a setting given as a number becomes a ``[rows]`` tensor of it (the definition's settings are
  per row: :func:`ikdata.flashinfer.sampling.per_row_settings`), in the dtype FlashInfer's kernel reads
  (``int32`` for ``top_k``, ``float32`` for ``top_p`` / ``min_p``);
- ``indices`` passed to an API whose template has none: the rows it names (and their settings) are
  gathered, so output row i is drawn from input row i; the receipt says so (``rows_gathered``);
- drawn ids are held in the dtype the definition declares when every id fits (:func:`samples_as_declared`);
- ``top_k_top_p_sampling_*``'s ``filter_apply_order`` is the cut order its receipt declares
  (``sampler.order``: ``top_k_first`` is ``hf``, ``joint`` is ``sglang``), which the definition's judge
  (order ``engine``) reads, so every draw is judged against the cut the call asked for;
- a renorm or mask API (an operator) given a per-row setting whose rows agree gets that one value.

Only FlashInfer's own sampling APIs (a template whose one output is ``samples``, named by the API's
decorator) are rewritten; every other call is returned as it was.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ikdata.flashinfer import loader
from ikdata.flashinfer.convert import Refused
from ikdata.flashinfer.dumps import Call
from ikdata.flashinfer.sampling import SAMPLING_INPUTS, SETTINGS

KERNEL_DTYPES = {"top_k": "int32", "top_p": "float32", "min_p": "float32"}  # what the kernels read (.int(), .float())
GATHERED = "rows_gathered"  # provenance key: the call's indices were applied to its rows and settings
ORDER = "ikdata_sampler_order"  # metadata key: the cut order the call's filter_apply_order means
# top_k_top_p_sampling_*'s filter_apply_order as the sampling family's cut orders: "top_k_first" renormalises the
# top k and cuts top-p on it (Hugging Face's order), "joint" keeps the tokens in both the top k and the top-p set
# of the whole distribution (SGLang's); FlashInfer 0.7's default is "top_k_first"
FILTER_ORDERS = {"top_k_first": "hf", "joint": "sglang"}
DEFAULT_FILTER_ORDER = "top_k_first"


def declared_template(call: Call) -> Any | None:
    """The sampling template FlashInfer's decorator names for ``call``'s API, or None (not a sampling API of
    FlashInfer's, or not one template)."""
    found = [ref.template for ref in loader.declared_templates(call.fi_api)]
    if len(found) != 1:
        return None
    template = found[0]
    if template.op_type != "sampling" or not any(n in template.inputs for n in SAMPLING_INPUTS):
        return None
    return template


def is_sampler(template: Any) -> bool:
    """Whether a sampling template's output is drawn ids (a sampler), not a deterministic renorm or mask."""
    return list(template.outputs) == ["samples"]


def _one_value(call: Call, template: Any) -> Call:
    """A renorm or mask call (an operator) given a per-row setting tensor: its one value when every row has it.

    Raises:
        Refused: the rows' values differ (the template holds one value; FlashInfer's reference reads one).
    """
    import torch

    arguments = dict(call.arguments)
    for name in SETTINGS:
        descriptor = template.inputs.get(name)
        key = _param(template, name)
        value = arguments.get(key)
        if type(descriptor).__name__ != "Scalar" or not isinstance(value, torch.Tensor) or not value.numel():
            continue
        flat = value.reshape(-1)
        if not bool((flat == flat[0]).all()):
            raise Refused(f"{name} differs per row ({flat[:4].tolist()}...); FlashInfer's {template.name_prefix} "
                          f"template holds one {name} and its reference reads one", "argument-type")
        arguments[key] = flat[0].item()
    return replace(call, arguments=arguments)


def as_declared(call: Call, template: Any = None) -> Call:
    """``call`` with its settings and ``indices`` in the form its sampling template declares (see the module).

    ``template``: the call's template when the caller knows it (capture); else the one its API's decorator names.

    Raises:
        Refused: ``indices`` or a per-row setting that does not fit the rows it indexes.
    """
    import torch

    template = template if template is not None else declared_template(call)
    if template is None or template.op_type != "sampling" or not any(n in template.inputs for n in SAMPLING_INPUTS):
        return call
    if not is_sampler(template):
        return _one_value(call, template)
    arguments = dict(call.arguments)
    source = next((n for n in SAMPLING_INPUTS if n in template.inputs), None)
    param = _param(template, source)
    rows = arguments.get(param)
    if not isinstance(rows, torch.Tensor) or rows.ndim != 2:
        return call
    gathered = False
    indices = arguments.get("indices")
    if isinstance(indices, torch.Tensor) and "indices" not in template.inputs:
        picked = indices.to(torch.long).reshape(-1)
        if picked.numel() and (int(picked.min()) < 0 or int(picked.max()) >= rows.shape[0]):
            raise Refused(f"indices name rows outside 0..{rows.shape[0] - 1}", "argument-type")
        for name in SETTINGS:
            value = arguments.get(_param(template, name))
            if isinstance(value, torch.Tensor) and value.numel() > 1:
                if value.reshape(-1).shape[0] != rows.shape[0]:
                    raise Refused(f"{name} has {value.numel()} values for {rows.shape[0]} rows", "argument-type")
                arguments[_param(template, name)] = value.reshape(-1)[picked]
        arguments[param] = rows[picked]
        arguments.pop("indices")
        rows = arguments[param]
        gathered = True
    for name in SETTINGS:
        if name not in template.inputs:
            continue
        key = _param(template, name)
        value = arguments.get(key)
        dtype = getattr(torch, getattr(template.inputs[name], "dtype", None) or KERNEL_DTYPES[name])
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            arguments[key] = torch.full((rows.shape[0],), value, dtype=dtype)
        elif isinstance(value, torch.Tensor):
            flat = value.reshape(-1)
            arguments[key] = (flat.expand(rows.shape[0]) if flat.numel() == 1 else flat).to(dtype).contiguous()
    metadata = dict(call.metadata)
    if gathered:
        metadata[GATHERED] = True
    if "top_k" in template.inputs and "top_p" in template.inputs:
        order = arguments.get("filter_apply_order", DEFAULT_FILTER_ORDER)
        if order in FILTER_ORDERS:
            metadata[ORDER] = FILTER_ORDERS[order]
    return replace(call, arguments=arguments, metadata=metadata)


def provenance(call: Call) -> dict:
    """The receipt's provenance of a call: the recorder's, plus what :func:`as_declared` applied (gathered rows)
    and the cut order the call asked for (``sampler.order``, which the sampling judge reads under order
    ``engine``)."""
    found = call.provenance()
    if call.metadata.get(GATHERED):
        found[GATHERED] = True
    if call.metadata.get(ORDER):
        found["sampler"] = {"order": call.metadata[ORDER]}
    return found


def samples_as_declared(outputs: dict[str, Any], definition: Any) -> dict[str, Any]:
    """A sampling definition's drawn ids in its declared integer dtype (FlashInfer returns ``int32`` or the
    indices' dtype where a template declares ``int64``), when every id is the same after the cast."""
    import torch

    if not (isinstance(definition.judge, dict) and definition.judge.get("name") == "sampling"):
        return outputs
    converted = dict(outputs)
    for name, value in outputs.items():
        spec = definition.outputs.get(name)
        target = getattr(torch, str(getattr(spec, "dtype", "")), None)
        if isinstance(value, torch.Tensor) and isinstance(target, torch.dtype) and value.dtype != target \
                and not value.is_floating_point() and not target.is_floating_point:
            cast = value.to(target)
            if torch.equal(cast.to(value.dtype), value):
                converted[name] = cast
    return converted


def _param(template: Any, name: str | None) -> str:
    descriptor = template.inputs.get(name) if name else None
    return (getattr(descriptor, "param", None) or name) if descriptor is not None else str(name)


__all__ = ["FILTER_ORDERS", "GATHERED", "as_declared", "declared_template", "is_sampler", "provenance", "samples_as_declared"]
