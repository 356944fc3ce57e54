"""The diffusion family's hooks for the replay loop (declared in :mod:`ikdata.diffusion.feature`): which
definitions it owns (denoisers), how their step cases settle, the post-pass that judges every trajectory, and
the blobs that post-pass loads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ikdata.core.errors import RecordError
from ikdata.core.records import TensorRef
from ikdata.core.repeats import first_receipts
from ikdata.core.status import Status
from ikdata.diffusion import trajectories as traj_mod
from ikdata.core.cases import Case

if TYPE_CHECKING:  # the settings module loads torch; owning a definition needs none
    from ikdata.diffusion.settings import Settings

DENOISER_TAG = "ikdata:needs-model"


def is_denoiser(definition: Any) -> bool:
    """Denoiser workloads are judged per step by their trajectory (they need the model and the floor)."""
    record = getattr(definition, "record", None) or {}
    return DENOISER_TAG in (record.get("tags") or ())


def settle_step(run: Any, row: Any, case: Case) -> Case:
    """The diffusion family's settle (:mod:`ikdata.judging.families`): a denoiser step needs the model and
    the floor, so its case waits for its trajectory's."""
    return case.with_(status=Status.SKIPPED,
                      reason="a denoiser step: judged with its noise floor by its trajectory's case (trajectory:...)")


def finish(run: Any, *, shard: Any = None, settings: Settings | None = None) -> None:
    """The diffusion family's post-pass (:mod:`ikdata.judging.families`): one case per trajectory."""
    if not traj_mod.files(run.ds.root):
        return
    from ikdata.diffusion.judge_context import RunnerHooks
    from ikdata.diffusion.replay import judge_all

    try:
        judge_all(run, RunnerHooks(), shard=shard, settings=settings)
    finally:
        run.cache.flush()


def blob_paths(ds: Any) -> list[str]:
    """Every blob judging the trajectories of ``ds`` may load: the trajectories' tensors, the denoiser
    workloads' inputs and expected outputs, stored models. What a replay from a URL fetches first."""
    from ikdata.diffusion import models

    if not traj_mod.files(ds.root):
        return []
    found = traj_mod.read_all(ds.root)
    paths = {path for t in found.trajectories for _, path in t.tensor_paths()}
    receipts = first_receipts(ds.receipts())[0]
    for name, definition in ds.definitions.items():
        if not is_denoiser(definition):
            continue
        for row in ds.workloads(name):
            receipt = receipts.get(row.uuid)
            refs = list(row.inputs.values()) + (list(receipt.expected_output.values()) if receipt else [])
            paths |= {ref.path for ref in refs if isinstance(ref, TensorRef)}
    for traj in found.trajectories:
        summary = traj.record.get("model") or {}
        try:
            model = models.read_record(ds.root, summary["record"], paths=ds.paths) if summary.get("record") else None
        except (RecordError, KeyError, TypeError):
            continue  # judging names the problem in the trajectory's case
        if model is not None and model.stored:
            paths |= set(model.blob_paths().values())
    return sorted(paths)


__all__ = ["DENOISER_TAG", "blob_paths", "finish", "is_denoiser", "settle_step"]
