"""A tiny LTX-2 text-to-video (and audio) run: built from config with random weights, on the CPU, in seconds.

    python tools/examples/tiny_video.py [OUT.mp4] [--seed N] [--steps N]
    ikdata capture --into runs/clip -- python tools/examples/tiny_video.py runs/clip.mp4

Nothing is downloaded: the transformer, text connectors, video and audio VAEs and the vocoder are
built from small configs with seeded random weights, and the text embeddings are passed directly
(no text encoder). The noise is the recipe ``cpu-randn-float32/1``: a CPU generator seeded with
``--seed``, drawn by the pipeline itself (video first, then audio), so ``ikdata noise`` can reproduce
it. The decoded frames and the audio are written to an mp4 through PyAV (H.264 video, AAC audio).
The program knows nothing about ikdata: run it under ``ikdata capture`` to record its trajectory.
"""

from __future__ import annotations

import argparse
import time


def build(*, layers: int = 2, heads: int = 2, head_dim: int = 8):
    """The tiny LTX2Pipeline (random weights from fixed seeds)."""
    import torch
    from diffusers import (AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler,
                           LTX2Pipeline, LTX2VideoTransformer3DModel)
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    caption, text_layers = 32, 2
    torch.manual_seed(0)
    transformer = LTX2VideoTransformer3DModel(
        in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=heads,
        attention_head_dim=head_dim, cross_attention_dim=heads * head_dim, audio_in_channels=4,
        audio_out_channels=4, audio_num_attention_heads=2, audio_attention_head_dim=4, audio_cross_attention_dim=8,
        num_layers=layers, qk_norm="rms_norm_across_heads", caption_channels=caption, rope_double_precision=False,
        rope_type="split")
    connectors = LTX2TextConnectors(
        caption_channels=caption, text_proj_in_factor=text_layers + 1, video_connector_num_attention_heads=4,
        video_connector_attention_head_dim=8, video_connector_num_layers=1,
        video_connector_num_learnable_registers=None, audio_connector_num_attention_heads=4,
        audio_connector_attention_head_dim=8, audio_connector_num_layers=1,
        audio_connector_num_learnable_registers=None, connector_rope_base_seq_len=32, rope_theta=10000.0,
        rope_double_precision=False, causal_temporal_positioning=False, rope_type="split")
    vae = AutoencoderKLLTX2Video(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8,), decoder_block_out_channels=(8,),
        layers_per_block=(1,), decoder_layers_per_block=(1, 1), spatio_temporal_scaling=(True,),
        decoder_spatio_temporal_scaling=(True,), decoder_inject_noise=(False, False), downsample_type=("spatial",),
        upsample_residual=(False,), upsample_factor=(1,), timestep_conditioning=False, patch_size=1, patch_size_t=1,
        encoder_causal=True, decoder_causal=False)
    vae.use_framewise_encoding = False
    vae.use_framewise_decoding = False
    audio_vae = AutoencoderKLLTX2Audio(
        base_channels=4, output_channels=2, ch_mult=(1,), num_res_blocks=1, attn_resolutions=None, in_channels=2,
        resolution=32, latent_channels=2, norm_type="pixel", causality_axis="height", dropout=0.0,
        mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160, is_causal=True, mel_bins=8)
    vocoder = LTX2Vocoder(
        in_channels=16, hidden_channels=32, out_channels=2, upsample_kernel_sizes=[4, 4], upsample_factors=[2, 2],
        resnet_kernel_sizes=[3], resnet_dilations=[[1, 3, 5]], leaky_relu_negative_slope=0.1,
        output_sampling_rate=16000)
    pipe = LTX2Pipeline(transformer=transformer, vae=vae, audio_vae=audio_vae,
                        scheduler=FlowMatchEulerDiscreteScheduler(), text_encoder=None, tokenizer=None,
                        connectors=connectors, vocoder=vocoder)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def call_kwargs(*, seed: int, steps: int, size: int = 32, frames: int = 9, fps: int = 25) -> dict:
    """The call: embeddings passed directly, CFG, the noise drawn by the pipeline from a seeded CPU generator."""
    import torch

    g = torch.Generator("cpu").manual_seed(1234)  # the "text": fixed random embeddings
    embeds = torch.randn(1, 16, 32 * 3, generator=g)
    mask = torch.ones(1, 16, dtype=torch.long)
    return dict(prompt_embeds=embeds, prompt_attention_mask=mask, negative_prompt_embeds=torch.zeros_like(embeds),
                negative_prompt_attention_mask=mask, generator=torch.Generator("cpu").manual_seed(seed),
                num_inference_steps=steps, guidance_scale=3.0, height=size, width=size, num_frames=frames,
                frame_rate=float(fps), stg_scale=0.0, audio_stg_scale=0.0, modality_scale=1.0,
                audio_modality_scale=1.0, output_type="np", return_dict=False)


def write_mp4(path: str, frames, fps: int, audio=None, sample_rate: int | None = None) -> None:
    """Frames [F, H, W, 3] in [0, 1] (and audio [channels, samples]) to an mp4 through PyAV."""
    import av
    import numpy as np

    pixels = (np.clip(frames, 0.0, 1.0) * 255.0).round().astype(np.uint8)
    with av.open(path, mode="w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = pixels.shape[2], pixels.shape[1], "yuv420p"
        sound = None
        if audio is not None and sample_rate:
            sound = container.add_stream("aac", rate=sample_rate)
            sound.layout = "stereo" if audio.shape[0] == 2 else "mono"
        for image in pixels:
            for packet in video.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        if sound is not None:
            samples = np.ascontiguousarray(np.clip(audio, -1.0, 1.0).astype(np.float32))
            frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout=sound.layout.name)
            frame.sample_rate = sample_rate
            for packet in sound.encode(frame):
                container.mux(packet)
            for packet in sound.encode():
                container.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="tiny_video.mp4", help="the mp4 to write")
    parser.add_argument("--seed", type=int, default=42, help="seed of the CPU generator the noise is drawn from")
    parser.add_argument("--steps", type=int, default=8, help="denoising steps")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # tiny model: threads only contend
    started = time.monotonic()
    pipe = build()
    video, audio = pipe(**call_kwargs(seed=args.seed, steps=args.steps))
    rate = int(pipe.vocoder.config.output_sampling_rate)
    write_mp4(args.out, video[0], 25, audio[0].float().numpy() if audio is not None else None, rate)
    print(f"wrote {args.out}: {video.shape[1]} frames {video.shape[3]}x{video.shape[2]}, "
          f"audio {tuple(audio.shape) if audio is not None else None} at {rate} Hz, seed {args.seed}, "
          f"{args.steps} steps, {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
