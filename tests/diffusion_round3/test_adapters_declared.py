"""Models as loaded (issue 47 item 5): an IP-Adapter left in place is not judged silently. Its image projection,
which runs inside the UNet at every step, is counted in the trajectory's ``unjudged`` and named by the case, and
replay says why the denoiser is not judged (IP-Adapter attention processors are not rebuilt) instead of a config
mismatch."""

from __future__ import annotations

import json

import pipeline_judging as pj
import pipes_tiny
import round3_pipes as r3

pipes_tiny.BUILDERS.setdefault("sd-ip-adapter", r3.sd_ip_adapter)


def test_an_ip_adapter_is_counted_and_its_denoiser_declared_not_judged(tmp_path):
    root = pj.capture(tmp_path / "ds", "sd-ip-adapter", folder=tmp_path / "ip-adapter")
    record = json.loads(next((root / "trajectories").glob("*.jsonl")).read_text())
    assert record["unjudged"] == [{"component": "unet.encoder_hid_proj", "class": "MultiIPAdapterImageProjection",
                                   "calls": 3, "steps": [0, 1, 2]}]
    case = pj.trajectory_case(pj.replay(root, tmp_path / "report.json"))
    assert case["status"] == "error"
    assert "captured with an IP-Adapter loaded" in case["reason"] and "not judged" in case["reason"]
    assert case["trajectory"]["unjudged"] == ["MultiIPAdapterImageProjection (unet.encoder_hid_proj) called 3 "
                                              "time(s), at step(s) 0, 1, 2"]
