"""What judging one dataset's trajectories shares: the run (blobs, trust), its rows, the settings, the tensors
verified once, the denoiser models built once, the user's reference pipeline; and the replay loop's functions the
judge calls (:mod:`ikdata.replay.api`, its public interface for families)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from ikdata.core.errors import UsageError
from ikdata.core.records import TensorRef
from ikdata.core.store import digest_from_path
from ikdata.diffusion.reference_pipeline import load_pipeline
from ikdata.diffusion.settings import Settings
from ikdata.replay import api

CACHE_BYTES = 1 << 30  # verified tensors kept per run: conditioning repeats across steps, x is the last x_next


@dataclass(frozen=True)
class RunnerHooks:
    """The replay loop's functions this judge uses: the public ones of :mod:`ikdata.replay.api` unless a caller
    (a benchmark) passes its own."""

    load_tensor: Callable[..., tuple[torch.Tensor, str]] = api.load_tensor  # (run, TensorRef, where) -> verified
    reference: Callable[..., Any] = api.reference  # (run, definition, row) -> the trusted reference, None if refused
    name_outputs: Callable[..., dict] = api.name_outputs  # (definition, returned) -> {output name: value}


class Context:
    """What judging one dataset's trajectories shares: the run (blobs, trust), rows, settings, pipeline."""

    def __init__(self, run: Any, settings: Settings, hooks: RunnerHooks) -> None:
        self.run = run
        self.hooks = hooks
        self.settings = settings
        self.rows = {row.uuid: row for row in run.ds.workloads()}
        self._pipeline: Any = None
        self.pipeline_error: str | None = None
        self._tensors: dict[str, torch.Tensor] = {}  # digest -> verified tensor (conditioning, x = last x_next)
        self._cached_bytes = 0
        self.models: dict[str, dict[str, Any]] = {}  # model digest -> {"record", "state_dict"}
        self.higher_models: dict[str, dict[str, Any]] = {}  # "digest@dtype" -> the model in a higher precision
        self.no_higher: set[tuple] = set()  # (model digest, dtype) that could not run in the higher precision

    def tensor(self, ref: Mapping[str, Any] | TensorRef, where: str) -> torch.Tensor:
        if not isinstance(ref, TensorRef):
            ref = TensorRef(ref["path"], ref.get("tensor_key", "tensor"))
        digest = digest_from_path(ref.path)
        if digest is not None and digest in self._tensors:
            return self._tensors[digest]  # verified once: the same content, by its name
        tensor, found = self.hooks.load_tensor(self.run, ref, where)
        if digest is not None and found == digest:
            size = tensor.numel() * tensor.element_size()
            if self._cached_bytes + size > CACHE_BYTES:
                self._tensors.clear()
                self._cached_bytes = 0
            self._tensors[digest] = tensor
            self._cached_bytes += size
        return tensor

    def pipeline(self) -> Any:
        if self._pipeline is None and self.pipeline_error is None and self.settings.pipeline:
            try:
                self._pipeline = load_pipeline(self.settings.pipeline)
            except UsageError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's code: its failure is the decode check's error
                self.pipeline_error = f"--pipeline {self.settings.pipeline} raised {type(exc).__name__}: {exc}"
        return self._pipeline


__all__ = ["CACHE_BYTES", "Context", "RunnerHooks"]
