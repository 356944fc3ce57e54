"""The constants vLLM computed upstream of its kernels, checked against the model's config (torch, in the worker).

A kernel given a wrong constant computes the wrong thing correctly: replaying it with the same recorded
constant passes. So the constants the recorded operators take are checked where vLLM built them, once, on
the first sampler call of the engine (the model is loaded then), against what the Hugging Face config says:

- **attention scale** (each ``Attention`` layer's ``impl.scale``): ``query_pre_attn_scalar ** -0.5`` where the
  config has it (Gemma 2/3), else ``head_dim ** -0.5`` (``head_dim``, else ``hidden_size / num_attention_heads``);
- **rotary base** (each plain ``RotaryEmbedding``): its ``base`` against ``rope_theta`` (``rope_parameters`` or the
  config's own field), and its ``cos_sin_cache`` against the cache that base gives (a cache built from another
  base fails even when the attribute is right); scaled rotary kinds (Llama 3, YaRN, NTK...) are named as not
  checked;
- **norm epsilon** (each ``RMSNorm``, Qwen's q/k norms and Gemma's included): ``variance_epsilon`` against
  ``rms_norm_eps``.

:func:`check` returns what was checked per layer and each mismatch as a line naming the layer and the config
field; the hook (:mod:`ikdata.engines.vllm`) makes a mismatch fail the capture (exit 1), by name.
"""

from __future__ import annotations

from typing import Any, Iterable

REL_TOL = 1e-5
CACHE_ATOL = 1e-4


def _text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _rope(text: Any) -> tuple[float | None, str, str]:
    """(theta, rope type, the field it came from)."""
    params = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"]), str(params.get("rope_type", params.get("type", "default"))), \
            "rope_parameters.rope_theta"
    theta = getattr(text, "rope_theta", None)
    kind = str(params.get("rope_type", params.get("type", "default"))) if isinstance(params, dict) else "default"
    return (float(theta) if theta is not None else None), kind, "rope_theta"


def _scale(text: Any) -> tuple[float | None, str]:
    scalar = getattr(text, "query_pre_attn_scalar", None)
    if scalar:
        return float(scalar) ** -0.5, f"query_pre_attn_scalar {scalar}"
    head_dim = getattr(text, "head_dim", None)
    if head_dim:
        return float(head_dim) ** -0.5, f"head_dim {head_dim}"
    hidden, heads = getattr(text, "hidden_size", None), getattr(text, "num_attention_heads", None)
    if hidden and heads:
        return float(hidden // heads) ** -0.5, f"hidden_size {hidden} / num_attention_heads {heads}"
    return None, ""


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b), 1e-30)


def check(model: Any, config: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """(per layer: its name, the constant, its value, what the config implies; mismatches as lines)."""
    import torch

    text = _text_config(config)
    scale, scale_field = _scale(text)
    theta, rope_type, theta_field = _rope(text)
    eps = getattr(text, "rms_norm_eps", None)
    checked: list[dict[str, Any]] = []
    wrong: list[str] = []

    def note(layer: str, constant: str, value: float, expected: float | None, field: str) -> None:
        ok = expected is None or _close(value, expected)
        checked.append({"layer": layer, "constant": constant, "value": value, "expected": expected,
                        "config": field, "ok": ok})
        if not ok:
            wrong.append(f"{layer}: {constant} {value:.6g}, the model's config implies {expected:.6g} ({field})")

    for name, module in _modules(model):
        kind = type(module).__name__
        impl = getattr(module, "impl", None)
        if kind == "Attention" and impl is not None and getattr(impl, "scale", None) is not None and scale:
            note(name, "attention scale", float(impl.scale), scale, scale_field)
        elif hasattr(module, "cos_sin_cache") and hasattr(module, "base") and theta is not None:
            if type(module).__name__ != "RotaryEmbedding" or rope_type not in ("default", "None"):
                checked.append({"layer": name, "constant": "rotary base", "value": float(module.base),
                                "expected": None, "config": f"rope type {rope_type}: not checked", "ok": True})
                continue
            note(name, "rotary base", float(module.base), theta, theta_field)
            rotary_dim = int(module.rotary_dim)
            inv = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
            freqs = torch.outer(torch.arange(module.cos_sin_cache.shape[0], dtype=torch.float), inv)
            expected = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
            cache = module.cos_sin_cache.detach().to("cpu", torch.float32)
            if cache.shape != expected.shape or not torch.allclose(cache, expected, atol=CACHE_ATOL, rtol=0):
                wrong.append(f"{name}: rotary cos/sin cache differs from the one {theta_field} {theta:g} gives "
                             f"(rotary dim {rotary_dim})")
        elif hasattr(module, "variance_epsilon") and eps is not None:
            note(name, "norm epsilon", float(module.variance_epsilon), float(eps), "rms_norm_eps")
    return checked, wrong


def _modules(model: Any) -> Iterable[tuple[str, Any]]:
    named = getattr(model, "named_modules", None)
    return named() if callable(named) else ()


__all__ = ["check"]
