"""Benchmark: judging 100,000 sampled positions over a 32k vocabulary vs one numpy softmax of the same logits.

For each chunk of rows the logits are generated (LLM-like: a long Gaussian tail and a
few strong tokens per row), then timed in the same run:

* baseline: a numpy softmax over the chunk (max, subtract, exp, sum, divide): the least
  any judge must do, since the kept distribution needs every token's weight;
* ``ikdata.sampling.distribution.judge_logits`` on the same chunk: the kept set under every cut
  order, the exclusions, the outside check and the randomized PIT of each draw;
* ``ikdata.sampling.pipeline.process`` on the same chunk: a repetition penalty over a 64-token
  context and a presence penalty over its last 16 tokens, in the vLLM order (what the judge adds
  before the cuts when a request declares penalties);
* ``ikdata.sampling.records.record_logits`` on the same chunk with those penalties: what replay does
  per workload (penalties, cuts, the PIT, the aimed tests' strata and the independence test's
  token-order PITs, each a pass over the kept tokens of every judged row).

Settings vary per row the way a server's requests do (temperature 0 / 0.6 / 0.7 / 1.0,
top_k off / 20 / 50, top_p off / 0.8 / 0.9 / 0.95, min_p off / 0.05). The generated
logits never exist all at once (100,000 x 32,000 float32 is 12.8 GB).

Usage:
    .venv/bin/python tools/bench/sampling_judge.py [--positions 100000] [--vocab 32000] [--chunk 2000] [--smoke]

``--smoke``: 2,000 positions over 4,000 tokens (a few seconds), the same ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import load_average  # noqa: E402

from ikdata.sampling.distribution import Settings, judge_logits  # noqa: E402
from ikdata.sampling.pipeline import Extras, process  # noqa: E402
from ikdata.sampling.records import record_logits  # noqa: E402


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def make_chunk(rng: np.random.Generator, rows: int, vocab: int) -> tuple[np.ndarray, Settings, np.ndarray]:
    x = rng.standard_normal((rows, vocab), dtype=np.float32) * 2.0
    strong = rng.integers(0, vocab, (rows, 8))
    x[np.arange(rows)[:, None], strong] += rng.uniform(6.0, 14.0, (rows, 8)).astype(np.float32)
    settings = Settings.of(rows, temperature=rng.choice([0.0, 0.6, 0.7, 1.0], rows),
                           top_k=rng.choice([0, 20, 50], rows), top_p=rng.choice([1.0, 0.8, 0.9, 0.95], rows),
                           min_p=rng.choice([0.0, 0.05], rows))
    drawn = x.argmax(axis=1)  # the verdict does not change the work done
    return x, settings, drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=100_000)
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--chunk", type=int, default=2000)
    parser.add_argument("--smoke", action="store_true", help="2,000 positions x 4,000 tokens")
    args = parser.parse_args()
    if args.smoke:
        args.positions, args.vocab = 2000, 4000
    rng = np.random.default_rng(0)
    base = judge = penalties = record = 0.0
    judged = excluded = 0
    for start in range(0, args.positions, args.chunk):
        rows = min(args.chunk, args.positions - start)
        x, settings, drawn = make_chunk(rng, rows, args.vocab)
        t0 = time.perf_counter()
        softmax(x)
        t1 = time.perf_counter()
        found = judge_logits(x, settings, drawn, seed=start)
        t2 = time.perf_counter()
        extras = Extras.of(rows, context=rng.integers(0, args.vocab, (rows, 64)), generated=16,
                           repetition_penalty=1.2, presence_penalty=0.5)
        t3 = time.perf_counter()
        process(x, extras, "vllm")
        t4 = time.perf_counter()
        record_logits(x, settings, drawn, np.arange(rows) + start, order="vllm", extras=extras, seed=start)
        record += time.perf_counter() - t4
        penalties += t4 - t3
        base += t1 - t0
        judge += t2 - t1
        judged += int((found.status == 0).sum())
        excluded += int((found.status != 0).sum())
    print(f"positions {args.positions:,} x vocab {args.vocab:,} (load {load_average()})")
    print(f"  numpy softmax (baseline) {base:8.2f} s")
    print(f"  judge_logits             {judge:8.2f} s   ratio {judge / base:.2f}x (target <= 3x)")
    print(f"  penalties (pipeline)     {penalties:8.2f} s   ratio {penalties / base:.2f}x")
    print(f"  record_logits (replay)   {record:8.2f} s   ratio {record / base:.2f}x (penalties, aimed, independence)")
    print(f"  judged {judged:,}, excluded {excluded:,}")


if __name__ == "__main__":
    main()
