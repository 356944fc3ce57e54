"""The distances replay measures between an engine's tensor and the reference's, in float64."""

from __future__ import annotations

import math

import torch


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64; 0 when both are zero (inf when only b is)."""
    a, b = a.double(), b.double()
    nb, d = float(b.norm()), float((a - b).norm())
    return d / nb if nb else (0.0 if d == 0 else math.inf)


def cos(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """The cosine of a and b, flattened, in float64; None when either is zero."""
    a, b = a.double().flatten(), b.double().flatten()
    n = float(a.norm() * b.norm())
    return float((a * b).sum()) / n if n else None


__all__ = ["cos", "rel"]
