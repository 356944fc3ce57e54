"""Helper models (a ControlNet) run between the steps and are not judged yet: the trajectory counts their calls by
component and step, and replay names them in its verdict, so a wrong ControlNet is not passed in silence."""

from __future__ import annotations

import contextlib
import json

import pytest

import pipeline_judging as pj
import pipes_tiny

STEPS = 3


def controlnet(**build):
    """StableDiffusionControlNetPipeline: the tiny SD UNet and a tiny ControlNet (8x conditioning embedding)."""
    import torch
    from diffusers import ControlNetModel, StableDiffusionControlNetPipeline

    pipe, kwargs = pipes_tiny.sd(**build)
    torch.manual_seed(1)
    net = ControlNetModel(in_channels=4, layers_per_block=1, block_out_channels=(8, 16),
                          down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), cross_attention_dim=16,
                          norm_num_groups=4, attention_head_dim=4, conditioning_embedding_out_channels=(4, 8, 8, 8))
    with_net = StableDiffusionControlNetPipeline(vae=None, text_encoder=None, tokenizer=None, unet=pipe.unet,
                                                 controlnet=net, scheduler=pipe.scheduler, safety_checker=None,
                                                 feature_extractor=None, requires_safety_checker=False)
    with_net.set_progress_bar_config(disable=True)
    kwargs["image"] = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    return with_net, kwargs


@contextlib.contextmanager
def _wrong_controlnet(pipe):
    """The ControlNet's residuals x1.01 (its own fault; the UNet is right on what it is given)."""
    def scaled(module, args, output):
        down, mid = output
        return [t * 1.01 for t in down], mid * 1.01

    handle = pipe.controlnet.register_forward_hook(scaled)
    try:
        yield
    finally:
        handle.remove()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    found = {}
    pipes_tiny.BUILDERS["controlnet"] = controlnet
    try:
        for wrong in (False, True):
            tmp = tmp_path_factory.mktemp(f"controlnet-{wrong}")
            root = pj.capture(tmp / "ds", "controlnet", steps=STEPS, perturb=_wrong_controlnet if wrong else None)
            found[wrong] = (pj.replay(root, tmp / "r.json"), root)
    finally:
        del pipes_tiny.BUILDERS["controlnet"]
    return found


@pytest.mark.parametrize("wrong", [False, True], ids=["honest", "controlnet-fault"])
def test_the_controlnet_is_counted_and_named_as_not_judged(wrong, runs):
    from ikdata.diffusion import table

    report, root = runs[wrong]
    [line] = [json.loads(p.read_text()) for p in (root / "trajectories").glob("*.jsonl")]
    assert line["unjudged"] == [{"component": "controlnet", "class": "ControlNetModel", "calls": STEPS,
                                 "steps": list(range(STEPS))}]
    case = pj.trajectory_case(report)
    named = "ControlNetModel (controlnet) called 3 time(s), at step(s) 0, 1, 2"
    assert case["trajectory"]["unjudged"] == [named]
    assert any(f"not judged (ran, no reference replayed): {named}" in n for n in table.notes(report))
    # the UNet is judged on the residuals it was given: right either way; the ControlNet's fault is only named
    assert case["status"] == "passed", case.get("reason")


def test_a_pipeline_without_helpers_names_none(tmp_path):
    root = pj.capture(tmp_path / "ds", "sd", steps=2)
    [line] = [json.loads(p.read_text()) for p in (root / "trajectories").glob("*.jsonl")]
    assert "unjudged" not in line
