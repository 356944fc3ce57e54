"""Noise recipes for every draw order (issue 47 item 2), on real tiny pipelines captured in this process: pixel
img2img (the VAE's ``latent_dist.sample(generator)`` draws before the noise does) and a list of generators (one per
image) pass validate and replay honestly, with the noise check true; another seed still fails the check."""

from __future__ import annotations

import functools

import pipeline_judging as pj
import pipes_tiny
import round3_pipes as r3

pipes_tiny.BUILDERS.setdefault("sd-img2img-pixels", r3.sd_img2img_pixels)
pipes_tiny.BUILDERS.setdefault("sd-img2img-pixels-2gens",
                               functools.partial(r3.sd_img2img_pixels, generators=2))
pipes_tiny.BUILDERS.setdefault("sd-generator-list", r3.sd_generator_list)


def _honest(tmp_path, name):
    import ikdata

    root = pj.capture(tmp_path / "ds", name)
    checked = ikdata.validate(root, deep=True)
    assert checked.ok, [str(p) for p in checked.problems]
    report = pj.replay(root, tmp_path / "report.json")
    return root, pj.trajectory_case(report)


def test_pixel_img2img_draws_the_vae_sample_first_and_passes(tmp_path):
    import json

    import ikdata
    from ikdata.diffusion.settings import Settings
    from ikdata.replay.runner import replay as run

    root, case = _honest(tmp_path, "sd-img2img-pixels")
    m = case["trajectory"]
    assert case["status"] == "passed", case.get("reason")
    assert m["noise"]["image"]["equal"] is True and m["noise"]["image"]["method"].startswith("add_noise")
    noise = json.loads(next((root / "trajectories").glob("*.jsonl")).read_text())["noise"]
    assert noise["check"] == {"image": True}
    assert [d["stream"] for d in noise["draws"]] == [None, "image"]  # the VAE's draw, then the noise, in order
    other = pj.trajectory_case(run(ikdata.open(root), reuse=False, report_path=tmp_path / "seed22.json",
                                   diffusion=Settings(seed=22)).report)  # the check still tells another seed
    assert other["status"] == "failed" and other["trajectory"]["noise"]["image"]["equal"] is False
    assert "initial noise of stream 'image' is not the recipe's for seed 22" in other["reason"]


def test_a_generator_list_draws_one_noise_per_image_and_passes(tmp_path):
    import json

    root, case = _honest(tmp_path, "sd-generator-list")
    assert case["status"] == "passed", case.get("reason")
    assert case["trajectory"]["noise"]["image"]["equal"] is True
    record = json.loads(next((root / "trajectories").glob("*.jsonl")).read_text())
    assert record["noise"]["check"] == {"image": True}
    assert record["noise"]["seeds"] == [31, 32]
    assert record["noise"]["streams"] == [{"name": "image", "shape": [2, 4, 8, 8]}]


def test_pixel_img2img_with_a_generator_per_image_passes(tmp_path):
    _, case = _honest(tmp_path, "sd-img2img-pixels-2gens")
    assert case["status"] == "passed", case.get("reason")
    assert case["trajectory"]["noise"]["image"]["equal"] is True
