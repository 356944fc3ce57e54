"""Edges of discovery: a pipeline refused at capture says why, and replay repeats it; the initial-noise check
understands init_noise_sigma with a stochastic scheduler; a discovered definition whose reference was edited
runs nothing."""

from __future__ import annotations

import json

import pytest

import pipeline_judging as pj
import pipes_tiny


def _line(root):
    [line] = [json.loads(p.read_text()) for p in (root / "trajectories").glob("*.jsonl")]
    return line


def test_a_second_transformer_is_refused_at_capture_with_the_reason(tmp_path, monkeypatch):
    from diffusers import WanPipeline

    def wan22(**build):
        pipe, kwargs = pipes_tiny.wan(**build)
        two = WanPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=pipe.transformer,
                          transformer_2=pipe.transformer, scheduler=pipe.scheduler, boundary_ratio=0.5)
        two.set_progress_bar_config(disable=True)
        return two, kwargs

    monkeypatch.setitem(pipes_tiny.BUILDERS, "wan22", wan22)
    root = pj.capture(tmp_path / "ds", "wan22", steps=2)
    line = _line(root)
    why = {s["skipped"]["denoiser"] for s in line["steps"]}
    assert len(why) == 1 and "second denoiser (transformer_2)" in why.pop()
    case = pj.trajectory_case(pj.replay(root, tmp_path / "r.json"))
    assert case["status"] == "error" and "second denoiser (transformer_2)" in case["reason"]


def test_the_noise_check_scales_by_init_noise_sigma_for_euler_ancestral(tmp_path, monkeypatch):
    from diffusers import EulerAncestralDiscreteScheduler

    monkeypatch.setitem(pipes_tiny.BUILDERS, "sd-ancestral", lambda **build: pipes_tiny.sd(
        scheduler=EulerAncestralDiscreteScheduler(num_train_timesteps=100, steps_offset=1), **build))
    root = pj.capture(tmp_path / "ds", "sd-ancestral", steps=2)
    line = _line(root)
    assert line["noise"]["check"] == {"image": True} and line["noise"]["reason"] is None
    case = pj.trajectory_case(pj.replay(root, tmp_path / "r.json"))
    assert case["trajectory"]["noise"]["image"] == {"equal": True, "rel": 0.0,
                                                    "method": "sorted values, times init_noise_sigma"}


def test_latents_passed_in_say_why_the_noise_check_cannot_hold(tmp_path, monkeypatch):
    import torch

    def given(**build):
        pipe, kwargs = pipes_tiny.flux(**build)
        kwargs["latents"] = torch.zeros(1, 16, 16)
        return pipe, kwargs

    monkeypatch.setitem(pipes_tiny.BUILDERS, "flux-latents", given)
    line = _line(pj.capture(tmp_path / "ds", "flux-latents", steps=2))
    assert line["noise"]["check"] == {"image": False}
    assert "latents passed in" in line["noise"]["reason"]


def test_an_edited_reference_of_a_discovered_definition_runs_nothing(tmp_path):
    root = pj.capture(tmp_path / "ds", "sd3", steps=2)
    [path] = list((root / "definitions" / "denoiser").glob("denoiser_SD3Transformer2DModel_*.json"))
    record = json.loads(path.read_text())
    record["reference"] = record["reference"].replace("return_dict=False)", "return_dict=False) if True else 0")
    path.write_text(json.dumps(record))
    case = pj.trajectory_case(pj.replay(root, tmp_path / "r.json"))
    assert case["status"] == "error" and "not the one ikdata generates" in case["reason"]


@pytest.mark.parametrize("value", [object(), {"a": object()}])
def test_an_argument_ikdata_cannot_record_is_named(value):
    import torch

    from ikdata.diffusion import discovery

    class Model(torch.nn.Module):
        def forward(self, hidden_states, extra=None, return_dict=True):
            return (hidden_states,)

    with pytest.raises(ValueError, match="argument 'extra"):
        discovery.flatten(Model(), (torch.zeros(1, 2),), {"extra": value})


def test_an_honest_flux_dataset_imports_with_its_discovered_denoiser_rejudged(tmp_path):
    from ikdata.importing.apply import import_dataset
    from ikdata.core.layout import init_dataset

    root = pj.capture(tmp_path / "src", "flux-true-cfg", steps=2)
    assert pj.trajectory_case(pj.replay(root, root / "reports" / "replay.json"))["status"] == "passed"
    init_dataset(tmp_path / "dst", name="dst")
    result = import_dataset(root, tmp_path / "dst")  # no --trust-reports: the diffusion family vouches for its code
    statement = result.rejudged.statement()
    assert statement.startswith("re-judged 6 of 6 cases") and "all agree" in statement  # 4 calls, 2 steps


def test_every_refused_pipeline_is_one_diffusers_has():
    import diffusers

    from ikdata.diffusion import adapters

    assert all(isinstance(getattr(diffusers, name, None), type) for name in adapters.REFUSED), \
        [n for n in adapters.REFUSED if not isinstance(getattr(diffusers, n, None), type)]
