"""What FlashInfer declares to the engines: its capture source (``@flashinfer_api`` calls), the reader of its
own dump and trace folders for ``ikdata import``, and the trust of definitions converted from its templates."""

from __future__ import annotations

from ikdata.core.features import Feature, Source

FEATURE = Feature(
    "flashinfer",
    sources=(Source("flashinfer", "flashinfer", hooks="ikdata.flashinfer.capture",
                    importer="ikdata.flashinfer.source:importer", trusts="ikdata.flashinfer.trust:trusted_flashinfer",
                    recognises="ikdata.flashinfer.recorder_folder:recognises"),),
    schemas=("flashinfer-call",),  # its dumps' call records (ikdata.flashinfer.dumps)
)
