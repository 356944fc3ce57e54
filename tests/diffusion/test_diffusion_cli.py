"""The user's path, end to end: capture the tiny video example with ``ikdata capture``, then validate --deep,
show, stats and lineage on a step, and ``ikdata noise`` agreeing with the recorded noise digest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ikdata(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ikdata", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="200"))


def test_capture_the_video_example_then_validate_show_stats_lineage_noise(tmp_path):
    into, clip = tmp_path / "clip", tmp_path / "clip.mp4"
    result = ikdata("capture", "--into", str(into), "--only", "rmsnorm_f32_h99991", "--", sys.executable,
                    str(ROOT / "tools" / "examples" / "tiny_video.py"), str(clip), "--steps", "4", "--seed", "7")
    assert result.returncode == 0, result.stderr
    assert clip.stat().st_size > 0
    [line] = (into / "trajectories" / "LTX2Pipeline.jsonl").read_text().splitlines()
    record = json.loads(line)
    short = record["trajectory"][:12]
    assert (f"trajectory {short} LTX2Pipeline complete: steps video 4/4, audio 4/4; noise is the recipe's (seed 7): "
            f"video yes, audio yes; see it with: ikdata show {into} {short}") in result.stdout

    validated = ikdata("validate", "--deep", str(into), "--json")
    assert validated.returncode == 0, validated.stdout
    assert json.loads(validated.stdout)["trajectories"] == 1

    shown = ikdata("show", str(into), short)
    assert shown.returncode == 0, shown.stderr
    assert f"trajectory {record['trajectory']}  LTX2Pipeline / FlowMatchEulerDiscreteScheduler" in shown.stdout
    assert "steps per stream: video=4/4, audio=4/4" in shown.stdout
    assert f"digest {record['noise']['digest']}" in shown.stdout
    assert "first latents are the recipe's noise: video=yes, audio=yes" in shown.stdout
    assert f"model: LTX2VideoTransformer3DModel (transformer) digest {record['model']['digest']}" in shown.stdout

    stats = ikdata("stats", str(into), "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["trajectories"] == {"trajectories": 1, "incomplete": 0, "steps": 8,
                                                        "per_pipeline": {"LTX2Pipeline": 1}, "models": 1,
                                                        "ids": [record["trajectory"]]}
    listed = ikdata("stats", str(into))  # the ids are listed once the capture summary has scrolled away
    assert listed.returncode == 0, listed.stderr
    assert f"trajectory ids: {record['trajectory'][:12]}" in listed.stdout

    traced = ikdata("lineage", str(into), f"{short}:2:audio", "--json")
    assert traced.returncode == 0, traced.stderr
    [chain] = json.loads(traced.stdout)
    assert chain["definition"] == "flow_euler_step_r3_f32"
    assert chain["capture"]["step"] == 2 and chain["capture"]["variant"] == "audio"
    assert chain["uses"] == [f"trajectory {short} step 2 audio (scheduler_step)"]
    step_shown = ikdata("show", str(into), f"{short}:2:audio", "--json")  # show takes lineage's keys (#27)
    assert step_shown.returncode == 0, step_shown.stderr
    assert json.loads(step_shown.stdout)["row"]["workload"]["uuid"] == chain["uuid"]

    shapes = [f"--shape={s['name']}=" + ",".join(map(str, s["shape"])) for s in record["noise"]["streams"]]
    noise = ikdata("noise", "7", *shapes, "--json")
    assert json.loads(noise.stdout)["digest"] == record["noise"]["digest"]
