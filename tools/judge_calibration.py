"""The replay judge's false-alarm and detection rates, measured on torch's real kernels (docs/replay.md).

Each run draws inputs from its index, computes the output with torch's own kernel in the dtype (the
"engine": ``F.linear``, ``F.scaled_dot_product_attention``, ``F.rms_norm``, ``torch.softmax``) and with the
shipped definition's reference (``definitions/gemm/dense_gemm_*_nt.json``, ``attention/sdpa_*.json``,
``norm/rmsnorm_*.json``; softmax has no definition of its own: its reference is written in the same style,
float32 then one rounding), and judges them as replay does (:func:`ikdata.replay.judges.judge_output` with
the default tolerance). An honest run that the systematic-error test fails is a false alarm (the
elementwise rule's own failures are counted beside it: the shipped tolerances are not this tool's to
change; the two harsher honest engines, ``gemm-splitk`` and ``attention-eager``, exceed them at times). Then the same engine output with a scale
error (computed in float32, rounded once to the dtype) is judged: the detection rate, with the
elementwise rule alone beside it (what the judge caught before the systematic-error test).

    .venv/bin/python tools/judge_calibration.py --runs 100                 # the docs' table
    .venv/bin/python tools/judge_calibration.py --runs 10 --dtypes bfloat16 --families gemm
    .venv/bin/python tools/judge_calibration.py --runs 100 --markdown       # as docs/replay.md shows it

GEMM cases cycle through shapes (M, K, N) and input magnitudes so that outputs range from about 0.007
(the issue's bf16 Llama ``down_proj``) to about 100; every output has at least 1,024 elements. Two
more honest engines do the arithmetic differently from the reference: ``gemm-splitk`` (four partial
products, each rounded to the dtype, summed in it: a split-K kernel with reduced-precision reduction)
and ``attention-eager`` (softmax(QKᵀ)V in the dtype: the probabilities rounded to it, as flash kernels do).
Exit status 1 when the systematic-error test raised any false alarm.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ikdata.core.definitions import Definition  # noqa: E402
from ikdata.core.tolerances import tolerance_for  # noqa: E402
from ikdata.replay.judges import judge_output  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
SCALES = (0.001, 0.005, 0.01, 0.05)
# (M, K, N, input std): outputs' RMS is about std^2 * sqrt(K)
GEMM_CASES = ((16, 64, 64, 0.03), (128, 512, 256, 1.0), (64, 4096, 128, 0.01), (32, 1024, 64, 0.3),
              (256, 256, 512, 2.5))
ATTENTION_CASES = ((1, 4, 64, 64), (2, 8, 128, 32), (1, 2, 256, 128))  # B, H, L, D
NORM_CASES = ((16, 64), (64, 1024), (8, 4096))  # M, H
SOFTMAX_CASES = ((16, 64), (64, 1024), (8, 512))
FAMILIES = ("gemm", "gemm-splitk", "attention", "attention-eager", "rmsnorm", "softmax")


def _reference(path: str):
    """The ``run`` of a shipped definition's reference."""
    record = json.loads((ROOT / "definitions" / path).read_text())
    definition = Definition.from_dict(record, origin="shipped", source=path)
    namespace: dict = {}
    exec(compile(definition.reference, path, "exec"), namespace)  # noqa: S102 - ikdata's own shipped code
    return namespace[definition.entry]


def _softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def computations(family: str, dtype: str, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(engine output, reference output) of run ``index`` of a family in a dtype: torch's kernel and the
    shipped reference on the same inputs."""
    dt, g = DTYPES[dtype], _generator(1_000_003 * FAMILIES.index(family) + index)
    if family == "gemm":
        m, k, n, std = GEMM_CASES[index % len(GEMM_CASES)]
        a = (torch.randn(m, k, generator=g) * std).to(dt)
        w = (torch.randn(n, k, generator=g) * std).to(dt)
        return F.linear(a, w), _reference(f"gemm/dense_gemm_{SHORT[dtype]}_nt.json")(a, w)
    if family == "gemm-splitk":  # honest reduced-precision reduction: 4 partial products, each rounded to the dtype
        m, k, n, std = GEMM_CASES[index % len(GEMM_CASES)]
        a = (torch.randn(m, k, generator=g) * std).to(dt)
        w = (torch.randn(n, k, generator=g) * std).to(dt)
        parts = [F.linear(a_part, w_part) for a_part, w_part in zip(a.chunk(4, dim=1), w.chunk(4, dim=1))]
        engine = parts[0]
        for part in parts[1:]:
            engine = engine + part  # summed in the dtype, as a split-K kernel with reduced-precision reduction
        return engine, _reference(f"gemm/dense_gemm_{SHORT[dtype]}_nt.json")(a, w)
    if family == "attention-eager":  # softmax(QK^T)V written out in the dtype: probabilities rounded to it
        b, h, length, d = ATTENTION_CASES[index % len(ATTENTION_CASES)]
        q, k, v = (torch.randn(b, h, length, d, generator=g).to(dt) for _ in range(3))
        scale = 1.0 / math.sqrt(d)
        probs = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
        return probs @ v, _reference(f"attention/sdpa_{SHORT[dtype]}.json")(q, k, v, scale)
    if family == "attention":
        b, h, length, d = ATTENTION_CASES[index % len(ATTENTION_CASES)]
        q, k, v = (torch.randn(b, h, length, d, generator=g).to(dt) for _ in range(3))
        scale = 1.0 / math.sqrt(d)
        return (F.scaled_dot_product_attention(q, k, v, scale=scale),
                _reference(f"attention/sdpa_{SHORT[dtype]}.json")(q, k, v, scale))
    if family == "rmsnorm":
        m, h = NORM_CASES[index % len(NORM_CASES)]
        x = (torch.randn(m, h, generator=g) * 3).to(dt)
        w = (1 + 0.1 * torch.randn(h, generator=g)).to(dt)
        return F.rms_norm(x, (h,), w, eps=1e-6), _reference(f"norm/rmsnorm_{SHORT[dtype]}.json")(x, w, 1e-6)
    if family == "softmax":
        m, n = SOFTMAX_CASES[index % len(SOFTMAX_CASES)]
        x = (torch.randn(m, n, generator=g) * 4).to(dt)
        return torch.softmax(x, dim=-1), _softmax_reference(x)
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


def scaled(engine: torch.Tensor, error: float) -> torch.Tensor:
    """The engine's output with a scale error, applied in float32 and rounded once to its dtype."""
    return (engine.float() * (1 + error)).to(engine.dtype)


@dataclass
class Row:
    """One (family, dtype): counts over the runs."""

    family: str
    dtype: str
    runs: int = 0
    false_alarms: int = 0  # honest runs the systematic-error test failed
    elementwise_false_alarms: int = 0  # honest runs the elementwise rule failed (the shipped tolerance, unchanged)
    false_alarm_reasons: list[str] = field(default_factory=list)
    caught: dict[float, int] = field(default_factory=dict)
    caught_elementwise: dict[float, int] = field(default_factory=dict)
    detectable: list[float] = field(default_factory=list)
    honest_scale: list[float] = field(default_factory=list)  # |scale_error| / floor of the honest runs
    honest_t: list[float] = field(default_factory=list)  # max |t| of the honest runs (scale and offset)
    elements: list[int] = field(default_factory=list)


def _elementwise_failed(verdict) -> bool:
    return verdict.reason is not None and "fail |a - e|" in verdict.reason


def calibrate(family: str, dtype: str, runs: int, scales=SCALES) -> Row:
    """The counts of one family and dtype over ``runs`` runs."""
    row = Row(family, dtype, caught={s: 0 for s in scales}, caught_elementwise={s: 0 for s in scales})
    rule = tolerance_for(dtype)
    for index in range(runs):
        engine, reference = computations(family, dtype, index)
        honest = judge_output("out", reference, engine, rule)
        row.runs += 1
        row.elements.append(engine.numel())
        if "systematic error" in (honest.reason or ""):
            row.false_alarms += 1
            row.false_alarm_reasons.append(honest.reason or "")
        row.elementwise_false_alarms += _elementwise_failed(honest)
        found = honest.metrics
        if "detectable_scale_error" in found:
            row.detectable.append(float(found["detectable_scale_error"]))
            row.honest_scale.append(max(abs(float(found["scale_error"])), abs(float(found["offset_error"])))
                                    / float(found["systematic_floor"]))
            row.honest_t.append(max(abs(float(found["scale_error_t"])), abs(float(found["offset_error_t"]))))
        for error in scales:
            verdict = judge_output("out", reference, scaled(engine, error), rule)
            row.caught[error] += not verdict.passed
            row.caught_elementwise[error] += _elementwise_failed(verdict)
    return row


def _pct(count: int, runs: int) -> str:
    return f"{100 * count / runs:.0f}%" if runs else "-"


def table(rows: list[Row], scales=SCALES) -> str:
    """The rows as a markdown table."""
    head = ("| family | dtype | runs | elements | false alarms: systematic (elementwise) | "
            + " | ".join(f"x{1 + s:g} caught (elementwise alone)" for s in scales) + " | detectable scale (median) | honest: worst bias / floor, worst t |")
    lines = [head, "|" + " --- |" * (7 + len(scales))]
    for r in rows:
        cells = " | ".join(f"{_pct(r.caught[s], r.runs)} ({_pct(r.caught_elementwise[s], r.runs)})" for s in scales)
        elements = f"{min(r.elements)}-{max(r.elements)}" if r.elements else "-"
        median = sorted(r.detectable)[len(r.detectable) // 2] if r.detectable else math.nan
        worst = (f"{max(r.honest_scale):.2f}, {max(r.honest_t):.2g}" if r.honest_t and
                 math.isfinite(max(r.honest_t)) else "-")
        lines.append(f"| {r.family} | {r.dtype} | {r.runs} | {elements} | {r.false_alarms} ({r.elementwise_false_alarms}) | {cells} | "
                     f"{median:.2g} | {worst} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="honest runs per family and dtype")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated: float32,bfloat16,float16")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated: " + ",".join(FAMILIES))
    parser.add_argument("--markdown", action="store_true", help="print only the markdown table")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows, started = [], time.perf_counter()
    for family in args.families.split(","):
        for dtype in args.dtypes.split(","):
            row = calibrate(family, dtype, args.runs)
            rows.append(row)
            if not args.markdown:
                print(f"{family:15s} {dtype:8s} false alarms {row.false_alarms}/{row.runs} "
                      f"(elementwise {row.elementwise_false_alarms})  caught "
                      + "  ".join(f"x{1 + s:g} {row.caught[s]}/{row.runs}" for s in SCALES), flush=True)
                for reason in row.false_alarm_reasons[:3]:
                    print(f"    false alarm: {reason}")
    print(table(rows))
    if not args.markdown:
        print(f"torch {torch.__version__}, CPU, {time.perf_counter() - started:.0f} s")
    return 1 if any(r.false_alarms for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
