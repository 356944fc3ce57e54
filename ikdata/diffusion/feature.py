"""What diffusion declares to the engines: its record kinds (trajectories, model records), its judge family and
its capture source (Diffusers pipelines)."""

from __future__ import annotations

from ikdata.core.features import Family, Feature, RecordKind, Source

FEATURE = Feature(
    "diffusion",
    kinds=(RecordKind("diffusion trajectories", "trajectories", ".jsonl", "trajectory", imported="append"),
           RecordKind("model records", "models", ".json", "model", imported="create",
                      pattern=r"models/[0-9a-f]{64}\.json")),
    family=Family("diffusion", owns="ikdata.diffusion.replay:is_denoiser", settle="ikdata.diffusion.replay:settle_step",
                  finish="ikdata.diffusion.replay:finish", regroup="ikdata.diffusion.verdicts:regroup",
                  blobs="ikdata.diffusion.replay:blob_paths", needs_whole_run=True,
                  vouches="ikdata.diffusion.discovery:vouches"),
    sources=(Source("diffusers", "diffusers", hooks="ikdata.diffusion.capture"),),
)
