"""Capture operator workloads from an SGLang server: launch it under ``ikdata capture``, drive requests, stop it.

THIS SCRIPT CANNOT RUN ON THE DEVELOPMENT MACHINE: it needs a GPU, SGLang and a
model. It was written from SGLang's documented command line and has not been
run here; treat it as a worked example to adapt.

What it does:

1. starts ``python -m sglang.launch_server ... --disable-cuda-graph`` under
   ``ikdata capture --into DIR --request-file FILE --step-module CLASS --steps LIST``;
   the capture boot hook (``ikdata_capture.pth``) runs in the server and in every
   scheduler/worker process it spawns, because they inherit ``IKDATA_CAPTURE``;
2. for each prompt, replaces the request file atomically
   (:func:`ikdata.capture.write_request_file`) with the request id and the steps
   to capture, then sends the request over HTTP and waits for the answer;
3. removes the request file (nothing is captured while it is absent, so warm-up
   and health checks are not), sends SIGTERM to the server, and lets
   ``ikdata capture`` flush, commit the manifest and print what it captured.

Limits you must know:

- CUDA graphs replay recorded kernels without running Python, so hooks never
  fire inside a captured graph: run the server in eager mode
  (SGLang ``--disable-cuda-graph``; for vLLM, ``enforce_eager=True``). Regions
  compiled by ``torch.compile`` run from their graph and are not captured
  either: do not enable SGLang's torch.compile for capture runs.
- Engines call their own fused kernels (paged/ragged attention backends, fused
  RMSNorm + residual, fused MoE, quantised GEMMs). The built-in adapters see only
  ``F.linear`` / ``torch.mm`` / ``torch.matmul`` (2-D), ``F.scaled_dot_product_attention``,
  ``F.rms_norm``, ``F.layer_norm`` and a few RMSNorm modules. For anything else
  write an adapter module with ``install(api)`` and pass ``--adapter``; choosing
  ``--attention-backend torch_native`` makes SGLang's attention go through SDPA.
- With tensor parallelism every rank captures its own shard (each process is
  recorded in its receipts); shapes are per-rank.

Example:
    python tools/launch_sglang_capture.py --model-path Qwen/Qwen3-0.6B --into runs/qwen3 \\
        --step-module Qwen3ForCausalLM --steps 0,1,8 --prompt "Why is the sky blue?"
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def wait_healthy(url: str, server: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with status {server.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise TimeoutError(f"the server was not healthy after {timeout:.0f} s")


def generate(url: str, prompt: str, max_new_tokens: int) -> dict:
    body = json.dumps({"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}})
    request = urllib.request.Request(url + "/generate", data=body.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--model-revision", default=None)
    parser.add_argument("--into", required=True, type=Path)
    parser.add_argument("--step-module", required=True, help="Top-level model class, e.g. Qwen3ForCausalLM.")
    parser.add_argument("--steps", default="0,1", help="Forward passes of each request to capture.")
    parser.add_argument("--only", default=None)
    parser.add_argument("--max-bytes", default="4GiB")
    parser.add_argument("--prompt", action="append", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--adapter", action="append", default=[])
    args = parser.parse_args()

    from ikdata.capture import write_request_file

    request_file = Path(tempfile.mkdtemp(prefix="ikdata-sglang-")) / "request.json"
    capture = [sys.executable, "-c", "from ikdata.cli import main; main()", "capture", "--into", str(args.into),
               "--request-file", str(request_file), "--step-module", args.step_module, "--steps", args.steps,
               "--max-bytes", args.max_bytes, "--engine", "sglang", "--model", args.model_path]
    if args.model_revision:
        capture += ["--model-revision", args.model_revision]
    if args.only:
        capture += ["--only", args.only]
    for adapter in args.adapter:
        capture += ["--adapter", adapter]
    server = [sys.executable, "-m", "sglang.launch_server", "--model-path", args.model_path, "--host", "127.0.0.1",
              "--port", str(args.port), "--disable-cuda-graph", "--attention-backend", "torch_native"]
    if args.model_revision:
        server += ["--revision", args.model_revision]
    url = f"http://127.0.0.1:{args.port}"
    process = subprocess.Popen([*capture, "--", *server], start_new_session=True)
    try:
        wait_healthy(url, process, timeout=1200)
        for index, prompt in enumerate(args.prompt or ["Why is the sky blue?"]):
            steps = [int(s) for s in args.steps.split(",")]
            write_request_file(str(request_file), f"req-{index}", capture_steps=steps, prompt=prompt)
            answer = generate(url, prompt, args.max_new_tokens)
            print(f"req-{index}: {answer.get('text', '')[:80]!r}", flush=True)
        request_file.unlink(missing_ok=True)
    finally:
        # SIGTERM reaches ikdata capture, which forwards it to the server; the server's processes flush
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    print(f"done; check the dataset with: ikdata validate --deep {args.into}")


if __name__ == "__main__":
    main()
