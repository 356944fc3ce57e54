"""Recheck a report case: may its "passed" be trusted? Recomputed from its metrics, not read from a flag.

torch-free. Import calls :func:`recheck` on every case before it accepts a
receipt; it additionally compares ``input_digests``/``expected_digests`` with
the receipt's blobs, so the report is proven to be about these exact bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ikdata.core import features
from ikdata.core.cases import Case, Report
from ikdata.core.status import Status
from ikdata.core.tolerances import (DEFAULT_TOLERANCES, JUDGE_BOUNDS, dtype_name, is_exact, judge_for,
                                      systematic_failures, tolerance_for)

if TYPE_CHECKING:
    from ikdata.core.definitions import Definition

_EPS = 1e-12  # float slack when comparing fractions written to JSON
_REL = 1e-6  # relative slack when cross-checking metrics computed in float64 by different code
REPORT_FORMAT = "ikdata-replay/1"  # the one report format ikdata writes and reads


@dataclass(frozen=True)
class TensorStats:
    """What the cross-check needs of an expected output: its size, largest |value| and L2 norm
    (both over the finite elements), computed from the blob's bytes."""

    numel: int
    max_abs: float
    norm: float


# safetensors code -> numpy dtype name; bfloat16 is widened by hand; float8 and complex are not read
_NUMPY_BY_CODE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
                  "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "u1"}
_CODE_BY_TORCH = {"torch.float64": "F64", "torch.float32": "F32", "torch.float16": "F16",
                  "torch.bfloat16": "BF16", "torch.int64": "I64", "torch.int32": "I32", "torch.int16": "I16",
                  "torch.int8": "I8", "torch.uint8": "U8", "torch.uint16": "U16", "torch.uint32": "U32",
                  "torch.uint64": "U64", "torch.bool": "BOOL"}


def tensor_stats(dtype: str, data: Any) -> TensorStats | None:
    """:class:`TensorStats` of a tensor given its torch dtype name and raw bytes (numpy, no torch);
    None for dtypes numpy cannot read (float8, complex)."""
    import numpy as np

    code = _CODE_BY_TORCH.get(dtype)
    if code is None:
        return None
    raw = np.frombuffer(data, dtype=np.uint8)
    if code == "BF16":
        values = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        values = raw.view(_NUMPY_BY_CODE[code]).astype(np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return TensorStats(int(values.size), 0.0, 0.0)
    return TensorStats(int(values.size), float(np.abs(finite).max()), float(np.linalg.norm(finite)))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def recheck(case: Case | Mapping[str, Any], report: Report | Mapping[str, Any] | None, *,
            definition: Definition | None = None) -> list[str]:
    """The reasons a case's "passed" cannot be trusted; an empty list is a trustworthy pass.

    A case a family judges its own way (a trajectory, pooled sampling draws) is re-checked by that family's
    declared ``recheck`` hook; every other case output by output (:func:`recheck_outputs`).

    Checks: the status is "passed"; metrics and a tolerance are recorded for every
    output (and the outputs agree with ``expected_digests`` and the definition);
    no tolerance is looser than ikdata's default table for its dtype, or than the
    definition's override when ``definition`` is given; integers and bools were
    judged exactly; ``mismatched_fraction <= 1 - matched_ratio``; every judge
    metric is within its bound and no bound is looser than the judge's default
    (or the definition's).

    Args:
        case: one case of the report: a :class:`ikdata.core.cases.Case` or its JSON object.
        report: the whole report (for its context; the case's own facts win): a
            :class:`ikdata.core.cases.Report` or its JSON document.
        definition: the definition the case claims to judge; without it the
            built-in defaults are the limit, so a definition's looser override is
            reported as untrusted.

    Returns:
        Human-readable reasons, each naming the output and the numbers.

    Example:
        >>> [c.uuid for c in report.cases if not recheck(c, report)]
    """
    # the one conversion at this public boundary: callers hand a Case and a Report (import) or their JSON (the
    # library's users); the families' hooks and the rule below read the types
    case = Case.of(case)
    report = None if report is None else Report.of(report)
    for family in features.families():  # a family's own cases (trajectories, pooled draws) are its to re-check
        hook = family.hook("recheck")
        found = hook(case, report, definition) if hook is not None else None
        if found is not None:
            return found
    return recheck_outputs(case, definition)


def recheck_outputs(case: Case, definition: Definition | None = None, *,
                    judged: Callable[[str, Mapping[str, Any], Mapping[str, Any]], list[str] | None] | None = None
                    ) -> list[str]:
    """The reasons a case judged output by output cannot be trusted (:func:`recheck` less the families).

    ``judged(output, tolerance, metrics)`` lets a family re-check the outputs its own judge decided (the
    reasons, or None for an output judged as any other).
    """
    reasons: list[str] = []
    if case.status != Status.PASSED:
        reasons.append(f"status is {str(case.status)!r}, not {Status.PASSED!r}")
        return reasons
    metrics, tolerance = case.metrics, case.tolerance
    if not isinstance(metrics, Mapping) or not metrics:
        return reasons + ["no metrics recorded; replay it with this version of ikdata"]
    if not isinstance(tolerance, Mapping) or not tolerance:
        return reasons + ["no tolerance recorded; replay it with this version of ikdata"]
    outputs = set(tolerance)
    if set(metrics) != outputs:
        reasons.append(f"metrics cover outputs {sorted(metrics)} but the tolerance covers {sorted(outputs)}")
    expected = case.expected_digests
    if isinstance(expected, Mapping) and set(expected) != outputs:
        reasons.append(f"expected_digests name outputs {sorted(expected)} but the tolerance covers {sorted(outputs)}")
    if definition is not None:
        if set(definition.outputs) != outputs:
            reasons.append(f"the definition {definition.name!r} has outputs {sorted(definition.outputs)}, "
                           f"the case judged {sorted(outputs)}")
        if case.reference_digest not in (None, definition.reference_digest):
            reasons.append(f"judged with reference {case.reference_digest}, but the definition's "
                           f"reference is {definition.reference_digest}")
    for output in sorted(outputs):
        spec, found = tolerance.get(output), metrics.get(output)
        if not isinstance(spec, Mapping) or not isinstance(found, Mapping):
            reasons.append(f"{output}: tolerance or metrics missing")
            continue
        own = judged(output, spec, found) if judged is not None else None
        if own is not None:  # a family's judge (statistical: recomputed from the report's cases)
            reasons += [f"{output}: {r}" for r in own]
        elif "judge" in spec:
            reasons += [f"{output}: {r}" for r in _recheck_judge(output, spec, found, definition)]
        else:
            reasons += [f"{output}: {r}" for r in _recheck_tolerance(output, spec, found, definition)]
    return reasons


def _recheck_tolerance(output: str, spec: Mapping[str, Any], found: Mapping[str, Any],
                       definition: Definition | None) -> list[str]:
    reasons = []
    dtype = dtype_name(spec.get("dtype", ""))
    rtol, atol = _number(spec.get("rtol")), _number(spec.get("atol"))
    ratio = _number(spec.get("matched_ratio", 1.0))
    if rtol is None or atol is None or ratio is None:
        return [f"tolerance {dict(spec)} lacks a finite rtol, atol or matched_ratio"]
    if definition is not None and judge_for(dtype, output, definition.judge) is not None:
        reasons.append(f"the definition names judge {definition.judge['name']!r} for it, but a tolerance judged it")
    allowed = tolerance_for(dtype, definition.tolerance if definition is not None else None)
    if allowed is None:
        return reasons + [f"dtype {dtype!r} has no default tolerance (known: {sorted(DEFAULT_TOLERANCES)})"]
    if is_exact(dtype) and (rtol != 0 or atol != 0 or ratio != 1):
        reasons.append(f"{dtype} must match exactly, but was judged with rtol={rtol}, atol={atol}, "
                       f"matched_ratio={ratio}")
    if rtol > allowed.rtol or atol > allowed.atol:
        reasons.append(f"tolerance rtol={rtol}, atol={atol} is looser than the allowed {dtype} tolerance "
                       f"rtol={allowed.rtol}, atol={allowed.atol}")
    if ratio < allowed.matched_ratio:
        reasons.append(f"matched_ratio {ratio} is below the required {allowed.matched_ratio}")
    mismatched = _number(found.get("mismatched_fraction"))
    if mismatched is None:
        reasons.append(f"mismatched_fraction is {found.get('mismatched_fraction')!r}, not a number")
    elif mismatched > 1 - ratio + _EPS:
        reasons.append(f"mismatched_fraction {mismatched} exceeds 1 - matched_ratio = {1 - ratio}")
    if is_exact(dtype) and _number(found.get("max_abs_error")) != 0:
        reasons.append(f"max_abs_error is {found.get('max_abs_error')!r}; {dtype} must match exactly")
    worst = found.get("max_error_ratio")
    if ratio == 1 and worst is not None and (_number(worst) is None or _number(worst) > 1 + _EPS):
        reasons.append(f"max_error_ratio {worst!r} > 1: some element is outside atol + rtol * |expected|")
    # the systematic-error test (ikdata.replay.judges), recomputed from its recorded metrics where recorded
    reasons += systematic_failures(dtype, found, min(rtol, allowed.rtol))
    return reasons + cross_check(found, rtol=rtol, atol=atol)


def cross_check(found: Mapping[str, Any], *, rtol: float, atol: float,
                stats: TensorStats | None = None) -> list[str]:
    """Why an output's recorded metrics cannot all be true together (an edited report), or [].

    The metrics of :mod:`ikdata.replay.judges` bound each other: all are zero exactly when
    no element differs; ``max_error_ratio <= max_abs_error / atol`` and ``<= max_rel_error / rtol``.
    Given the expected output's :class:`TensorStats`, more: ``max_abs_error <= ||a - e|| <=
    sqrt(n) * max_abs_error`` with ``||a - e|| = relative_rms * ||e||``;
    ``max_error_ratio >= max_abs_error / (atol + rtol * max|e|)``; ``max_rel_error >=
    max_abs_error / max|e|``. A metric edited alone breaks one of these unless it is edited
    within the band the others allow.
    """
    reasons: list[str] = []
    max_abs = _number(found.get("max_abs_error"))
    if max_abs is None or max_abs < 0:
        return [f"max_abs_error is {found.get('max_abs_error')!r}, not a finite number >= 0"]
    named = {k: _number(found.get(k)) for k in ("max_rel_error", "relative_rms", "max_error_ratio",
                                               "cosine_similarity") if k in found}
    for key, value in named.items():
        if value is None and key != "max_rel_error":  # x/0 makes max_rel_error inf legitimately
            reasons.append(f"{key} is {found.get(key)!r}, not a finite number")
    if reasons:
        return reasons
    for key in ("max_rel_error", "relative_rms", "max_error_ratio"):
        value = named.get(key)
        if value is not None and (value == 0) != (max_abs == 0):
            reasons.append(f"max_abs_error = {max_abs} but {key} = {value}: both are 0 exactly when no "
                           "element differs")
    cosine = named.get("cosine_similarity")
    if cosine is not None and not -1 - _REL <= cosine <= 1 + _REL:
        reasons.append(f"cosine_similarity {cosine} is outside [-1, 1]")
    worst, rel = named.get("max_error_ratio"), named.get("max_rel_error")
    if worst is not None and atol > 0 and worst > max_abs / atol * (1 + _REL) + _EPS:
        reasons.append(f"max_error_ratio {worst} exceeds max_abs_error / atol = {max_abs / atol}")
    if worst is not None and rel is not None and rtol > 0 and worst > rel / rtol * (1 + _REL) + _EPS:
        reasons.append(f"max_error_ratio {worst} exceeds max_rel_error / rtol = {rel / rtol}")
    if stats is None or reasons:
        return reasons
    rrms = named.get("relative_rms")
    if rrms is not None and stats.norm > 1e-30:
        diff_norm = rrms * stats.norm
        if max_abs > diff_norm * (1 + _REL) + _EPS or diff_norm > math.sqrt(stats.numel) * max_abs * (1 + _REL) + _EPS:
            reasons.append(f"max_abs_error {max_abs} disagrees with relative_rms {rrms} of an expected output "
                           f"whose norm is {stats.norm:.6g} over {stats.numel} elements")
    bound = atol + rtol * stats.max_abs
    if worst is not None and bound > 0 and worst < max_abs / bound * (1 - _REL) - _EPS:
        reasons.append(f"max_error_ratio {worst} is below max_abs_error / (atol + rtol * max|expected|) = "
                       f"{max_abs / bound:.6g}")
    if rel is not None and stats.max_abs > 0 and rel < max_abs / stats.max_abs * (1 - _REL) - _EPS:
        reasons.append(f"max_rel_error {rel} is below max_abs_error / max|expected| = {max_abs / stats.max_abs:.6g}")
    return reasons


def _recheck_judge(output: str, spec: Mapping[str, Any], found: Mapping[str, Any],
                   definition: Definition | None) -> list[str]:
    name = spec.get("judge")
    bounds = spec.get("bounds")
    if not isinstance(bounds, Mapping) or not bounds:
        return [f"judge {name!r} recorded without bounds"]
    if definition is not None:
        allowed = judge_for(spec.get("dtype", ""), output, definition.judge)
        if allowed is None or allowed.name != name:
            names = f"judge {allowed.name!r}" if allowed else "no judge"
            return [f"judged by {name!r}, but the definition {definition.name!r} names {names} for it"]
        limits = dict(allowed.bounds)
    elif name in JUDGE_BOUNDS:
        limits = dict(JUDGE_BOUNDS[name])
    else:
        return [f"unknown judge {name!r}; known: {sorted(JUDGE_BOUNDS)}"]
    reasons = []
    for metric, limit in sorted(limits.items()):
        bound = _number(bounds.get(metric))
        if bound is None:
            reasons.append(f"judge {name!r} did not bound {metric}")
        elif bound > limit:
            reasons.append(f"bound {metric} <= {bound} is looser than the allowed {limit}")
    for metric, bound in sorted(bounds.items()):
        value, limit = _number(found.get(metric)), _number(bound)
        if value is None or limit is None:
            reasons.append(f"{metric} is {found.get(metric)!r}, not a finite number")
        elif value > limit:
            reasons.append(f"{metric} = {value} exceeds its bound {limit}")
    return reasons




# -- receipts without repetition ------------------------------------------------------------------
#
# What every validation an import attaches shares with the others of its report (the default
# tolerance table, device, versions, the report it came from) is stored once, as a content-addressed
# file ``reports/shared/<digest>.json`` (tracked by the manifest like any report), and a validation
# names it by ``"shared": <digest>``. Validations written before keep those fields inline and read
# as they always did.

SHARED_DIR = "reports/shared"
SHARED_KEYS = ("tolerances", "device", "device_name", "torch", "ikdata_version", "finished_at", "report")


def shared_path(digest: str) -> str:
    return f"{SHARED_DIR}/{digest}.json"


def share_validation(validation: Mapping[str, Any]) -> tuple[dict[str, Any], str, bytes]:
    """Split a validation into what is its own (with ``"shared": digest``) and the shared context.

    Returns:
        (the validation to store in the receipt, the context's dataset-relative path, its bytes).
    """
    from ikdata.core.digest import bytes_digest, canonical_json

    context = {k: validation[k] for k in SHARED_KEYS if k in validation}
    data = canonical_json(context)
    digest = bytes_digest(data)
    own = {k: v for k, v in validation.items() if k not in SHARED_KEYS}
    own["shared"] = digest
    return own, shared_path(digest), data + b"\n"


def expand_validation(root: Any, validation: Mapping[str, Any]) -> dict[str, Any]:
    """A validation with its shared context merged back (as written before contexts were shared).

    Raises:
        RecordError: the context file is missing, unreadable, or its content is not its name's digest.
    """
    import os

    import orjson

    from ikdata.core.digest import bytes_digest, canonical_json
    from ikdata.core.errors import RecordError

    digest = validation.get("shared")
    if digest is None:
        return dict(validation)
    rel = shared_path(str(digest))
    if not isinstance(digest, str) or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise RecordError(f"names shared context {digest!r}, which is not a digest", path=rel)
    try:
        with open(os.path.join(root, rel), "rb") as stream:
            context = orjson.loads(stream.read())
    except FileNotFoundError:
        raise RecordError("the shared context a validation names is missing; restore it from where the dataset "
                          "came from", path=rel) from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise RecordError(f"unreadable shared context: {exc}", path=rel) from exc
    if not isinstance(context, dict) or bytes_digest(canonical_json(context)) != digest:
        raise RecordError("the shared context's content is not the digest in its name: it was altered", path=rel)
    merged = {k: v for k, v in validation.items() if k != "shared"}
    merged.update({k: v for k, v in context.items() if k in SHARED_KEYS})
    return merged


__all__ = ["REPORT_FORMAT", "SHARED_DIR", "SHARED_KEYS", "TensorStats", "cross_check", "expand_validation", "recheck", "recheck_outputs",
           "share_validation", "shared_path", "tensor_stats"]
