"""A hand-written denoising loop (a UNet and ``scheduler.step`` in a for-loop, outside any pipeline call) is not
recorded as a trajectory yet; capture says so and exits 1, naming how many steps of which scheduler it could not
tie to a pipeline. Steps made inside a pipeline call (captured or not) are never counted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOOP = """
import sys
sys.path.insert(0, {tests!r})
import torch
import tiny

torch.set_num_threads(1)
pipe, kwargs = tiny.ddim(steps=3)
if {with_loop}:
    sched, unet = pipe.scheduler, pipe.unet
    sched.set_timesteps(3)
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    for t in sched.timesteps:
        with torch.no_grad():
            x = sched.step(unet(x, t).sample, t, x).prev_sample
pipe(**kwargs)
"""


def _capture(tmp_path: Path, with_loop: bool) -> subprocess.CompletedProcess:
    script = tmp_path / "loop.py"
    script.write_text(LOOP.format(tests=str(ROOT / "tests" / "diffusion"), with_loop=with_loop))
    return subprocess.run([sys.executable, "-m", "ikdata", "capture", "--into", str(tmp_path / "ds"), "--only",
                           "rmsnorm_f32_h99991", "--", sys.executable, str(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.parametrize("with_loop", [True, False], ids=["loop-and-pipeline", "pipeline-only"])
def test_steps_outside_a_pipeline_call_are_named_and_fail_the_capture(with_loop, tmp_path):
    result = _capture(tmp_path, with_loop)
    message = "saw 3 scheduler step(s) it could not tie to a pipeline (DDIMScheduler: 3)"
    assert (message in result.stderr) == with_loop, result.stderr
    assert result.returncode == (1 if with_loop else 0), result.stderr
    assert len(list((tmp_path / "ds" / "trajectories").glob("*.jsonl"))) == 1  # the pipeline call is recorded
