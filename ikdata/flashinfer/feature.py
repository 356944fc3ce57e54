"""What FlashInfer declares to the engines: its capture source (``@flashinfer_api`` calls)."""

from __future__ import annotations

from ikdata.core.features import Feature, Source

FEATURE = Feature(
    "flashinfer",
    sources=(Source("flashinfer", "flashinfer", hooks="ikdata.flashinfer.capture"),),
)
