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

The systematic-error test (:data:`SYSTEMATIC`, docs/replay.md "The systematic-error test") judges every
float output beside the per-element tolerance and never instead of it. Honest rounding is unbiased and
uncorrelated across elements; a wrong scale, a dropped term or a wrong constant is not. The engine's
output is regressed on the reference's (``engine = (1 + scale) * reference + offset``); the standard errors
come from a jackknife over contiguous blocks of elements (so errors correlated within a row count once).
A coefficient fails when it is both significant (more than ``t`` standard errors) and larger than one
unit roundoff of the dtype (:data:`UNIT_ROUNDOFF`: the most a single rounding, in any direction, can bias
a value; for float32 and float64, 1/16 of rtol, which is far above it: :func:`systematic_floor`), so an honest kernel that rounds once, anyhow, passes and a 1% scale error in bf16 (2.6 unit
roundoffs) fails on outputs of any magnitude. The relative RMS error must also stay within the rule's
``rtol`` (the bound each element meets away from zero), so outputs small enough that ``atol`` dominates
are judged relative to their size. Outputs under ``min_elements`` finite elements are judged per element only.
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

# Half the machine epsilon: the largest relative error of one rounding to the dtype (round to nearest).
UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0 ** -53,
    "float32": 2.0 ** -24,
    "float16": 2.0 ** -11,
    "bfloat16": 2.0 ** -8,
    "float8_e4m3fn": 2.0 ** -4,
    "float8_e5m2": 2.0 ** -3,
}

# The systematic-error test's settings (calibrated by tools/judge_calibration.py; docs/replay.md).
# t: standard errors a coefficient must exceed (jackknife over ``blocks`` contiguous blocks: 31 degrees of
# freedom; P(|t| > 6) is about 1e-6 for honest noise); min_elements: below it the test is not applied.
# rtol_fraction: the floor is at least this share of the rule's rtol, for dtypes whose table lets an honest
# kernel be far less accurate than one rounding (float32's 1e-4 covers approximated exp and rsqrt, TF32):
# float32's floor is 6.25e-6, bf16's and fp16's stay one unit roundoff.
SYSTEMATIC: dict[str, float] = {"t": 6.0, "blocks": 32, "min_elements": 256, "rtol_fraction": 1 / 16}

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
    found["systematic"] = {**SYSTEMATIC, "floor": dict(UNIT_ROUNDOFF), "relative_rms": "rtol"}
    return found


def unit_roundoff(dtype: str) -> float | None:
    """The unit roundoff of a float dtype (:data:`UNIT_ROUNDOFF`), None for others."""
    return UNIT_ROUNDOFF.get(dtype_name(dtype))


def systematic_floor(dtype: str, rtol: float) -> float | None:
    """The largest systematic error the test lets pass in ``dtype`` under a rule of ``rtol``: one unit
    roundoff, or :data:`SYSTEMATIC` ``rtol_fraction`` of rtol where that is more; None for non-float dtypes."""
    u = unit_roundoff(dtype)
    return None if u is None else max(u, rtol * SYSTEMATIC["rtol_fraction"])


# The metrics the systematic-error test records per output (docs/replay.md).
SYSTEMATIC_METRICS = ("scale_error", "scale_error_t", "offset_error", "offset_error_t", "systematic_floor",
                      "systematic_t_bound", "detectable_scale_error", "relative_rms_bound")


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}.get(value) \
            if isinstance(value, str) else None
    return float(value)


def systematic_failures(dtype: str, metrics: Mapping[str, Any], rtol: float) -> list[str]:
    """Why an output's recorded systematic-error metrics fail the test, [] when they pass or are absent.

    torch-free, so import's re-check recomputes the verdict from a report. Bounds recorded looser than
    the defaults (``systematic_t_bound`` above :data:`SYSTEMATIC`'s t, a floor above :func:`systematic_floor`,
    a relative RMS bound above ``rtol``) are reasons too.

    Example:
        >>> systematic_failures("bfloat16", {"scale_error": 0.01, "scale_error_t": 40.0}, 0.016)
        ['scale error +1% (engine vs reference; 40 standard errors; bound 0.391% and 6 standard errors)']
    """
    reasons: list[str] = []
    floor = systematic_floor(dtype, rtol)
    if floor is None or "scale_error" not in metrics:
        return reasons
    t_bound = SYSTEMATIC["t"]
    recorded_t, recorded_floor = _as_float(metrics.get("systematic_t_bound")), _as_float(metrics.get("systematic_floor"))
    if recorded_t is not None and recorded_t > t_bound:
        reasons.append(f"systematic_t_bound {recorded_t:g} is looser than the default {t_bound:g}")
    if recorded_floor is not None and recorded_floor > floor:
        reasons.append(f"systematic_floor {recorded_floor:g} is looser than {floor:g} ({dtype}, rtol {rtol:g})")
    for name, what in (("scale_error", "scale error {} (engine vs reference"),
                       ("offset_error", "offset error {} of the reference's RMS (")):
        value, t = _as_float(metrics.get(name)), _as_float(metrics.get(f"{name}_t"))
        if value is None or t is None:
            continue
        if not (abs(value) <= floor or abs(t) <= t_bound):
            reasons.append(what.format(_percent(value)) + f"{'; ' if name == 'scale_error' else ''}{abs(t):.3g} "
                           f"standard errors; bound {_percent(floor).lstrip('+')} and {t_bound:g} standard errors)")
    rms, rms_bound = _as_float(metrics.get("relative_rms")), _as_float(metrics.get("relative_rms_bound"))
    if rms_bound is not None and rms_bound > rtol:
        reasons.append(f"relative_rms_bound {rms_bound:g} is looser than rtol {rtol:g}")
    if rms_bound is not None and rms is not None and not rms <= min(rms_bound, rtol):
        reasons.append(f"relative RMS error {rms:.3g} > {min(rms_bound, rtol):g} (rtol: the dtype's expected "
                       "rounding, judged over the whole output)")
    return reasons


def _percent(value: float) -> str:
    return f"{value * 100:+.3g}%" if value != 0 and abs(value) >= 1e-5 else f"{value:+.3g}"


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
           "SYSTEMATIC", "SYSTEMATIC_METRICS", "Tolerance", "UNIT_ROUNDOFF", "dtype_name", "is_exact", "judge_for",
           "seed_judge_for", "systematic_failures", "systematic_floor", "table", "tolerance_for", "unit_roundoff"]
