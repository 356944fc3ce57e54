"""Built-in adapters: map torch calls onto the shipped templates (GEMM, attention, normalisation).

Each adapter reads the call's arguments, returns quietly for forms its template
does not describe (another dtype, a float mask, dropout, a per-head mask), and
otherwise hands the tensors to :meth:`Capturer.record` with the template's
const axes filled from the shapes it sees.

    F.linear (no bias)         -> dense_gemm_{dt}_nt_n{N}_k{K}
    F.linear (bias)            -> dense_gemm_bias_{dt}_nt_n{N}_k{K}
    torch.mm, 2-D torch.matmul -> dense_gemm_{dt}_nt_n{N}_k{K}   (W = B^T)
    F.scaled_dot_product_attention -> sdpa[_causal|_masked]_{dt}_h{H}_kv{HKV}_d{D}
    F.rms_norm, *RMSNorm modules   -> rmsnorm_{dt}_h{H}
    F.layer_norm               -> layernorm_{dt}_h{H}
"""

from __future__ import annotations

import math
from typing import Any

# Module classes known to compute weight * x / sqrt(mean(x^2) + eps), nothing else
# (Gemma's (1 + weight) and engines' fused residual-add variants are NOT this).
RMSNORM_MODULES = frozenset({"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen3MoeRMSNorm",
                             "Phi3RMSNorm", "T5LayerNorm", "MixtralRMSNorm", "OlmoRMSNorm"})


def _short(dtype: Any) -> str | None:
    import torch

    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}.get(dtype)


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _gemm(cap: Any, a: Any, w: Any, out: Any, bias: Any, operation: str, weights: tuple[str, ...]) -> None:
    s = _short(a.dtype)
    if s is None or w.dtype != a.dtype or w.dim() != 2 or a.dim() < 1 or out.dtype != a.dtype:
        return
    n, k = w.shape
    if a.shape[-1] != k:
        return
    rows = a.reshape(-1, k)
    inputs = {"A": rows, "W": w}
    template = f"dense_gemm_{s}_nt"
    if bias is not None:
        if bias.dtype != a.dtype or bias.dim() != 1:
            return
        inputs["bias"] = bias
        template = f"dense_gemm_bias_{s}_nt"
    cap.record(template, inputs, {"C": out.reshape(-1, n)}, operation=operation, variant=f"m{rows.shape[0]}",
               weights=weights, fills={"N": n, "K": k})


def on_linear(cap: Any, args: tuple, kwargs: dict, out: Any) -> None:
    bias = _arg(args, kwargs, 2, "bias")
    _gemm(cap, _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "weight"), out, bias,
          "torch.nn.functional.linear", ("W", "bias") if bias is not None else ("W",))


def on_mm(cap: Any, args: tuple, kwargs: dict, out: Any) -> None:
    a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "mat2")
    if a is not None and b is not None and a.dim() == 2 and b.dim() == 2:
        _gemm(cap, a, b.t(), out, None, "torch.mm", ())


def on_matmul(cap: Any, args: tuple, kwargs: dict, out: Any) -> None:
    a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "other")
    if a is not None and b is not None and getattr(a, "dim", None) and a.dim() == 2 and b.dim() == 2:
        _gemm(cap, a, b.t(), out, None, "torch.matmul", ())


def _as_autocast_ran(out: Any, *tensors: Any) -> tuple[Any, ...]:
    """The tensors in the dtype the kernel read them: under ``torch.autocast`` the call casts its float inputs
    to the autocast dtype before the kernel runs (q, k, v fp32 in, a bf16 kernel, bf16 out)."""
    import torch

    first = tensors[0]
    if not hasattr(out, "dtype") or not hasattr(first, "dtype") or first.dtype == out.dtype:
        return tensors
    device = first.device.type
    try:
        casts = torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == out.dtype
    except (AttributeError, RuntimeError, TypeError):  # a torch without per-device autocast queries
        casts = False
    return tuple(t.to(out.dtype) if casts and hasattr(t, "dtype") else t for t in tensors)


def on_sdpa(cap: Any, args: tuple, kwargs: dict, out: Any) -> None:
    q, k, v = _arg(args, kwargs, 0, "query"), _arg(args, kwargs, 1, "key"), _arg(args, kwargs, 2, "value")
    q, k, v = _as_autocast_ran(out, q, k, v)
    mask = _arg(args, kwargs, 3, "attn_mask")
    dropout = _arg(args, kwargs, 4, "dropout_p", 0.0)
    causal = bool(_arg(args, kwargs, 5, "is_causal", False))
    scale = _arg(args, kwargs, 6, "scale")
    s = _short(q.dtype)
    if (s is None or dropout or q.dim() != 4 or k.dim() != 4 or v.shape != k.shape or k.dtype != q.dtype
            or v.dtype != q.dtype or v.shape[-1] != q.shape[-1] or q.shape[1] % k.shape[1]
            or not hasattr(out, "shape") or out.dtype != q.dtype):
        return
    b, h, lq, d = q.shape
    inputs = {"Q": q, "K": k, "V": v}
    kind = "causal_" if causal else ""
    if mask is not None:
        import torch

        if causal or mask.dtype != torch.bool or mask.dim() > 4:
            return
        while mask.dim() < 4:
            mask = mask.unsqueeze(0)
        if mask.shape[1] != 1:
            return
        try:
            mask = mask.expand(b, 1, lq, k.shape[2])
        except RuntimeError:
            return
        inputs["mask"] = mask
        kind = "masked_"
    inputs["scale"] = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    cap.record(f"sdpa_{kind}{s}", inputs, {"O": out}, operation="torch.nn.functional.scaled_dot_product_attention",
               variant=f"b{b}_q{lq}_k{k.shape[2]}", fills={"H": h, "HKV": k.shape[1], "D": d})


def _norm(cap: Any, template: str, x: Any, weight: Any, bias: Any, eps: float, out: Any, operation: str) -> None:
    s = _short(x.dtype)
    if s is None or weight is None or weight.dim() != 1 or weight.dtype != x.dtype or out.dtype != x.dtype:
        return
    hidden = weight.shape[0]
    if x.shape[-1] != hidden:
        return
    inputs = {"X": x.reshape(-1, hidden), "W": weight}
    weights = ("W",)
    if template == "layernorm":
        if bias is None or bias.dtype != x.dtype:
            return
        inputs["B"] = bias
        weights = ("W", "B")
    inputs["eps"] = float(eps)
    cap.record(f"{template}_{s}", inputs, {"Y": out.reshape(-1, hidden)}, operation=operation,
               variant=f"m{inputs['X'].shape[0]}", weights=weights, fills={"H": hidden})


def on_rms_norm(cap: Any, args: tuple, kwargs: dict, out: Any) -> None:
    import torch

    x, shape = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "normalized_shape")
    eps = _arg(args, kwargs, 3, "eps")
    if len(tuple(shape)) != 1:
        return
    _norm(cap, "rmsnorm", x, _arg(args, kwargs, 2, "weight"), None,
          torch.finfo(x.dtype).eps if eps is None else eps, out, "torch.nn.functional.rms_norm")


def on_layer_norm(cap: Any, args: tuple, kwargs: dict, out: Any) -> None:
    x, shape = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "normalized_shape")
    if len(tuple(shape)) != 1:
        return
    _norm(cap, "layernorm", x, _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias"),
          _arg(args, kwargs, 4, "eps", 1e-5), out, "torch.nn.functional.layer_norm")


def on_rmsnorm_module(cap: Any, module: Any, args: tuple, kwargs: dict, out: Any) -> None:
    x = args[0] if args else kwargs.get("hidden_states")
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if x is None or eps is None or not hasattr(out, "dtype"):
        return
    _norm(cap, "rmsnorm", x, getattr(module, "weight", None), None, eps, out, f"{type(module).__name__}.forward")


def install(cap: Any) -> None:
    """Install the built-in adapters on a Capturer: the torch functions above, then each declared capture
    source's hooks (:func:`ikdata.core.features.sources`: HF's sampler, Diffusers pipelines, FlashInfer, vLLM); each
    waits for its library's own modules, so a source that never loads costs nothing."""
    import importlib

    import torch
    import torch.nn.functional as F

    cap.patch(F, "linear", on_linear, label="torch.nn.functional.linear")
    cap.patch(torch, "mm", on_mm, label="torch.mm")
    cap.patch(torch, "matmul", on_matmul, label="torch.matmul")
    cap.patch(F, "scaled_dot_product_attention", on_sdpa, label="torch.nn.functional.scaled_dot_product_attention")
    if hasattr(F, "rms_norm"):
        cap.patch(F, "rms_norm", on_rms_norm, label="torch.nn.functional.rms_norm")
    cap.patch(F, "layer_norm", on_layer_norm, label="torch.nn.functional.layer_norm")
    cap.on_module(lambda cls: cls.__name__ in RMSNORM_MODULES, on_rmsnorm_module, label="RMSNorm modules")
    from ikdata.core.features import sources  # each declared source's hooks: HF's sampler, Diffusers, FlashInfer, vLLM

    for source in sources():
        if source.hooks:
            importlib.import_module(source.hooks).install(cap)

__all__ = ["install", "RMSNORM_MODULES", "on_linear", "on_mm", "on_matmul", "on_sdpa", "on_rms_norm",
           "on_layer_norm", "on_rmsnorm_module"]
