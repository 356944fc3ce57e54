"""The default tolerance table and judge bounds, and how a definition overrides them.

torch-free, so :mod:`ikdata.core.verdicts` (used by import) can recheck a report
without torch. Floats pass elementwise when ``|a - e| <= atol + rtol * |e|``.

Why these numbers:

- ``bfloat16`` rtol 0.016 / atol 0.005 and ``float32`` rtol 1e-4 / atol 2e-5 are the
  seed capture script's table, used on real SGLang captures. The bf16 rtol is about two
  units in the last place (eps = 2**-7 = 0.0078): an engine and a reference that round
  once each, at different points, may land two ulps apart.
- ``float16`` follows the same rule, two ulps of its eps (2**-10): rtol 0.002; atol keeps
  the seed's bf16 atol/rtol ratio (0.3125): 6.25e-4.
- ``float8_e4m3fn`` (eps 2**-3): two ulps, rtol 0.25; atol 2**-6 = 0.015625, its smallest
  normal number: below it values are subnormal with a fixed absolute step (2**-9), so
  closeness there is absolute.
- ``float8_e5m2`` (eps 2**-2): rtol 0.5; atol 2**-14 (its smallest normal).
- ``float64``: torch.testing's defaults (rtol 1e-7, atol 1e-7).
- Integers and bools are exact; so is ``float8_e8m0fnu`` (FlashInfer's MX block scales): a power of two,
  so two values agree or differ by a factor of two at least.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

EXACT = "exact"

DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "float64": {"rtol": 1e-7, "atol": 1e-7},
    "float32": {"rtol": 1e-4, "atol": 2e-5},
    "float16": {"rtol": 2e-3, "atol": 6.25e-4},
    "bfloat16": {"rtol": 0.016, "atol": 0.005},
    "float8_e4m3fn": {"rtol": 0.25, "atol": 0.015625},
    "float8_e5m2": {"rtol": 0.5, "atol": 2.0 ** -14},
}

EXACT_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e8m0fnu")

# Named metric judges: their metrics and default bounds (a definition may tighten or
# loosen them; verify compares against the definition it is given, else these).
JUDGE_BOUNDS: dict[str, dict[str, float]] = {
    "gdn_chunk_state": {"relative_rms": 0.01, "relative_max": 0.015, "max_head_relative_rms": 0.02},
    "relative_error": {"relative_rms": 0.01, "relative_max": 0.02},
}
JUDGE_REASONS: dict[str, str] = {
    "gdn_chunk_state": ("The engine's chunk algorithm rounds intermediate matrix operands to BF16 although "
                        "its final state is stored in FP32 (seed 002)."),
    "relative_error": "Whole-tensor relative RMS and relative max error, for outputs with a known bias.",
}


# The seed capture script's judge selection (seeds/002): a definition whose name starts with this
# prefix has its float32 outputs (the chunk state) judged by the GDN chunk-state metrics, whatever
# the definition says; every other output by the elementwise table. Applied to that layout only.
SEED_GDN_PREFIX = "gated_delta_rule_prefill_"
SEED_GDN_JUDGE = "gdn_chunk_state"


def dtype_name(dtype: Any) -> str:
    """``"bfloat16"`` for ``torch.bfloat16``, ``"torch.bfloat16"`` or ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def is_exact(dtype: str) -> bool:
    return dtype_name(dtype) in EXACT_DTYPES


def table() -> dict[str, Any]:
    """The default table as the report records it (``"integer": "exact"`` as the seed wrote it)."""
    found: dict[str, Any] = {k: dict(v) for k, v in DEFAULT_TOLERANCES.items()}
    found["integer"] = EXACT
    found["bool"] = EXACT
    for name, bounds in JUDGE_BOUNDS.items():
        found[name] = {**bounds, "reason": JUDGE_REASONS[name]}
    return found


@dataclass(frozen=True)
class Tolerance:
    """The elementwise rule that judges one output."""

    dtype: str
    rtol: float
    atol: float
    matched_ratio: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "rtol": self.rtol, "atol": self.atol, "matched_ratio": self.matched_ratio}


@dataclass(frozen=True)
class JudgeSpec:
    """A metric judge by name and the bounds it applies to one output."""

    dtype: str
    name: str
    bounds: Mapping[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "judge": self.name, "bounds": dict(self.bounds)}


def tolerance_for(dtype: str, override: Mapping[str, Any] | None = None) -> Tolerance | None:
    """The tolerance of one dtype: the definition's override if it names the dtype, else the default.

    Returns None for a float dtype with neither (the caller reports it).
    """
    dtype = dtype_name(dtype)
    override = override or {}
    ratio = float(override.get("matched_ratio", 1.0))
    if is_exact(dtype):
        return Tolerance(dtype, 0.0, 0.0, 1.0)
    chosen = override.get(dtype) or DEFAULT_TOLERANCES.get(dtype)
    if chosen is None:
        return None
    return Tolerance(dtype, float(chosen["rtol"]), float(chosen["atol"]), ratio)


def judge_for(dtype: str, output: str, judge: Mapping[str, Any] | None) -> JudgeSpec | None:
    """The metric judge a definition names for ``output``, or None when the tolerance judges it.

    A judge applies to the outputs it lists under ``"outputs"``, or to every
    floating output when it lists none. Unknown judge names are returned too;
    the runner reports them as an error.
    """
    if not judge or is_exact(dtype):
        return None
    outputs = judge.get("outputs")
    if outputs is not None and output not in outputs:
        return None
    name = judge["name"]
    # A plugin's default bounds are merged in by ikdata.replay.judges.select_rule (which loads it).
    bounds = {**JUDGE_BOUNDS.get(name, {}), **{k: float(v) for k, v in (judge.get("bounds") or {}).items()}}
    return JudgeSpec(dtype_name(dtype), name, bounds)


def seed_judge_for(definition_name: str, dtype: str) -> JudgeSpec | None:
    """The judge the seed capture script chose by name (see :data:`SEED_GDN_PREFIX`), or None."""
    if definition_name.startswith(SEED_GDN_PREFIX) and dtype_name(dtype) == "float32":
        return JudgeSpec("float32", SEED_GDN_JUDGE, dict(JUDGE_BOUNDS[SEED_GDN_JUDGE]))
    return None


__all__ = ["DEFAULT_TOLERANCES", "EXACT", "EXACT_DTYPES", "JUDGE_BOUNDS", "JudgeSpec", "SEED_GDN_JUDGE", "SEED_GDN_PREFIX",
           "Tolerance", "dtype_name", "is_exact", "judge_for", "seed_judge_for", "table", "tolerance_for"]
