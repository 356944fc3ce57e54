"""Which definition a dispatcher op call is a workload of: the built-in aten mappers and declared bindings.

An op call (``aten::addmm`` with its arguments and result) becomes an :class:`OpCall`, the
definition (or template, with its const axes filled) plus the tensors named as the definition
names them, or a reason it cannot (:data:`NO_DEFINITION`, :data:`DTYPE`). Two sources:

* built-in mappers for aten ops, onto the shipped templates (GEMM, batched GEMM, attention, layer norm);
* bindings declared in a definition's ``capture`` object, for an engine's own op, with no adapter code::

    "capture": {"op": "myns::rms_norm", "inputs": {"X": "x", "W": "weight", "eps": "eps"},
                "outputs": {"Y": "return"}}

  each source is an argument of the op's schema (by name), ``return`` (the single result) or
  ``return.N`` (the Nth result). An argument the op writes (in place or ``out=``) may be named by an
  input and an output: the input is read before the call, the output after it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ikdata.core.definitions import Definition
from ikdata.core.errors import DefinitionError

NO_DEFINITION = "no definition"
DTYPE = "dtype"


@dataclass(frozen=True)
class OpCall:
    """One op call as a workload: the definition (a template with ``fills``, or an exact name) and its tensors."""

    definition: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    fills: dict[str, int] | None = None
    variant: str | None = None
    weights: tuple[str, ...] = ()


Mapper = Callable[[tuple, dict, Any], "OpCall | str"]


def _short(dtype: Any) -> str | None:
    import torch

    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}.get(dtype)


def weight_as_seen(view: Any) -> Any:
    """``view.t()``, as the op read it; the parameter itself when ``view`` is its transposed view (so the
    weight cache recognises it: same object, version and storage)."""
    w = view.t()
    base = getattr(view, "_base", None)
    if (base is not None and base.shape == w.shape and base.stride() == w.stride() and base.dtype == w.dtype
            and base.data_ptr() == w.data_ptr()):
        return base
    return w


def _gemm(a: Any, mat2: Any, out: Any, bias: Any = None) -> OpCall | str:
    s = _short(a.dtype)
    if s is None or mat2.dtype != a.dtype or out.dtype != a.dtype:
        return DTYPE
    if a.dim() != 2 or mat2.dim() != 2:
        return NO_DEFINITION
    k, n = mat2.shape
    w = weight_as_seen(mat2)
    inputs = {"A": a, "W": w}
    template = f"dense_gemm_{s}_nt"
    # read through a transposed view, as F.linear and nn.Linear read a weight: kept while unchanged
    weights: tuple[str, ...] = ("W",) if w is getattr(mat2, "_base", None) or _is_parameter(w) else ()
    if bias is not None:
        if bias.dtype != a.dtype:
            return DTYPE
        if bias.dim() != 1 or bias.shape[0] != n:
            return NO_DEFINITION  # a full [M, N] addend: not a bias
        inputs["bias"] = bias
        template = f"dense_gemm_bias_{s}_nt"
        weights += ("bias",) if _is_parameter(bias) else ()
    return OpCall(template, inputs, {"C": out}, {"N": n, "K": k}, backward_marked(f"m{a.shape[0]}"), weights)


def backward_marked(variant: str) -> str:
    """``variant``, marked ``.backward`` when autograd's backward pass runs the call (a gradient GEMM): its
    receipt says so, and selection keeps it apart from a forward call of the same shape."""
    import torch

    current = getattr(torch._C, "_current_autograd_node", None)
    return f"{variant}.backward" if current is not None and current() is not None else variant


def _is_parameter(value: Any) -> bool:
    """A module's parameter (reused across calls: the weight cache may keep its copy), not an activation."""
    import torch

    return isinstance(value, torch.nn.Parameter)


def _scalar_is(value: Any, expected: float) -> bool:
    return value is None or (isinstance(value, (int, float)) and float(value) == expected)


def on_mm(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    return _gemm(args[0], args[1], out)


def on_addmm(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    bias, a, mat2 = args[:3]
    if not (_scalar_is(kwargs.get("beta"), 1.0) and _scalar_is(kwargs.get("alpha"), 1.0)):
        return NO_DEFINITION
    return _gemm(a, mat2, out, bias)


def _bmm(a: Any, b: Any, out: Any) -> OpCall | str:
    s = _short(a.dtype)
    if s is None or b.dtype != a.dtype or out.dtype != a.dtype:
        return DTYPE
    batch, m, k = a.shape
    n = b.shape[2]
    return OpCall(f"bmm_{s}", {"A": a, "B": b}, {"C": out}, {"N": n, "K": k}, backward_marked(f"b{batch}_m{m}"))


def on_bmm(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    return _bmm(args[0], args[1], out)


def on_baddbmm(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    beta = kwargs.get("beta", 1.0)
    if not (_scalar_is(beta, 0.0) and _scalar_is(kwargs.get("alpha"), 1.0)):
        return NO_DEFINITION  # beta * input + alpha * A @ B: no definition describes the addend yet
    return _bmm(args[1], args[2], out)


def on_sdpa_cpu(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    """``aten::_scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, *, attn_mask, scale)``."""
    q, k, v = args[:3]
    dropout = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
    causal = bool(args[4] if len(args) > 4 else kwargs.get("is_causal", False))
    scale = kwargs.get("scale")
    o = out[0] if isinstance(out, (tuple, list)) else out
    s = _short(q.dtype)
    if s is None or k.dtype != q.dtype or v.dtype != q.dtype or o.dtype != q.dtype:
        return DTYPE
    if (dropout or kwargs.get("attn_mask") is not None or q.dim() != 4 or k.shape != v.shape
            or q.shape[1] % k.shape[1] or v.shape[-1] != q.shape[-1]):
        return NO_DEFINITION
    b, h, lq, d = q.shape
    inputs = {"Q": q, "K": k, "V": v, "scale": float(scale) if scale is not None else 1.0 / math.sqrt(d)}
    return OpCall(f"sdpa_{'causal_' if causal else ''}{s}", inputs, {"O": o}, {"H": h, "HKV": k.shape[1], "D": d},
                  f"b{b}_q{lq}_k{k.shape[2]}")


def on_native_layer_norm(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    """``aten::native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd)``."""
    x, shape, weight, bias, eps = args[:5]
    y = out[0]
    s = _short(x.dtype)
    if s is None or (weight is not None and weight.dtype != x.dtype) or (bias is not None and bias.dtype != x.dtype):
        return DTYPE
    if len(tuple(shape)) != 1 or weight is None or bias is None:
        return NO_DEFINITION
    hidden = int(shape[0])
    rows = x.reshape(-1, hidden)
    return OpCall(f"layernorm_{s}", {"X": rows, "W": weight, "B": bias, "eps": float(eps)},
                  {"Y": y.reshape(-1, hidden)}, {"H": hidden}, f"m{rows.shape[0]}", ("W", "B"))


def _activation(name: str) -> Mapper:
    def on_activation(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
        x = args[0]
        s = _short(x.dtype)
        if s is None or out.dtype != x.dtype:
            return DTYPE
        stem = name
        if name == "gelu":
            approximate = args[1] if len(args) > 1 else kwargs.get("approximate", "none")
            stem = {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate)
            if stem is None:
                return NO_DEFINITION
        if x.dim() == 0:
            return NO_DEFINITION
        hidden = x.shape[-1]
        rows = x.reshape(-1, hidden)
        return OpCall(f"{stem}_{s}", {"X": rows}, {"Y": out.reshape(-1, hidden)}, {"H": hidden}, f"m{rows.shape[0]}")

    return on_activation


def on_embedding(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    """``aten::embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)``: a lookup, whatever the flags
    (they change only the backward pass)."""
    import torch

    table, ids = args[0], args[1]
    s = _short(table.dtype)
    if s is None or ids.dtype != torch.int64 or out.dtype != table.dtype:
        return DTYPE
    if table.dim() != 2:
        return NO_DEFINITION
    v, h = table.shape
    flat = ids.reshape(-1)
    return OpCall(f"embedding_{s}", {"IDS": flat, "TABLE": table}, {"Y": out.reshape(-1, h)}, {"V": v, "H": h},
                  f"m{flat.shape[0]}", ("TABLE",))


def on_convolution(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    """``aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)``:
    2-D, not transposed."""
    x, weight, bias, stride, padding, dilation, transposed, _, groups = args[:9]
    # one value for both sides, as ATen expands it (``padding="valid"`` reaches here as ``[0]``)
    stride, padding, dilation = (list(p) * 2 if len(p) == 1 else p for p in (stride, padding, dilation))
    s = _short(x.dtype)
    if s is None or weight.dtype != x.dtype or out.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        return DTYPE
    if transposed or x.dim() != 4 or weight.dim() != 4 or len(stride) != 2 or len(padding) != 2 or len(dilation) != 2:
        return NO_DEFINITION
    cout, cing, kh, kw = weight.shape
    inputs: dict[str, Any] = {"X": x, "WT": weight}
    stem = "conv2d"
    weights: tuple[str, ...] = ("WT",)
    if bias is not None:
        inputs["BIAS"] = bias
        stem, weights = "conv2d_bias", ("WT", "BIAS")
    inputs.update(stride_h=int(stride[0]), stride_w=int(stride[1]), pad_h=int(padding[0]), pad_w=int(padding[1]),
                  dilation_h=int(dilation[0]), dilation_w=int(dilation[1]), groups=int(groups))
    n, _, h, w = x.shape
    variant = (f"n{n}_{h}x{w}_s{stride[0]}x{stride[1]}_p{padding[0]}x{padding[1]}_d{dilation[0]}x{dilation[1]}"
               f"_g{groups}")
    return OpCall(f"{stem}_{s}", inputs, {"Y": out}, {"COUT": cout, "CING": cing, "KH": kh, "KW": kw}, variant, weights)


def on_conv2d(args: tuple, kwargs: dict, out: Any) -> OpCall | str:
    """``aten::conv2d(input, weight, bias, stride, padding, dilation, groups)``, padding a list or a string
    (``conv2d.padding``: ``"valid"``, or ``"same"`` when it pads both sides alike). Under ``inference_mode`` the
    call reaches the kernel as itself, never as ``aten::convolution``, so it is mapped here as that would be."""
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    defaults = (None, None, None, [1], [0], [1], 1)
    x, weight, bias, stride, padding, dilation, groups = (
        args[i] if i < len(args) else kwargs.get(name, default) for i, (name, default) in enumerate(zip(names, defaults)))
    if not hasattr(x, "dim") or not hasattr(weight, "dim") or x.dim() != 4 or weight.dim() != 4:
        return NO_DEFINITION
    dilation = list(dilation) * 2 if len(dilation) == 1 else list(dilation)
    if padding == "valid":
        padding = [0, 0]
    elif padding == "same":
        totals = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
        if any(t % 2 for t in totals):
            return NO_DEFINITION  # ATen pads one side more first: no symmetric padding describes it
        padding = [t // 2 for t in totals]
    elif isinstance(padding, str):
        return NO_DEFINITION
    return on_convolution((x, weight, bias, list(stride), list(padding), dilation, False, [0, 0], groups), {}, out)


@dataclass(frozen=True)
class BuiltIn:
    """A built-in mapper: the aten op and the templates it can produce (``--only`` may leave none)."""

    op: str
    mapper: Mapper
    templates: tuple[str, ...]
    overloads: tuple[str, ...] = ("default",)  # the op's overloads it maps


def _each_dtype(*stems: str) -> tuple[str, ...]:
    return tuple(f"{stem}_{s}{tail}" for stem in stems for s, tail in
                 (("f32", ""), ("bf16", ""), ("f16", "")))


BUILT_IN = (
    BuiltIn("aten::mm", on_mm, tuple(f"dense_gemm_{s}_nt" for s in ("f32", "bf16", "f16"))),
    BuiltIn("aten::addmm", on_addmm, tuple(f"dense_gemm_bias_{s}_nt" for s in ("f32", "bf16", "f16"))),
    BuiltIn("aten::bmm", on_bmm, _each_dtype("bmm")),
    BuiltIn("aten::baddbmm", on_baddbmm, _each_dtype("bmm")),
    BuiltIn("aten::_scaled_dot_product_flash_attention_for_cpu", on_sdpa_cpu, _each_dtype("sdpa", "sdpa_causal")),
    BuiltIn("aten::native_layer_norm", on_native_layer_norm, _each_dtype("layernorm")),
    BuiltIn("aten::embedding", on_embedding, _each_dtype("embedding")),
    BuiltIn("aten::convolution", on_convolution, _each_dtype("conv2d", "conv2d_bias")),
    BuiltIn("aten::conv2d", on_conv2d, _each_dtype("conv2d", "conv2d_bias"), ("default", "padding")),
    BuiltIn("aten::silu", _activation("silu"), _each_dtype("silu")),
    BuiltIn("aten::gelu", _activation("gelu"), _each_dtype("gelu", "gelu_tanh")),
    BuiltIn("aten::relu", _activation("relu"), _each_dtype("relu")),
)


# The templates each built-in function patch (ikdata.capture.adapters) can produce: a patch whose templates
# --only leaves none of is not installed, so its calls cost nothing.
PATCH_TEMPLATES = {
    "torch.nn.functional.linear": tuple(f"{stem}_{s}_nt" for stem in ("dense_gemm", "dense_gemm_bias")
                                        for s in ("f32", "bf16", "f16")),
    "torch.mm": tuple(f"dense_gemm_{s}_nt" for s in ("f32", "bf16", "f16")),
    "torch.matmul": tuple(f"dense_gemm_{s}_nt" for s in ("f32", "bf16", "f16")),
    "torch.nn.functional.scaled_dot_product_attention": _each_dtype("sdpa", "sdpa_causal", "sdpa_masked"),
    "torch.nn.functional.rms_norm": _each_dtype("rmsnorm"),
    "torch.nn.functional.layer_norm": _each_dtype("layernorm"),
    "RMSNorm modules": _each_dtype("rmsnorm"),
}


# -- declared bindings --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """A definition's ``capture`` object: the op it binds and where each of its tensors comes from."""

    definition: Definition
    op: str  # "ns::name" or "ns::name.overload"
    inputs: dict[str, str]
    outputs: dict[str, str]
    read_before: tuple[str, ...] = field(default=())  # inputs the op writes: read before the call

    @property
    def packet(self) -> str:
        return self.op.split(".", 1)[0]

    @property
    def overload(self) -> str:
        return self.op.split(".", 1)[1] if "." in self.op else "default"


def bindings_of(definitions: Iterable[Definition]) -> tuple[list[Binding], list[str]]:
    """The bindings declared by ``definitions`` (their ``capture`` object), and a problem per malformed one."""
    found, problems = [], []
    for d in definitions:
        spec = d.record.get("capture")
        if spec is None:
            continue
        where = f"{d.source or d.name}: capture"
        if not isinstance(spec, Mapping) or not isinstance(spec.get("op"), str) or "::" not in spec["op"]:
            problems.append(f"{where}.op must name the op as 'namespace::name', got {spec!r}")
            continue
        inputs, outputs = dict(spec.get("inputs") or {}), dict(spec.get("outputs") or {})
        missing = [n for n in d.inputs if n not in inputs] + [n for n in d.outputs if n not in outputs]
        extra = [n for n in inputs if n not in d.inputs] + [n for n in outputs if n not in d.outputs]
        if missing or extra:
            problems.append(f"{where}: every input and output of {d.name} must be mapped once "
                            f"(missing {missing}, not in the definition {extra})")
            continue
        found.append(Binding(d, spec["op"], inputs, outputs))
    return found, problems


def schema_names(func: Any) -> list[str]:
    return [a.name for a in func._schema.arguments]


def written_arguments(func: Any) -> set[str]:
    """Arguments the op writes (in place, ``out=``): their values must be read before the call."""
    return {a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write}


def argument(func: Any, names: list[str], args: tuple, kwargs: dict, source: str) -> Any:
    if source in kwargs:
        return kwargs[source]
    try:
        index = names.index(source)
    except ValueError:
        raise DefinitionError(f"the op {func._schema.name} has no argument {source!r}; "
                              f"its arguments are {names}") from None
    if index < len(args):
        return args[index]
    default = func._schema.arguments[index].default_value
    return default


def result(out: Any, source: str) -> Any:
    if source == "return":
        return out[0] if isinstance(out, (tuple, list)) and len(out) == 1 else out
    index = int(source.split(".", 1)[1])
    return out[index]


def bind_call(binding: Binding, func: Any, names: list[str], args: tuple, kwargs: dict, out: Any,
              before: Mapping[str, Any]) -> OpCall | str:
    """The tensors of one call as ``binding`` names them (``before``: written arguments as read before the call)."""
    def value(source: str, is_input: bool) -> Any:
        if source == "return" or source.startswith("return."):
            return result(out, source)
        if is_input and source in before:
            return before[source]
        return argument(func, names, args, kwargs, source)

    inputs = {n: value(s, True) for n, s in binding.inputs.items()}
    outputs = {n: value(s, False) for n, s in binding.outputs.items()}
    d = binding.definition
    for group, specs in ((inputs, d.inputs), (outputs, d.outputs)):
        for name, spec in specs.items():
            got = group[name]
            if spec.shape is None or not hasattr(got, "dtype"):
                continue
            if str(got.dtype) != spec.torch_dtype:
                return DTYPE
    try:
        shapes = {n: tuple(v.shape) if hasattr(v, "shape") else None for n, v in {**inputs, **outputs}.items()}
        d.bind(shapes, tensors=list(shapes))
    except DefinitionError:
        return NO_DEFINITION
    return OpCall(d.name, inputs, outputs)


__all__ = ["BUILT_IN", "PATCH_TEMPLATES", "Binding", "BuiltIn", "DTYPE", "NO_DEFINITION", "OpCall", "bind_call", "bindings_of",
           "schema_names", "weight_as_seen", "written_arguments"]
