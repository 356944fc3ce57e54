"""Constants vLLM computes upstream of its kernels are checked against the model's config: a wrong one fails the
capture, naming the layer and the config field (replaying the kernel with the same wrong constant would pass).

One engine run with two constants planted wrong after the model is loaded (tests/vllm/vllm_faults.py):
layer 0's attention scale 1/D instead of 1/sqrt(D), and the rotary cos/sin cache built with twice the base.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import ENGINE_TIMEOUT, engine_env
from test_vllm_seeds import SEEDED_PROGRAM


def test_a_wrong_attention_scale_and_rotary_base_fail_capture_naming_layer_and_config_field(
        vllm_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    command = [str(vllm_python.parent / "ikdata"), "capture", "--into", str(tmp_path / "captured"), "--adapter",
               "vllm_faults", "--", str(vllm_python), str(SEEDED_PROGRAM), str(tiny_model),
               str(tmp_path / "out.json"), "--mode", "seed42", "--prompts", "4", "--tokens", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=ENGINE_TIMEOUT, cwd=tmp_path,
                          env=engine_env(VLLM_FAULTS="scale_wrong,rope_base_twice", HOME=str(tmp_path)))
    said = done.stdout + done.stderr
    assert done.returncode == 1, said[-3000:]
    assert ("model.layers.0.self_attn.attn: attention scale 0.015625, the model's config implies 0.125 "
            "(head_dim 64)") in said, said[-3000:]
    assert "rotary cos/sin cache differs from the one rope_parameters.rope_theta 10000 gives" in said
    assert "model.layers.1.self_attn.attn: attention scale" not in said  # only the layer planted wrong
