"""Judges: compare a reference's output with the captured output and say why it passes or fails.

Shape and dtype must match exactly. Floats pass elementwise when
``|a - e| <= atol + rtol * |e|`` (torch's allclose rule) for at least
``matched_ratio`` of the elements; inf must meet inf of the same sign; NaN fails
unless the expected value is NaN at the same place. Integers and bools must be
equal. A definition may name a metric judge instead: a shipped one (:data:`METRIC_JUDGES`)
or a plugin from :mod:`ikdata.core.judge_registry` (an installed entry point or a module
the user named). :func:`select_rule` says which rule judges an output and why; when
replaying the seed capture script's layout it applies that script's rule first (a
``gated_delta_rule_prefill_*`` definition's float32 outputs are judged by the GDN
chunk-state judge), so ikdata reaches the verdict that script reached.

Every output records the same metrics, whatever judged it:

- ``max_abs_error``: max ``|a - e|`` (inf when an inf meets a finite value, NaN when a NaN meets a non-NaN);
- ``max_rel_error``: max ``|a - e| / |e|`` (0/0 counts as 0, x/0 as inf);
- ``relative_rms``: ``||a - e|| / ||e||`` over all elements;
- ``cosine_similarity``: over the finite pairs (1.0 when both are all zeros; NaN when a non-finite value mismatches);
- ``mismatched_fraction``: the fraction of elements outside the rule (for a judge: outside the default tolerance);
- ``max_error_ratio``: max ``|a - e| / (atol + rtol * |e|)``, <= 1 exactly when every element is within the tolerance.

Beside the elementwise rule, every float output judged by a tolerance gets the systematic-error test
(:data:`ikdata.core.tolerances.SYSTEMATIC`; docs/replay.md): the engine's output regressed on the
reference's, ``engine = (1 + scale_error) * reference + offset_error * rms(reference)``, each coefficient
with its jackknife standard error over contiguous blocks, and the relative RMS error against ``rtol``. It
records ``scale_error``, ``scale_error_t``, ``offset_error``, ``offset_error_t`` (t: the coefficient in
standard errors), ``systematic_floor`` (:func:`ikdata.core.tolerances.systematic_floor`), ``systematic_t_bound``,
``relative_rms_bound`` and ``detectable_scale_error`` (the smallest scale error this output would fail).
It adds reasons to a verdict; it never passes an output the elementwise rule fails.

Non-finite metric values are written to JSON as the strings ``"nan"``, ``"inf"``, ``"-inf"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from ikdata.core import judge_registry, tolerances
from ikdata.core.errors import DefinitionError
from ikdata.core.tolerances import (DEFAULT_TOLERANCES, SYSTEMATIC, JudgeSpec, Tolerance, dtype_name, is_exact,
                                    systematic_failures, systematic_floor)

if TYPE_CHECKING:
    from ikdata.core.definitions import Definition

_TINY = 1e-12  # floor of a norm in a relative metric, as the seed's GDN judge used


@dataclass(frozen=True)
class Verdict:
    """How one output was judged: pass or fail, the reason, the metrics and the rule used."""

    passed: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    rule: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None


def json_float(value: float) -> float | str:
    """A float as JSON can hold it: non-finite values become "nan", "inf", "-inf"."""
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _item(tensor: torch.Tensor) -> float:
    return float(tensor.item())


@dataclass(frozen=True)
class _Comparison:
    """The elementwise facts shared by every metric, in float64."""

    a: torch.Tensor
    e: torch.Tensor
    diff: torch.Tensor  # |a - e|, 0 where both are the same non-finite value
    finite: torch.Tensor  # both finite
    bad_nonfinite: torch.Tensor  # a non-finite value that does not meet the same value


def _compare(actual: torch.Tensor, expected: torch.Tensor) -> _Comparison:
    a, e = actual.double(), expected.double()
    same_nonfinite = (a.isnan() & e.isnan()) | (a.isinf() & e.isinf() & (a == e))
    finite = a.isfinite() & e.isfinite()
    diff = torch.where(same_nonfinite, torch.zeros((), dtype=a.dtype, device=a.device), (a - e).abs())
    # inf - inf of opposite signs is inf already; a NaN on either side keeps NaN.
    return _Comparison(a, e, diff, finite, ~finite & ~same_nonfinite)


def _base_metrics(c: _Comparison, tolerance: Tolerance, exact: bool,
                  actual: torch.Tensor, expected: torch.Tensor) -> tuple[dict[str, float], int]:
    """The recorded metrics and the number of mismatched elements."""
    numel = c.a.numel()
    if numel == 0:
        return {"max_abs_error": 0.0, "max_rel_error": 0.0, "relative_rms": 0.0, "cosine_similarity": 1.0,
                "mismatched_fraction": 0.0, "max_error_ratio": 0.0}, 0
    if exact:
        matched = actual == expected
    else:
        bound = tolerance.atol + tolerance.rtol * c.e.abs()
        matched = (c.finite & (c.diff <= bound)) | (~c.finite & ~c.bad_nonfinite)
    mismatched = int((~matched).sum().item())
    max_abs = _item(c.diff.max())
    zero = c.diff == 0
    rel = torch.where(zero, torch.zeros((), dtype=c.diff.dtype, device=c.diff.device), c.diff / c.e.abs())
    rel = torch.where(c.diff.isinf(), torch.full((), math.inf, dtype=rel.dtype, device=rel.device), rel)
    max_rel = _item(rel.max())
    e_finite = torch.where(c.e.isfinite(), c.e, torch.zeros((), dtype=c.e.dtype, device=c.e.device))
    relative_rms = _item(c.diff.norm()) / max(_item(e_finite.norm()), _TINY)
    if bool(c.bad_nonfinite.any()):
        cosine = math.nan
        ratio = max_abs
    else:
        a_f = torch.where(c.finite, c.a, torch.zeros((), dtype=c.a.dtype, device=c.a.device))
        norms = _item(a_f.norm()) * _item(e_finite.norm())
        dot = _item((a_f * e_finite).sum())
        if norms == 0:
            cosine = 1.0 if _item(a_f.abs().max()) == 0 and _item(e_finite.abs().max()) == 0 else 0.0
        else:
            cosine = dot / norms
        if exact:
            ratio = 0.0 if mismatched == 0 else math.inf
        else:
            bound = tolerance.atol + tolerance.rtol * e_finite.abs()
            ratios = torch.where(zero, torch.zeros((), dtype=c.diff.dtype, device=c.diff.device),
                                 c.diff / bound)
            ratio = _item(ratios.max())
    return {"max_abs_error": max_abs, "max_rel_error": max_rel, "relative_rms": relative_rms,
            "cosine_similarity": cosine, "mismatched_fraction": mismatched / numel,
            "max_error_ratio": ratio}, mismatched


def _finite_metrics(a: torch.Tensor, e: torch.Tensor, actual: torch.Tensor, expected: torch.Tensor,
                    tolerance: Tolerance, exact: bool) -> tuple[dict[str, float], int]:
    """The same metrics as :func:`_base_metrics` when every value is finite, with far fewer tensor ops."""
    diff = (a - e).abs()
    zero = torch.zeros((), dtype=diff.dtype, device=diff.device)
    is_zero = diff == 0
    if exact:
        mismatched = (actual != expected).sum()
        ratio = torch.where(is_zero, zero, torch.full((), math.inf, dtype=diff.dtype, device=diff.device)).max()
    else:
        bound = e.abs().mul_(tolerance.rtol).add_(tolerance.atol)
        mismatched = (diff > bound).sum()
        ratio = torch.where(is_zero, zero, diff / bound).max()
    rel = torch.where(is_zero, zero, diff / e.abs()).max()
    found = torch.stack([mismatched.to(diff.dtype), diff.max(), rel, diff.norm(), e.norm(), a.norm(),
                         (a * e).sum(), ratio]).tolist()
    count, max_abs, max_rel, diff_norm, e_norm, a_norm, dot, worst = found
    if a_norm * e_norm == 0:
        cosine = 1.0 if a_norm == 0 and e_norm == 0 else 0.0
    else:
        cosine = dot / (a_norm * e_norm)
    return {"max_abs_error": max_abs, "max_rel_error": max_rel, "relative_rms": diff_norm / max(e_norm, _TINY),
            "cosine_similarity": cosine, "mismatched_fraction": count / a.numel(),
            "max_error_ratio": worst}, int(count)


# -- the systematic-error test ----------------------------------------------------------------------

def _fit(sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, offset) of ``d = offset + scale * r`` by least squares, from the sums [n, Σr, Σr², Σd, Σrd]
    (the last axis; any leading axes are fits of their own)."""
    n, sr, srr, sd, srd = sums.unbind(-1)
    sxx = srr - sr * sr / n
    sxy = srd - sr * sd / n
    degenerate = sxx <= 1e-9 * srr  # a constant reference: the offset and the scale are one; fit the scale alone
    through_origin = srd / srr.clamp_min(1e-300)
    scale = torch.where(degenerate, through_origin, sxy / sxx.where(~degenerate, torch.ones_like(sxx)))
    offset = torch.where(degenerate, torch.zeros_like(sd), (sd - scale * sr) / n)
    return scale, offset


def _block_sums(values: torch.Tensor, blocks: int, size: int) -> torch.Tensor:
    """The sums of ``values`` over ``blocks`` contiguous blocks of ``size`` (the last takes the rest too)."""
    sums = values[:blocks * size].view(blocks, size).sum(dim=1)
    if values.numel() > blocks * size:
        sums[-1] += values[blocks * size:].sum()
    return sums


def systematic_metrics(reference: torch.Tensor, engine: torch.Tensor) -> dict[str, float] | None:
    """The systematic error of ``engine`` against ``reference`` (same shape): the regression
    ``engine - reference = offset + scale * reference`` over the finite pairs, and each coefficient's
    jackknife standard error over :data:`SYSTEMATIC` ``blocks`` contiguous blocks of the flattened tensors.

    Returns ``{"scale_error", "scale_error_t", "offset_error", "offset_error_t", "scale_error_se"}``
    (the offset relative to the reference's RMS), or None when there are fewer than ``min_elements``
    finite pairs or the reference is all zeros.

    Example:
        >>> r = torch.randn(4096, dtype=torch.float64)
        >>> round(systematic_metrics(r, r * 1.01)["scale_error"], 6)
        0.01
    """
    r, g = reference.double().flatten(), engine.double().flatten()
    finite = r.isfinite() & g.isfinite()
    if not bool(finite.all()):
        r, g = r[finite], g[finite]
    n, blocks = r.numel(), int(SYSTEMATIC["blocks"])
    if n < SYSTEMATIC["min_elements"]:
        return None
    largest = float(r.abs().max())
    if largest == 0.0:
        return None
    r, g = r / largest, g / largest  # every coefficient is scale-free: keep r² clear of overflow and underflow
    d = g - r
    size = n // blocks  # equal blocks; the last also takes the n % blocks elements left over
    counts = torch.full((blocks,), float(size), dtype=r.dtype, device=r.device)
    counts[-1] += n - size * blocks
    per_block = torch.stack([counts] + [_block_sums(q, blocks, size) for q in (r, r * r, d, r * d)], dim=1)
    total = per_block.sum(0)
    scale, offset = _fit(total)
    left_out_scale, left_out_offset = _fit(total - per_block)
    factor = (blocks - 1) / blocks
    se_scale = (factor * ((left_out_scale - left_out_scale.mean()) ** 2).sum()).sqrt()
    se_offset = (factor * ((left_out_offset - left_out_offset.mean()) ** 2).sum()).sqrt()
    rms = (total[2] / total[0]).sqrt()
    found = torch.stack([scale, se_scale, offset / rms, se_offset / rms]).tolist()
    scale_v, se_s, offset_v, se_o = found
    return {"scale_error": scale_v, "scale_error_t": _t(scale_v, se_s), "offset_error": offset_v,
            "offset_error_t": _t(offset_v, se_o), "scale_error_se": se_s}


def _t(value: float, se: float) -> float:
    if se > 0:
        return value / se
    return 0.0 if value == 0 else math.copysign(math.inf, value)


def _systematic_verdict(name: str, rule: Tolerance, actual: torch.Tensor, expected: torch.Tensor,
                        verdict: Verdict) -> Verdict:
    """``verdict`` with the systematic-error test's metrics and, when it fails, its reasons added."""
    floor = systematic_floor(rule.dtype, rule.rtol)
    if floor is None or actual.numel() < SYSTEMATIC["min_elements"]:
        return verdict
    found = systematic_metrics(actual, expected)
    if found is None:
        return verdict
    se = found.pop("scale_error_se")
    found.update(systematic_floor=floor, systematic_t_bound=SYSTEMATIC["t"],
                 detectable_scale_error=max(SYSTEMATIC["t"] * se, floor))
    if rule.matched_ratio == 1:  # a matched ratio below 1 lets outliers in, which the RMS would count
        found["relative_rms_bound"] = rule.rtol
    metrics = {**verdict.metrics, **{k: json_float(v) for k, v in found.items()}}
    failures = systematic_failures(rule.dtype, {**found, "relative_rms": verdict.metrics.get("relative_rms")},
                                   rule.rtol)
    if not failures:
        return Verdict(verdict.passed, metrics, verdict.rule, verdict.reason)
    what = (f"output {name!r}: systematic error ({rule.dtype}, smallest detectable scale error "
            f"{found['detectable_scale_error']:.3g}): " + "; ".join(failures))
    return Verdict(False, metrics, verdict.rule, f"{verdict.reason}; {what}" if verdict.reason else what)


# -- metric judges -------------------------------------------------------------------------------

def _gdn_chunk_state(c: _Comparison) -> dict[str, float]:
    """The seed's GDN chunk-state judge: relative RMS, relative max, and the worst head's relative RMS."""
    relative_max = _item(c.diff.max()) / max(_item(c.e.abs().max()), _TINY) if c.e.numel() else 0.0
    if c.e.ndim >= 2 and c.e.numel():
        head = c.diff.norm(dim=(-2, -1)) / c.e.norm(dim=(-2, -1)).clamp_min(_TINY)
        worst_head = _item(head.max())
    else:
        worst_head = _item(c.diff.norm()) / max(_item(c.e.norm()), _TINY) if c.e.numel() else 0.0
    relative_rms = _item(c.diff.norm()) / max(_item(c.e.norm()), _TINY) if c.e.numel() else 0.0
    return {"relative_rms": relative_rms, "relative_max": relative_max, "max_head_relative_rms": worst_head}


def _relative_error(c: _Comparison) -> dict[str, float]:
    found = _gdn_chunk_state(c)
    return {"relative_rms": found["relative_rms"], "relative_max": found["relative_max"]}


METRIC_JUDGES: dict[str, Callable[[_Comparison], dict[str, float]]] = {
    "gdn_chunk_state": _gdn_chunk_state,
    "relative_error": _relative_error,
}


# -- choosing the rule ------------------------------------------------------------------------------

DEFINITION_JUDGE = "definition judge"
DEFINITION_TOLERANCE = "definition tolerance"
DEFAULT_TOLERANCE = "default tolerance"
SEED_RULE = (f"seed-002 rule: the definition's name starts with {tolerances.SEED_GDN_PREFIX!r} and the "
             "output is float32")


@dataclass(frozen=True)
class Selection:
    """The rule that judges one output and which rule chose it (a case records it under ``chosen_by``)."""

    rule: Tolerance | JudgeSpec
    chosen_by: str


def select_rule(definition: Definition, output: str, *, layout: str | None = None) -> Selection:
    """The tolerance or judge for one output of a definition, and why.

    Order: the seed script's name rule when ``layout`` is ``"seed"``; then the judge the
    definition names; then its tolerance override; then the default table.

    Raises:
        DefinitionError: the definition names a judge nobody registered, or a float dtype has no tolerance.
    """
    dtype = definition.outputs[output].dtype
    if layout == "seed":
        seed = tolerances.seed_judge_for(definition.name, dtype)
        if seed is not None:
            return Selection(seed, SEED_RULE)
    judge = tolerances.judge_for(dtype, output, definition.judge)
    if judge is not None:
        if judge.name not in METRIC_JUDGES:
            plugin = judge_registry.get(judge.name)  # imports an installed entry point's module, when judged
            if plugin is None:
                raise DefinitionError(f"judge {judge.name!r} is unknown; known judges: "
                                      f"{judge_registry.known_names()}", definition=definition.name)
            judge = JudgeSpec(judge.dtype, judge.name, {**plugin.bounds, **judge.bounds})
        return Selection(judge, DEFINITION_JUDGE)
    rule = tolerances.tolerance_for(dtype, definition.tolerance)
    if rule is None:
        raise DefinitionError(f"output {output!r} has dtype {dtype}, which has no default tolerance; set "
                              f"\"tolerance\": {{\"{dtype}\": {{\"rtol\": ..., \"atol\": ...}}}} in the definition",
                              definition=definition.name)
    overridden = dtype in (definition.tolerance or {}) or "matched_ratio" in (definition.tolerance or {})
    return Selection(rule, DEFINITION_TOLERANCE if overridden and not is_exact(dtype) else DEFAULT_TOLERANCE)


def _metric_judge(rule: JudgeSpec) -> Callable[[_Comparison], dict[str, float]]:
    """The metrics function of a judge: shipped, or a registered plugin's (given float64 tensors)."""
    shipped = METRIC_JUDGES.get(rule.name)
    if shipped is not None:
        return shipped
    plugin = judge_registry.get(rule.name)
    if plugin is None or plugin.metrics is None:
        raise LookupError(f"unknown judge {rule.name!r}; known judges: {', '.join(judge_registry.known_names())}")
    return lambda c: {k: float(v) for k, v in plugin.metrics(c.a, c.e).items()}


# -- the entry point -------------------------------------------------------------------------------

def judge_output(name: str, actual: Any, expected: torch.Tensor, rule: Tolerance | JudgeSpec) -> Verdict:
    """Judge one output of a reference against the captured output.

    Args:
        name: the output's name, for messages.
        actual: what the reference returned for it.
        expected: the captured output (same device as ``actual``).
        rule: the elementwise tolerance, or a metric judge with its bounds.

    Returns:
        A Verdict whose ``metrics`` and ``rule`` are JSON-ready.

    Example:
        >>> judge_output("C", a, e, Tolerance("float32", 1e-4, 2e-5)).passed
        True
    """
    record = rule.to_dict()
    if not isinstance(actual, torch.Tensor):
        return Verdict(False, {}, record, f"output {name!r} is a {type(actual).__name__}, expected a tensor")
    if actual.dtype != expected.dtype:
        return Verdict(False, {}, record, f"output {name!r} has dtype {actual.dtype}, the captured output "
                                          f"has {expected.dtype}")
    if tuple(actual.shape) != tuple(expected.shape):
        return Verdict(False, {}, record, f"output {name!r} has shape {list(actual.shape)}, the captured "
                                          f"output has {list(expected.shape)}")
    if actual.device != expected.device:
        actual = actual.to(expected.device)
    exact = is_exact(dtype_name(expected.dtype))
    numel = expected.numel()
    if isinstance(rule, Tolerance) and numel:
        a, e = actual.double(), expected.double()
        if exact or bool(a.isfinite().all() & e.isfinite().all()):
            metrics, mismatched = _finite_metrics(a, e, actual, expected, rule, exact)
            verdict = _elementwise_verdict(name, rule, exact, numel, metrics, mismatched, record)
            return verdict if exact else _systematic_verdict(name, rule, a, e, verdict)
    comparison = _compare(actual, expected)
    if isinstance(rule, JudgeSpec):
        default = DEFAULT_TOLERANCES.get(rule.dtype)
        elementwise = Tolerance(rule.dtype, default["rtol"], default["atol"]) if default else Tolerance(rule.dtype, 0, 0)
        metrics, _ = _base_metrics(comparison, elementwise, exact, actual, expected)
        found = _metric_judge(rule)(comparison)
        metrics.update(found)
        over = [f"{m} = {found.get(m, math.nan):.6g} > {b:g}" for m, b in sorted(rule.bounds.items())
                if not found.get(m, math.nan) <= b]
        reason = f"output {name!r}: judge {rule.name!r}: " + ", ".join(over) if over else None
        return Verdict(not over, {k: json_float(v) for k, v in metrics.items()}, record, reason)
    metrics, mismatched = _base_metrics(comparison, rule, exact, actual, expected)
    verdict = _elementwise_verdict(name, rule, exact, numel, metrics, mismatched, record)
    return verdict if exact else _systematic_verdict(name, rule, comparison.a, comparison.e, verdict)


def _elementwise_verdict(name: str, rule: Tolerance, exact: bool, numel: int, metrics: dict[str, float],
                         mismatched: int, record: dict[str, Any]) -> Verdict:
    allowed = int(math.floor((1 - rule.matched_ratio) * numel + 1e-9))
    passed = mismatched <= allowed
    reason = None
    if not passed:
        what = "must be equal" if exact else f"|a - e| <= {rule.atol:g} + {rule.rtol:g} * |e|"
        reason = (f"output {name!r}: {mismatched} of {numel} elements "
                  f"({metrics['mismatched_fraction']:.3%}) fail {what} ({rule.dtype}); "
                  f"max abs error {metrics['max_abs_error']:.6g}")
        if rule.matched_ratio < 1:
            reason += f"; at most {allowed} may (matched_ratio {rule.matched_ratio:g})"
    return Verdict(passed, {k: json_float(v) for k, v in metrics.items()}, record, reason)


__all__ = ["DEFAULT_TOLERANCE", "DEFINITION_JUDGE", "DEFINITION_TOLERANCE", "METRIC_JUDGES", "SEED_RULE", "Selection",
           "Verdict", "json_float", "judge_output", "select_rule", "systematic_metrics"]
