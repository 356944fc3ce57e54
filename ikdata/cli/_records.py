"""Records as a person reads them (``show``, ``lineage``): times in ISO 8601, tensors as dtype and shape,
mappings as ``key=value``, never a Python dict repr. ``--json`` keeps the records as they are."""

from __future__ import annotations

import json
from typing import Any, Mapping

from ikdata.core.times import iso_time  # noqa: F401  (show and lineage format times with it)

TIME_FIELDS = frozenset({"captured_at", "at", "started_at", "finished_at", "created_at"})


def descriptor_text(descriptor: Any, *, dtype: Any = None, shape: Any = None) -> str:
    """An input or output descriptor: ``float32 [1, 8] blob a37d024c51ac`` or ``scalar 0.5``."""
    if not isinstance(descriptor, Mapping):
        return value_text(descriptor)
    if descriptor.get("type") == "scalar":
        return f"scalar {value_text(descriptor.get('value'))}"
    if descriptor.get("type") == "safetensors":
        path = str(descriptor.get("path", ""))
        name = path.rsplit("/", 1)[-1].split(".", 1)[0]
        blob = f"blob {name[:12]}" if len(name) == 64 else f"file {path}"
        key = descriptor.get("tensor_key")
        key = f" [{key}]" if key not in (None, "tensor") else ""
        parts = [str(dtype).removeprefix("torch.") if dtype else None,
                 shape_text(shape) if shape is not None else None, blob + key]
        return " ".join(p for p in parts if p)
    return value_text(descriptor)


def shape_text(shape: Any) -> str:
    """``[1, 8]`` as ``1x8`` (a scalar tensor: ``scalar``)."""
    if isinstance(shape, (list, tuple)):
        return "x".join(map(str, shape)) if shape else "scalar"
    return str(shape)


def value_text(value: Any) -> str:
    """A value of a record on one line: mappings as ``k=v``, lists comma-separated, others as JSON would."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={value_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def fact_lines(record: Mapping[str, Any], *, skip: tuple[str, ...] = ()) -> list[str]:
    """``key: value`` lines of a flat record, times as ISO 8601, in the record's own order."""
    lines = []
    for key, value in record.items():
        if key in skip:
            continue
        if key in TIME_FIELDS:
            shown = iso_time(value)
        elif key == "expected_output" and isinstance(value, Mapping):
            shown = "; ".join(f"{name}: {descriptor_text(d)}" for name, d in value.items()) or "none"
        else:
            shown = value_text(value)
        lines.append(f"{key}: {shown}")
    return lines
