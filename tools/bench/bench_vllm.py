"""vLLM generate throughput under ikdata capture, against the same program bare, measured in the same run.

    .venv/bin/python tools/bench/bench_vllm.py [--prompts 32] [--tokens 32] [--smoke]

Full run (needs ``make vllm-venv``; two engine starts, four with ``--all``, 2-4 minutes each on 2 shared
cores): a tiny random Llama (tools/vllm_tiny_model.py) generates with vLLM's offline ``LLM`` (enforce_eager),
timed inside the program after a warm-up, so engine start-up is not counted: four generate() calls, the
first (where the default selection spends its bounded budget of records) and the best of the other three (the
steady state once the budget is spent and the writer has caught up) reported apart; each ratio is against
bare in the same run:

    bare                      the program alone
    default capture           ikdata capture (its default selection: operators once per key, a bounded spread
                              of sampler rows)
    nothing selected          ikdata capture --only conv (hooks installed, no call matches; --all)
    sampler only              ikdata capture --only sampling (--all)

``--smoke`` starts no engine (a start takes 1-2 minutes): it times the per-row cost of recording a sampler
row (ikdata.engines.sampler_rows.record_row into a dataset) against torch sampling the same rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from _bench import load_average  # noqa: E402

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
PROGRAM = '''
import json, sys, time

RUNS = 4


def main():
    from vllm import LLM, SamplingParams
    model, prompts, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    llm = LLM(model=model, enforce_eager=True, dtype="float32", max_model_len=256, max_num_seqs=64, seed=0)
    params = SamplingParams(temperature=0.8, top_k=40, max_tokens=tokens, ignore_eos=True)
    texts = [f"prompt {i}" for i in range(prompts)]
    llm.generate(texts[:2], SamplingParams(max_tokens=4))  # warm-up
    runs = []
    for _ in range(RUNS):
        start = time.perf_counter()
        llm.generate(texts, params, use_tqdm=False)
        runs.append(time.perf_counter() - start)
    print("RESULT " + json.dumps({"tokens": prompts * tokens, "runs": runs}))


if __name__ == "__main__":
    main()
'''
MODES = (("bare", None), ("default capture", []), ("nothing selected", ["--only", "conv"]),
         ("sampler only", ["--only", "sampling"]))


def _engine_run(folder: Path, model: Path, capture: list[str] | None, prompts: int,
                tokens: int) -> tuple[float, float]:
    """(throughput of the first timed generate, the best of the later ones), tokens/s."""
    program = folder / "bench_program.py"
    program.write_text(PROGRAM)
    command = [str(VLLM_PYTHON), str(program), str(model), str(prompts), str(tokens)]
    if capture is not None:
        into = Path(tempfile.mkdtemp(dir=folder)) / "captured"
        command = [str(VLLM_PYTHON.parent / "ikdata"), "capture", "--into", str(into), *capture, "--", *command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("IKDATA_")}
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env, cwd=folder)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"bench_vllm: {' '.join(command[:4])} ... gave no result (exit {done.returncode}):\n"
                 f"{done.stderr[-2000:]}")
    result = json.loads(line[len("RESULT "):])
    runs = result["runs"]
    return result["tokens"] / runs[0], result["tokens"] / min(runs[1:])


def full(prompts: int, tokens: int, modes: int = 2) -> None:
    if not VLLM_PYTHON.exists():
        sys.exit("bench_vllm: no .venv-vllm here; build it with `make vllm-venv`")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = folder / "tiny-llama"
        subprocess.run([str(VLLM_PYTHON), str(ROOT / "tools" / "vllm_tiny_model.py"), str(model)], check=True,
                       capture_output=True)
        print(f"vLLM generate, {prompts} prompts x {tokens} tokens, tiny Llama (load {load_average()})")
        print("  mode                     first generate        later generates (best of 3)")
        bare = None
        for name, capture in MODES[:modes]:
            first, later = _engine_run(folder, model, capture, prompts, tokens)
            bare = bare or (first, later)
            print(f"  {name:24s} {first:9.1f} tok/s {first / bare[0]:5.2f}x   {later:9.1f} tok/s "
                  f"{later / bare[1]:5.2f}x bare", flush=True)


def smoke(rows: int = 64, vocab: int = 32000) -> None:
    import torch

    from ikdata.capture.boot import install, uninstall
    from ikdata.capture.config import CaptureConfig
    from ikdata.engines.sampler_rows import RowSettings, SampledRow, record_row

    logits = torch.randn(rows, vocab)
    start = time.perf_counter()
    for i in range(rows):
        torch.multinomial(torch.softmax(logits[i] / 0.8, dim=-1), 1)
    sampled = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        cap = install(CaptureConfig(into=str(Path(tmp) / "d")))
        try:
            start = time.perf_counter()
            for i in range(rows):
                row = SampledRow(f"r{i}", 0, (1, 2, 3), (), RowSettings(temperature=0.8, seed=i))
                record_row(cap, logits[i], row, 7, operation="bench", order="vllm")
            recorded = time.perf_counter() - start
            cap.flush()
        finally:
            uninstall()
    print(f"sampler rows, {rows} x vocab {vocab} (load {load_average()}): torch sampling "
          f"{sampled * 1e3 / rows:.3f} ms/row, recording {recorded * 1e3 / rows:.3f} ms/row on the engine thread "
          f"({recorded / sampled:.1f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--smoke", action="store_true", help="no engine: the per-row recording cost alone")
    parser.add_argument("--all", action="store_true", help="also --only conv (nothing selected) and --only sampling")
    args = parser.parse_args()
    if args.smoke:
        smoke()
    else:
        full(args.prompts, args.tokens, len(MODES) if args.all else 2)


if __name__ == "__main__":
    main()
