"""Reuse of trajectory verdicts: the key that makes two judgements of a trajectory the same, and an earlier
verdict under that key, given only when every blob the trajectory names is confirmed now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ikdata.core.store import digest_from_path
from ikdata.diffusion import trajectories as traj_mod
from ikdata.diffusion.judge_context import Context


FAMILY = "diffusion"  # the family whose code judges a trajectory (ikdata.diffusion.feature)


def reuse_key(ctx: Context, traj: traj_mod.Trajectory) -> str | None:
    """The digest that makes two trajectory judgements the same: the trajectory (its id covers every blob's
    digest), the model, the denoiser definitions' references, the settings, the clip's and the pipeline
    builder's bytes, the device kind, torch and ikdata versions, and the code that judges it (the family's hook
    modules' packages and the replay loop's judging files, :func:`ikdata.replay.reuse.judging_code_digest`, as an
    operator case's key has: a changed judge in a checkout of the same version reuses nothing). None when a named
    file cannot be read."""
    from ikdata._version import __version__
    from ikdata.core import features
    from ikdata.core.digest import bytes_digest, record_digest
    from ikdata.replay.reuse import judging_code_digest

    settings = ctx.settings
    files: dict[str, str] = {}
    target = settings.pipeline.rpartition(":")[0] if settings.pipeline else None
    for name, path in (("clip", settings.clip_for(traj.id)), ("pipeline", target)):
        if not path:
            continue
        if name == "pipeline" and not path.endswith(".py"):
            files[name] = settings.pipeline or ""  # a module: its name is the claim
            continue
        try:
            files[name] = bytes_digest(Path(path).read_bytes())
        except OSError:
            return None
    family = next((f for f in features.families() if f.name == FAMILY), None)
    references = sorted({ctx.run.ds.definitions[ctx.rows[w].definition].reference_digest
                         for step in traj.record["steps"] for w in (step.get("workloads") or {}).get("denoiser") or []
                         if w in ctx.rows and ctx.rows[w].definition in ctx.run.ds.definitions})
    return record_digest({"trajectory": traj.id, "model": (traj.record.get("model") or {}).get("digest"),
                          "references": references, "files": files, "device": ctx.run.device_kind,
                          "torch": ctx.run.torch_version, "ikdata": __version__,
                          "code": judging_code_digest(family),
                          "settings": {k: v for k, v in settings.__dict__.items() if k not in ("clips", "pipeline")}})


def reused(ctx: Context, traj: traj_mod.Trajectory, key: str | None) -> dict[str, Any] | None:
    """The earlier record of the same judgement (``key``), when reuse is on and every blob the trajectory
    names is confirmed (recorded evidence or a rehash now) and passes the path rule; else None."""
    if key is None or not ctx.run.reuse:
        return None
    earlier = ctx.run.cache.lookup(key)
    if earlier is None or "trajectory" not in earlier:
        return None
    for _, path in traj.tensor_paths():
        if ctx.run.ds.paths.refusal(path) is not None:
            return None
        digest = digest_from_path(path)
        if digest is None or not ctx.run.cache.confirm(ctx.run.ds.root / path, digest):
            return None
    return earlier


__all__ = ["FAMILY", "reuse_key", "reused"]
