"""The decode check: the engine's clip, decoded with PyAV, against the frames the reference decodes.

PSNR per frame on the luma of 8-bit RGB (BT.601; capped at 100 dB for identical frames), its mean and worst frame;
frame count and size compared; the audio stream, where both have one, compared by SNR after
aligning the codec's delay (AAC encoders prepend priming samples). A clip PyAV cannot open is a
:class:`~ikdata.core.errors.RecordError` naming the file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ikdata.core.errors import RecordError
from ikdata.diffusion.verdicts import AUDIO_SNR_DB, PSNR_CAP_DB, PSNR_MEAN_DB, PSNR_WORST_DB

MAX_AUDIO_LAG = 4096  # samples searched either way when aligning the codec's delay


def read_clip(path: str | Path) -> dict[str, Any]:
    """Frames ([F, H, W, 3] uint8), audio ([channels, samples] float) and its rate, from a media file.

    Raises:
        RecordError: PyAV cannot open or decode the file (named).
    """
    import av

    try:
        container = av.open(str(path))
    except (OSError, av.FFmpegError, ValueError) as exc:
        raise RecordError(f"PyAV cannot open the clip: {exc}; expected a video file (mp4, mkv, ...)",
                          path=str(path)) from exc
    try:
        if not container.streams.video:
            raise RecordError("the clip has no video stream", path=str(path))
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]
        audio, rate = None, None
        if container.streams.audio:
            container.seek(0)
            stream = container.streams.audio[0]
            rate = stream.rate
            chunks = [f.to_ndarray() for f in container.decode(stream)]
            if chunks:
                audio = np.concatenate([c if c.ndim == 2 else c[None] for c in chunks], axis=1).astype(np.float64)
    except av.FFmpegError as exc:
        raise RecordError(f"PyAV cannot decode the clip: {exc}", path=str(path)) from exc
    finally:
        container.close()
    return {"frames": np.stack(frames) if frames else np.zeros((0, 0, 0, 3), np.uint8), "audio": audio, "rate": rate}


def to_uint8(frames: np.ndarray) -> np.ndarray:
    """[0, 1] floats to 8-bit, rounded as the example writer rounds."""
    return np.clip(np.round(np.asarray(frames, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)


def luma(frame: np.ndarray) -> np.ndarray:
    """BT.601 luma of 8-bit RGB: what codec PSNR is measured on (chroma is subsampled by yuv420p)."""
    rgb = frame.astype(np.float64)
    return 0.299 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two 8-bit RGB frames, on their luma, capped at PSNR_CAP_DB."""
    mse = float(np.mean((luma(a) - luma(b)) ** 2))
    return PSNR_CAP_DB if mse == 0 else min(PSNR_CAP_DB, 10.0 * math.log10(255.0 ** 2 / mse))


def audio_snr(reference: np.ndarray, got: np.ndarray) -> tuple[float, int]:
    """(SNR in dB, lag in samples) of ``got`` against ``reference`` ([channels, samples]), at the lag that
    best aligns them within :data:`MAX_AUDIO_LAG`."""
    ref = reference.mean(axis=0) if reference.ndim == 2 else reference
    out = got.mean(axis=0) if got.ndim == 2 else got
    best = (-math.inf, 0)
    for lag in range(0, min(MAX_AUDIO_LAG, max(len(out) - 1, 0)) + 1):
        n = min(len(ref), len(out) - lag)
        if n <= 0:
            break
        r, o = ref[:n], out[lag:lag + n]
        noise = float(np.sum((r - o) ** 2))
        signal = float(np.sum(r ** 2))
        snr = PSNR_CAP_DB if noise == 0 else (10.0 * math.log10(signal / noise) if signal > 0 else -math.inf)
        if snr > best[0]:
            best = (min(snr, PSNR_CAP_DB), lag)
    return best


def check(reference: dict[str, Any], clip_path: str | Path, *, psnr_mean_db: float = PSNR_MEAN_DB,
          psnr_worst_db: float = PSNR_WORST_DB, audio_snr_db: float = AUDIO_SNR_DB) -> dict[str, Any]:
    """Compare a clip with the reference's decoded ``{"video", "audio"?, "sample_rate"?}``: the report's
    ``decode`` object (``passed`` and ``reason`` included).

    Raises:
        RecordError: the clip cannot be opened or decoded (named).
    """
    clip = read_clip(clip_path)
    ref = to_uint8(reference["video"])
    got = clip["frames"]
    result: dict[str, Any] = {
        "clip": str(clip_path), "frames_reference": int(ref.shape[0]), "frames_clip": int(got.shape[0]),
        "size_reference": [int(ref.shape[2]), int(ref.shape[1])] if ref.ndim == 4 else None,
        "size_clip": [int(got.shape[2]), int(got.shape[1])] if got.ndim == 4 and got.shape[0] else None,
        "thresholds": {"psnr_mean_db": psnr_mean_db, "psnr_worst_db": psnr_worst_db, "audio_snr_db": audio_snr_db,
                       "psnr_cap_db": PSNR_CAP_DB, "psnr_on": "BT.601 luma of 8-bit RGB"},
        "psnr_db": [], "psnr_mean_db": None, "psnr_worst_db": None, "worst_frame": None}
    problems = []
    if result["frames_reference"] != result["frames_clip"]:
        problems.append(f"{result['frames_clip']} frames in the clip, {result['frames_reference']} decoded by the "
                        "reference")
    if result["size_reference"] != result["size_clip"]:
        problems.append(f"frame size {result['size_clip']} in the clip, {result['size_reference']} decoded by the "
                        "reference")
    if not problems:
        values = [psnr(a, b) for a, b in zip(ref, got)]
        worst = int(np.argmin(values))
        result.update(psnr_db=values, psnr_mean_db=float(np.mean(values)), psnr_worst_db=values[worst],
                      worst_frame=worst)
        if result["psnr_mean_db"] < psnr_mean_db:
            problems.append(f"mean PSNR {result['psnr_mean_db']:.2f} dB < {psnr_mean_db} dB")
        if values[worst] < psnr_worst_db:
            problems.append(f"frame {worst}: PSNR {values[worst]:.2f} dB < {psnr_worst_db} dB")
    if reference.get("audio") is not None and clip["audio"] is not None:
        snr, lag = audio_snr(np.asarray(reference["audio"]), clip["audio"])
        result["audio"] = {"snr_db": snr, "lag_samples": lag, "rate_reference": reference.get("sample_rate"),
                           "rate_clip": clip["rate"]}
        if reference.get("sample_rate") and clip["rate"] and reference["sample_rate"] != clip["rate"]:
            problems.append(f"audio rate {clip['rate']} Hz in the clip, {reference['sample_rate']} Hz from the "
                            "reference")
        elif snr < audio_snr_db:
            problems.append(f"audio SNR {snr:.2f} dB < {audio_snr_db} dB")
    elif reference.get("audio") is not None:
        result["audio"] = {"snr_db": None, "note": "the reference decodes audio, the clip has no audio stream: "
                                                   "not compared"}
    result["passed"] = not problems
    result["reason"] = "; ".join(problems) or None
    return result


__all__ = ["audio_snr", "check", "luma", "psnr", "read_clip", "to_uint8"]
