"""diff and lineage see pipeline calls: two captures of one pipeline with other seeds differ in their
trajectories (seed, noise), and a denoising step's lineage names its call, seed and request."""

from __future__ import annotations

import json

from judge_helpers import capture


def _denoiser_uuid(root) -> str:
    [path] = list((root / "workloads" / "denoiser").glob("*.jsonl"))
    return json.loads(path.read_text().splitlines()[0])["workload"]["uuid"]


def test_diff_of_two_seeds_names_the_trajectories_seed_and_noise(reference_capture, tmp_path):
    from ikdata.ops.diff import diff

    other = capture(tmp_path / "seed8", seed=8)
    changes = diff(reference_capture, other).to_dict()
    [change] = changes["trajectories"]
    assert change["pipeline"] == "LTX2Pipeline" and change["a"] and change["b"]
    assert change["differs"]["seed"] == {"a": 7, "b": 8}
    assert "noise" in change["differs"] and "model" not in change["differs"]  # same weights
    assert diff(reference_capture, reference_capture).is_empty


def test_lineage_of_a_denoising_step_names_its_pipeline_call_seed_and_request(reference_capture):
    from ikdata.ops.lineage import trace

    [chain] = trace(reference_capture, _denoiser_uuid(reference_capture))
    assert chain.call["pipeline"] == "LTX2Pipeline" and chain.call["seed"] == 7 and chain.call["step"] == 0
    assert chain.request is not None and chain.request["num_inference_steps"] == 5
    assert chain.to_dict()["call"]["trajectory"] == chain.call["trajectory"]
