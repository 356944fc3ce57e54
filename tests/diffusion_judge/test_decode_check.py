"""The decode check: the reference decodes the captured final latents; the engine's clip (PyAV) is compared
per frame by PSNR, frame count and size, and its audio by SNR. A clip re-encoded at very low quality fails,
a lossless one passes; a file PyAV cannot open is an error naming it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from judge_helpers import replay

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = f"{Path(__file__).parent / 'pipelines.py'}:ltx2"


def _engine_output(root: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """The frames ([F, H, W, 3] in [0, 1]) and audio the engine's pipeline returned (the trajectory's decoded)."""
    import ikdata
    from ikdata.core.records import TensorRef

    record = json.loads(next((root / "trajectories").glob("*.jsonl")).read_text().splitlines()[0])
    ds = ikdata.open(root)
    video = ds.store.get(TensorRef(record["decoded"]["video"]["path"])).numpy()[0]
    audio = ds.store.get(TensorRef(record["decoded"]["audio"]["path"])).float().numpy()[0]
    return video, audio, 16000


def _encode(path: Path, frames: np.ndarray, *, codec: str, options: dict, pix_fmt: str) -> Path:
    import av

    pixels = (np.clip(frames, 0.0, 1.0) * 255.0).round().astype(np.uint8)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=25, options=options)
        stream.width, stream.height, stream.pix_fmt = pixels.shape[2], pixels.shape[1], pix_fmt
        for image in pixels:
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def test_the_engines_own_clip_passes_with_psnr_and_audio_snr(reference_capture, tmp_path):
    sys.path.insert(0, str(ROOT / "tools" / "examples"))
    from tiny_video import write_mp4  # H.264 + AAC, as the example writes its clip

    video, audio, rate = _engine_output(reference_capture)
    clip = tmp_path / "clip.mp4"
    write_mp4(str(clip), video, 25, audio, rate)
    case = replay(reference_capture, tmp_path, pipeline=PIPELINE, clips={"": str(clip)})
    decode = case["trajectory"]["decode"]
    assert case["status"] == "passed", case.get("reason")
    assert decode["frames_reference"] == decode["frames_clip"] == video.shape[0]
    assert decode["size_reference"] == decode["size_clip"] == [video.shape[2], video.shape[1]]
    assert len(decode["psnr_db"]) == video.shape[0] and decode["psnr_worst_db"] >= decode["thresholds"]["psnr_worst_db"]
    assert decode["psnr_worst_db"] == min(decode["psnr_db"]) and decode["psnr_worst_db"] < 100
    assert decode["audio"]["snr_db"] >= decode["thresholds"]["audio_snr_db"]
    assert decode["thresholds"] == {"psnr_mean_db": 25.0, "psnr_worst_db": 20.0, "audio_snr_db": 10.0,
                                    "psnr_cap_db": 100.0, "psnr_on": "BT.601 luma of 8-bit RGB"}


def test_a_lossless_re_encode_passes_and_a_very_low_quality_one_fails(reference_capture, tmp_path):
    video, _, _ = _engine_output(reference_capture)
    lossless = _encode(tmp_path / "lossless.mkv", video, codec="ffv1", options={}, pix_fmt="bgr0")
    case = replay(reference_capture, tmp_path, pipeline=PIPELINE, clips={"": str(lossless)})
    decode = case["trajectory"]["decode"]
    assert case["status"] == "passed" and min(decode["psnr_db"]) > 90  # 8-bit rounding of a few pixels at most
    low = _encode(tmp_path / "low.mp4", video, codec="libx264", options={"crf": "51"}, pix_fmt="yuv420p")
    case = replay(reference_capture, tmp_path, pipeline=PIPELINE, clips={"": str(low)})
    decode = case["trajectory"]["decode"]
    assert case["status"] == "failed" and decode["passed"] is False
    assert "decode check: mean PSNR" in case["reason"] and decode["psnr_mean_db"] < 25.0
    assert all(s["passed"] for s in case["trajectory"]["steps"])  # the steps were right; the clip is not


def test_a_clip_with_a_frame_missing_fails_on_the_count(reference_capture, tmp_path):
    video, _, _ = _engine_output(reference_capture)
    short = _encode(tmp_path / "short.mkv", video[:-1], codec="ffv1", options={}, pix_fmt="bgr0")
    case = replay(reference_capture, tmp_path, pipeline=PIPELINE, clips={"": str(short)})
    assert case["status"] == "failed"
    assert f"{video.shape[0] - 1} frames in the clip, {video.shape[0]} decoded by the reference" in case["reason"]


def test_a_clip_pyav_cannot_open_is_an_error_naming_the_file(reference_capture, tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video at all" * 10)
    case = replay(reference_capture, tmp_path, pipeline=PIPELINE, clips={"": str(bad)})
    assert case["status"] == "failed"
    assert case["trajectory"]["decode"]["error"].startswith(str(bad))
    assert "PyAV cannot open the clip" in case["reason"] and str(bad) in case["reason"]


def test_without_pipeline_or_clip_the_decode_check_says_how_to_run_it(reference_capture, tmp_path):
    case = replay(reference_capture, tmp_path)
    assert "--pipeline" in case["trajectory"]["decode"]["skipped"] and case["status"] == "passed"


def test_psnr_is_capped_and_luma_based():
    from ikdata.diffusion.decode_check import psnr

    a = np.zeros((4, 4, 3), np.uint8)
    assert psnr(a, a) == 100.0
    b = a.copy()
    b[..., 0] = 10  # red only: luma moves by 0.299*10
    assert psnr(a, b) == pytest.approx(10 * np.log10(255.0 ** 2 / (2.99 ** 2)))
