"""Trust by source after import: a definition converted from an installed FlashInfer template stays trusted.

A dataset's copy is tagged ``ikdata:flashinfer=<module:attr>``; it is trusted exactly when the
installed template renders (for the same const axes, dtypes and absent optional inputs) and
converts to the same digest. Rendering uses meta tensors: nothing is computed, no reference runs.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Mapping

from ikdata.core.definitions import SHIPPED, Definition
from ikdata.flashinfer.convert import SOURCE_TAG, Refused, absent_inputs, convert


def trusted_flashinfer(definitions: Mapping[str, Definition]) -> dict[str, Definition]:
    """The tagged definitions that are exact conversions of installed FlashInfer templates."""
    tagged = {n: d for n, d in definitions.items()
              if any(str(t).startswith(SOURCE_TAG + "=") for t in d.record.get("tags") or ())}
    if not tagged:
        return {}
    from ikdata.flashinfer import loader

    if not loader.available():
        return {}
    by_key = {ref.key: ref for ref in loader.templates()}
    trusted = {}
    for name, definition in tagged.items():
        with contextlib.suppress(Refused, Exception):
            rendered = _render(definition, by_key)
            if rendered is not None and rendered.digest == definition.digest:
                trusted[name] = rendered
    return trusted


def _render(definition: Definition, by_key: Mapping[str, Any]) -> Definition | None:
    """The installed template's conversion for the definition's const axes, dtypes and absent inputs; a const
    axis only a scalar argument sets (``top_k_ragged_transform``'s ``k``) is rendered from that scalar."""
    try:
        return _rendered(definition, by_key, with_scalars=False)
    except Refused as exc:
        if exc.code != "axis-value":
            raise
        return _rendered(definition, by_key, with_scalars=True)


def _rendered(definition: Definition, by_key: Mapping[str, Any], *, with_scalars: bool) -> Definition | None:
    import torch

    from ikdata.flashinfer.inline import inlined, input_params, reference_name

    tags = definition.record.get("tags") or []
    key = next(t.split("=", 1)[1] for t in tags if str(t).startswith(SOURCE_TAG + "="))
    fi_api = next((t[len("fi_api:"):] for t in tags if str(t).startswith("fi_api:")), "")
    ref = by_key.get(key)
    if ref is None:
        return None
    optional = [n for n, d in ref.template.inputs.items() if getattr(d, "optional", False)]
    absent = absent_inputs(definition.name, optional)
    if absent is None:
        return None
    sizes = {**{a: 1 for a in definition.var_axes}, **definition.const_axes}
    kwargs: dict[str, Any] = {}
    for name, descriptor in ref.template.inputs.items():
        spec = definition.inputs.get(name)
        param = getattr(descriptor, "param", None) or name
        if type(descriptor).__name__ == "Scalar":  # a scalar that sets a const axis (top_k's k): its value
            for axis in (name, param):
                if with_scalars and axis in definition.const_axes:
                    kwargs[param] = definition.const_axes[axis]
            continue
        if spec is None or spec.shape is None or type(descriptor).__name__ != "Tensor":
            continue
        param = descriptor.param or name
        tensor = torch.empty([sizes[a] for a in spec.shape], dtype=getattr(torch, spec.dtype), device="meta")
        if descriptor.tuple_idx is not None:
            held = list(kwargs.get(param) or [None] * (descriptor.tuple_idx + 1))
            held += [None] * (descriptor.tuple_idx + 1 - len(held))
            held[descriptor.tuple_idx] = tensor
            kwargs[param] = tuple(held)
        else:
            kwargs[param] = tensor
    saved = os.environ.pop("FLASHINFER_TRACE_DUMP_DIR", None)
    try:
        record = ref.template.build_fi_trace_fn(fi_api)(**kwargs)
    finally:
        if saved is not None:
            os.environ["FLASHINFER_TRACE_DUMP_DIR"] = saved
    converted = convert(inlined(record, ref.template), absent=absent, template_key=key,
                        params=input_params(ref.template), entry=reference_name(ref.template))
    return Definition.from_dict(converted.record, origin=SHIPPED, source=f"FlashInfer template {key}")


__all__ = ["trusted_flashinfer"]
