"""The model as content: digests per tensor and over them, a small model stored once, a large one recorded
by digests and resolved again from a folder (refusing other weights)."""

from __future__ import annotations

import pytest

import tiny
from diffusion_helpers import trajectories


def test_model_digest_is_over_names_and_tensor_digests_in_any_order():
    from ikdata.diffusion.models import model_digest

    assert model_digest({"a": "1" * 64, "b": "2" * 64}) == model_digest({"b": "2" * 64, "a": "1" * 64})
    assert model_digest({"a": "1" * 64, "b": "2" * 64}) != model_digest({"a": "2" * 64, "b": "1" * 64})


def test_the_model_record_names_every_weight_by_its_store_digest(capture_into, tmp_path):
    from ikdata.diffusion.models import read_record
    from ikdata.core.store import raw_tensor

    capture_into()
    pipe, kwargs = tiny.ddim(steps=2)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    model = read_record(tmp_path / "ds", record["model"]["record"])
    state = pipe.unet.state_dict()
    assert set(model.record["tensors"]) == set(state)
    for name, tensor in state.items():
        assert model.record["tensors"][name]["digest"] == raw_tensor(tensor).digest
        assert (tmp_path / "ds" / model.blob_paths()[name]).is_file()
    assert model.record["class"] == "UNet2DModel" and model.record["config"]["sample_size"] == 16


def test_a_large_model_is_recorded_by_digests_and_resolved_from_a_folder(capture_into, tmp_path, monkeypatch):
    import torch

    from ikdata.diffusion import models
    from ikdata.core.errors import StoreError

    monkeypatch.setattr(models, "DEFAULT_STORE_LIMIT", 0)  # every model counts as large
    capture_into()
    pipe, kwargs = tiny.ddim(steps=2)
    pipe(**kwargs)
    [record] = trajectories(tmp_path / "ds")
    assert record["model"]["stored"] is False
    model = models.read_record(tmp_path / "ds", record["model"]["record"])
    assert not any((tmp_path / "ds" / p).exists() for p in model.blob_paths().values())
    from ikdata.core.dataset import Dataset
    from ikdata.core.writer import DatasetWriter
    from ikdata.ops.validate import validate

    DatasetWriter(tmp_path / "ds").commit()
    report = validate(Dataset.open(tmp_path / "ds"), deep=True)
    assert report.ok, [str(p) for p in report.problems]

    folder = tmp_path / "checkout"
    pipe.unet.save_pretrained(folder / "unet")  # diffusion_pytorch_model.safetensors, as on the Hub
    found = models.resolve_folder(model, folder)
    assert set(found) == set(model.record["tensors"])

    with torch.no_grad():
        next(iter(pipe.unet.parameters())).add_(1.0)
    pipe.unet.save_pretrained(folder / "unet")
    with pytest.raises(StoreError, match="these are other weights; refusing them"):
        models.resolve_folder(model, folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="which no safetensors file there holds"):
        models.resolve_folder(model, tmp_path / "empty")
