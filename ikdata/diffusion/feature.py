"""What diffusion declares to the engines: its record kinds (trajectories, model records), its judge family and
its capture source (Diffusers pipelines)."""

from __future__ import annotations

from ikdata.core.features import Family, Feature, Option, RecordKind, Source

_DATA = "ikdata.diffusion.dataset_hooks"
_HOOKS = "ikdata.diffusion.family_hooks"

OPTIONS = (  # ikdata replay's options for the family's settings (ikdata.diffusion.settings.from_options)
    Option("--pipeline", "The reference pipeline's builder (your code, run because you name it); decodes the final "
           "latents for the decode check.", metavar="FILE.py:FUNCTION"),
    Option("--clip", "The engine's clip to decode with PyAV (repeatable; prefix a trajectory id to name whose).",
           multiple=True, metavar="[TRAJECTORY=]FILE"),
    Option("--attention", "The reference's attention (sdpa, math, eager).", default="sdpa"),
    Option("--floor-attention", "The other exact attention the floor is measured with (sdpa-reversed, math, eager, "
           "sdpa; 'none': the dtype's rounding alone).", default="sdpa-reversed"),
    Option("--floor-k", "A step passes when e <= k*f + eps + one rounding (default 2).", type=float),
    Option("--floor-eps", "The eps of e <= k*f + eps + one rounding (default 0).", type=float),
    Option("--seed", "The seed the reference expects the initial noise from (default: the trajectory's).", type=int),
    Option("--streams", "Latent streams to record in trajectories, e.g. video,audio (default: all).", multiple=True,
           command="capture"),
)

FEATURE = Feature(
    "diffusion",
    kinds=(RecordKind("diffusion trajectories", "trajectories", ".jsonl", "trajectory", imported="append"),
           RecordKind("model records", "models", ".json", "model", imported="create",
                      pattern=r"models/[0-9a-f]{64}\.json")),
    family=Family("diffusion", owns=f"{_HOOKS}:is_denoiser", settle=f"{_HOOKS}:settle_step",
                  finish=f"{_HOOKS}:finish", regroup="ikdata.diffusion.verdicts:regroup",
                  blobs=f"{_HOOKS}:blob_paths", needs_whole_run=True,
                  vouches="ikdata.diffusion.discovery:vouches", recheck="ikdata.diffusion.verdicts:recheck",
                  validate=f"{_DATA}:validate", references=f"{_DATA}:references", carried=f"{_DATA}:carried",
                  lineage=f"{_DATA}:lineage", diff=f"{_DATA}:diff", stats=f"{_DATA}:stats",
                  describe=f"{_DATA}:describe", settings="ikdata.diffusion.settings:from_options",
                  summary="ikdata.diffusion.table:summary_lines", figures="ikdata.diffusion.report_figures:figures",
                  options=OPTIONS),
    sources=(Source("diffusers", "diffusers", hooks="ikdata.diffusion.capture"),),
    commands=("noise",),  # ikdata noise: the noise recipe's digest (ikdata.diffusion.noise)
)
