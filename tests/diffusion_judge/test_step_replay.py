"""Step replay of captured trajectories: the reference passes every step within its own floor; perturbed
engines fail at the first wrong step, named with its stream; the floor is > 0 and stable; the noise check
fails for a trajectory from another seed; a schedule mismatch stops at step 0."""

from __future__ import annotations

import contextlib
import json

import pytest

from judge_helpers import STEPS, capture, replay


def _failing(case):
    return [(s["index"], s["stream"]) for s in case["trajectory"]["steps"] if not s["passed"]]


def test_the_reference_passes_every_step_within_its_floor(reference_capture, tmp_path):
    case = replay(reference_capture, tmp_path)
    m = case["trajectory"]
    assert case["status"] == "passed", case.get("reason")
    assert m["steps_total"] == 2 * STEPS and m["steps_passed"] == 2 * STEPS
    assert {s["stream"] for s in m["steps"]} == {"video", "audio"}
    assert all(s["e"] <= s["bound"] for s in m["steps"])
    assert m["level"] == "step output"  # the guidance was rebuilt: e compares the out the scheduler consumed
    assert m["attention"] == {"reference": "sdpa", "alt": "sdpa-reversed"} and m["k"] == 2.0 and m["eps"] == 0.0
    assert all(s["reference_dtype"] == "torch.float64" and 0 < s["slack"] < 2 ** -24 for s in m["steps"])
    assert all(c["equal"] for c in m["continuity"]) and len(m["continuity"]) == 2 * STEPS
    assert m["noise"] == {s: {"equal": True, "rel": 0.0, "method": "sorted values"} for s in ("video", "audio")}
    assert not m["schedule"]["stopped"] and len(m["schedule"]["reference_sigmas"]) == STEPS
    assert all(s["chain"] <= s["chain_bound"] for s in m["steps"])


def test_the_floor_is_positive_and_stable_between_runs(reference_capture, tmp_path):
    first, second = replay(reference_capture, tmp_path), replay(reference_capture, tmp_path)
    floors = [(s["index"], s["stream"], s["f"]) for s in first["trajectory"]["steps"]]
    assert all(f > 0 for _, _, f in floors)
    assert floors == [(s["index"], s["stream"], s["f"]) for s in second["trajectory"]["steps"]]
    assert all(f < 1e-4 for _, _, f in floors)  # exact kernels: rounding only


def test_without_the_attention_pair_the_floor_is_the_dtype_rounding_alone(reference_capture, tmp_path):
    case = replay(reference_capture, tmp_path, alt_attention=None)
    assert case["status"] == "passed"
    steps = case["trajectory"]["steps"]
    assert all(not s["degenerate"] and 0 < s["f"] < 1e-4 and s["e"] <= s["f"] for s in steps)  # the float32 rounding


@contextlib.contextmanager
def _attention_scale_off(pipe):
    """(a) The engine's first video self-attention uses a scale 1% too large."""
    import torch.nn.functional as F

    module = pipe.transformer.transformer_blocks[0].attn1
    inside = []
    original = F.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if inside:
            scale = (scale if scale is not None else query.shape[-1] ** -0.5) * 1.01
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, **kw)

    pre = module.register_forward_pre_hook(lambda *a: inside.append(1))
    post = module.register_forward_hook(lambda *a: inside.clear())
    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
        pre.remove()
        post.remove()


@contextlib.contextmanager
def _wrong_sigma_at_step_3(pipe):
    """(b) The engine's scheduler steps with a wrong sigma at step 3 (its recorded schedule stays right)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    class Engine(FlowMatchEulerDiscreteScheduler):
        def step(self, model_output, timestep, sample, *args, **kwargs):
            index = self.step_index if self.step_index is not None else 0
            if index != 3:
                return super().step(model_output, timestep, sample, *args, **kwargs)
            saved = self.sigmas.clone()
            self.sigmas[index + 1] = self.sigmas[index + 1] * 0.9
            try:
                return super().step(model_output, timestep, sample, *args, **kwargs)
            finally:
                self.sigmas.copy_(saved)

    Engine.__name__ = Engine.__qualname__ = "FlowMatchEulerDiscreteScheduler"  # an engine's drop-in replacement
    pipe.scheduler = Engine.from_config(pipe.scheduler.config)
    yield


@contextlib.contextmanager
def _audio_latents_swapped(pipe):
    """(c) At step 2 the engine feeds the denoiser the audio latents of step 1 (a stale buffer)."""
    seen = []

    def pre(module, args, kwargs):
        seen.append(kwargs["audio_hidden_states"])
        if len(seen) == 3:
            kwargs = {**kwargs, "audio_hidden_states": seen[1]}
        return args, kwargs

    handle = pipe.transformer.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


@pytest.mark.parametrize("perturb, step, stream", [
    (_attention_scale_off, 0, "video"),
    (_wrong_sigma_at_step_3, 3, "video"),
    (_audio_latents_swapped, 2, "audio"),
], ids=["attention-scale-1pct", "wrong-sigma-step-3", "audio-latents-swapped"])
def test_a_perturbed_engine_fails_at_the_first_wrong_step(perturb, step, stream, tmp_path):
    root = capture(tmp_path / "ds", perturb=perturb)
    case = replay(root, tmp_path)
    m = case["trajectory"]
    assert case["status"] == "failed"
    assert m["first_failure"]["step"] == step and stream in m["first_failure"]["streams"], m["first_failure"]
    assert all(s["passed"] for s in m["steps"] if s["index"] < step)  # every earlier step is within the floor
    assert f"first at step {step} (" in case["reason"] and stream in case["reason"]
    assert not m["schedule"]["stopped"]
    if perturb is _wrong_sigma_at_step_3:  # the denoiser is right; the update is not
        assert m["first_failure"]["check"].startswith("chain")
        assert all(s["e"] <= s["bound"] for s in m["steps"])
    if perturb is _audio_latents_swapped:
        # the joint transformer mixes the streams: step 2 fails in both, and no other step
        assert _failing(case) == [(2, "video"), (2, "audio")]
        assert any("step 2 (audio): the denoiser was not fed the step's x" in n for n in m["notes"])


def test_a_trajectory_from_another_seed_fails_the_noise_check(reference_capture, tmp_path):
    case = replay(reference_capture, tmp_path, seed=8)  # the reference expects seed 8; the engine drew from 7
    assert case["status"] == "failed"
    noise = case["trajectory"]["noise"]
    assert noise["video"]["equal"] is False and noise["audio"]["equal"] is False
    assert "initial noise of stream 'video' is not the recipe's for seed 8" in case["reason"]
    assert all(s["passed"] for s in case["trajectory"]["steps"])  # the steps themselves are fine


def test_a_schedule_mismatch_stops_at_step_0(reference_capture, tmp_path):
    import shutil

    from ikdata.diffusion.trajectories import trajectory_id

    root = tmp_path / "ds"
    shutil.copytree(reference_capture, root)
    [path] = (root / "trajectories").glob("*.jsonl")
    record = json.loads(path.read_text())
    config = record["scheduler"]["config"]
    config["shift"] = 3.0  # the reference builds other sigmas
    config["_use_default_values"] = [k for k in config.get("_use_default_values", []) if k != "shift"]
    record["trajectory"] = trajectory_id(record)
    path.write_text(json.dumps(record) + "\n")
    case = replay(root, tmp_path)
    m = case["trajectory"]
    assert case["status"] == "failed" and m["schedule"]["stopped"] and m["steps"] == []
    assert m["first_failure"] == {"step": 0, "streams": [], "check": "schedule"}
    assert "schedule mismatch, stopped at step 0: step 0 (video): sigma" in case["reason"]


@pytest.mark.parametrize("family, stream, combination", [("ltx", "video", "cfg"), ("ddim", "image", "none")])
def test_other_families_replay_exactly(family, stream, combination, tmp_path):
    """LTX (plain CFG on the velocity) and DDIM (no guidance, another scheduler) replay bit-exactly too."""
    import tiny
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.core.writer import DatasetWriter

    pipe, kwargs = getattr(tiny, family)()
    boot.install(CaptureConfig(into=str(tmp_path / "ds"), strict=True, only=("rmsnorm_f32_h99991",)))
    try:
        pipe(**kwargs)
    finally:
        boot.uninstall()
    DatasetWriter(tmp_path / "ds").commit()
    case = replay(tmp_path / "ds", tmp_path)
    steps = case["trajectory"]["steps"]
    assert case["status"] == "passed", case.get("reason")
    assert {s["stream"] for s in steps} == {stream} and all(s["combination"] == combination for s in steps)
    assert all(s["e_same_dtype"] == 0 and 0 < s["e"] <= s["f"] and s["chain"] == 0 for s in steps)
