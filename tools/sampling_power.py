"""The sampling judge's power and false-alarm rate, measured end to end (docs/sampling.md).

Each run is real: HF ``generate`` on the tiny Llama of ``tools/examples/generate_with_sampling.py``
(vocabulary 128) captured by ikdata, then replayed; or, for samplers HF cannot express (one uniform
shared by a batch, a seed reused across requests), a vLLM-style loop recorded at the statistics level.

    .venv/bin/python tools/sampling_power.py honest --runs 100          # false alarms at alpha 1e-3
    .venv/bin/python tools/sampling_power.py sweep --positions 256,512,1024,2048 --runs 5 [--bug NAME]
    .venv/bin/python tools/sampling_power.py sweep --smoke              # one small run of each bug

``honest``: each run draws its settings (temperature, top-k/top-p/min-p or typical-p, repetition
penalty) and prompts from its index, captures 512 positions and replays; a run whose verdict is
``failed`` is a false alarm. ``sweep``: for each bug, how many of ``--runs`` runs fail at each size.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "sampling_logits"))

NEW_TOKENS = 8


NO_CUTS = dict(top_k=0, top_p=1.0, min_p=None)
HF_BUGS = {
    # name: (settings, injection)
    "repetition penalty on the prompt only": (NO_CUTS, "prompt_only"),
    "typical-p on logits": (dict(NO_CUTS, typical_p=0.8), "typical_on_logits"),
    "begin_suppress_tokens undeclared": (dict(begin_suppress_tokens=list(range(3, 40))), None),
    "temperature twice": ({}, "temperature twice"),
    "repetition penalty twice": ({}, "repetition penalty twice"),
}
LOOP_BUGS = ("one uniform shared by a batch", "seed reused across requests")


@contextlib.contextmanager
def _inject(name):
    from bugs import injected
    from hf_runs import patched, typical_on_logits
    from transformers.generation import logits_process as lp

    if name is None:
        yield []
    elif name == "prompt_only":
        original = lp.RepetitionPenaltyLogitsProcessor.__call__
        with patched(lp.RepetitionPenaltyLogitsProcessor, "__call__",
                     lambda self, ids, scores: original(self, ids[:, :6], scores)):
            yield []
    elif name == "typical_on_logits":
        with patched(lp.TypicalLogitsWarper, "__call__", typical_on_logits):
            yield []
    else:
        with injected(name) as extra:
            yield extra


VERDICTS: dict[str, int] = {}  # every HF run's verdict, counted (passed / failed / too_small)


def hf_run(model, positions: int, seed: int, settings: dict, injection: str | None) -> bool:
    """One captured and replayed HF run; True when replay fails it."""
    from hf_runs import capture_run, replay_dir

    with tempfile.TemporaryDirectory() as tmp, _inject(injection) as extra:
        capture_run(model, Path(tmp) / "ds", seed=seed, processors=extra, rows=max(1, positions // NEW_TOKENS),
                    **settings)
        result = replay_dir(Path(tmp) / "ds")
        verdicts = [g["verdict"] for g in result.report.get("sampling") or ()]
        for verdict in verdicts:
            VERDICTS[verdict] = VERDICTS.get(verdict, 0) + 1
        return "failed" in verdicts


def loop_run(kind: str, positions: int, seed: int) -> bool:
    """One vLLM-style loop (64 rows per call, vocabulary 64, T 0.8, top-k 20, presence penalty) at the
    statistics level; True when the judge fails it."""
    import numpy as np

    from ikdata.sampling.distribution import Settings, kept_distribution
    from ikdata.sampling.groups import decide
    from ikdata.sampling.pipeline import Extras, process
    from ikdata.sampling.records import record_logits

    rows, vocab = 64, 64
    rng = np.random.default_rng(1000 + seed)
    cases = []
    for call in range(max(1, positions // rows)):
        if kind == "one uniform shared by a batch":
            uniforms = np.full(rows, rng.random())
            seeds = np.arange(rows) + call * rows
        elif kind == "seed reused across requests":
            uniforms = np.random.default_rng([seed, call // 2]).random(rows)
            seeds = np.arange(rows) + (call // 2) * rows
        else:
            uniforms, seeds = rng.random(rows), np.arange(rows) + call * rows
        context = rng.integers(0, vocab, (rows, 6))
        logits = (rng.standard_normal((rows, vocab)) * 2).astype(np.float32)
        extras = Extras.of(rows, context=context, generated=3, presence_penalty=0.5)
        settings = Settings.of(rows, temperature=0.8, top_k=20)
        probs = kept_distribution(process(logits, extras, "vllm"), settings, order="vllm")
        drawn = (uniforms[:, None] > probs.cumsum(axis=1)).sum(axis=1).clip(0, vocab - 1)
        record = record_logits(logits, settings, drawn, seeds, order="vllm", extras=extras, seed=call)
        cases.append({"uuid": f"call-{call:04d}", "definition": "d", "sampling": record})
    verdict = decide("d", cases, alpha=1e-3)
    return any(s[0] == "failed" for s in verdict.statuses.values())


def honest_settings(run: int) -> dict:
    """A run's settings, drawn from its index: cuts or typical-p, with or without a repetition penalty."""
    import random

    r = random.Random(run)
    settings = {"temperature": r.choice([0.6, 0.7, 0.9, 1.0]), "repetition_penalty": r.choice([1.0, 1.2, 1.3])}
    if r.random() < 0.25:
        settings.update(NO_CUTS, typical_p=r.choice([0.8, 0.9]))
    else:
        settings.update(top_k=r.choice([0, 20, 50]), top_p=r.choice([1.0, 0.9, 0.95]), min_p=r.choice([None, 0.05]))
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    honest = sub.add_parser("honest", help="false alarms of honest runs at alpha 1e-3")
    honest.add_argument("--runs", type=int, default=100)
    honest.add_argument("--positions", type=int, default=512)
    honest.add_argument("--loops", type=int, default=100, help="honest vLLM-style loops at the statistics level")
    sweep = sub.add_parser("sweep", help="runs caught per bug and size")
    sweep.add_argument("--positions", default="256,512,1024,2048")
    sweep.add_argument("--runs", type=int, default=5)
    sweep.add_argument("--bug", action="append", help="only these bugs (repeatable)")
    sweep.add_argument("--smoke", action="store_true", help="one run of each bug at 256 positions")
    args = parser.parse_args()

    from hf_runs import build_model

    model = build_model()
    started = time.perf_counter()
    if args.what == "honest":
        failed = [run for run in range(args.runs) if hf_run(model, args.positions, run, honest_settings(run), None)]
        print(f"honest HF runs: {len(failed)} of {args.runs} failed at alpha 1e-3 ({args.positions} positions each; "
              f"runs failed: {failed}; verdicts: {VERDICTS})", flush=True)
        loops = [run for run in range(args.loops) if loop_run("honest", 1024, run)]
        print(f"honest vLLM-style loops: {len(loops)} of {args.loops} failed at alpha 1e-3 (1,024 positions each)")
    else:
        sizes = [256] if args.smoke else [int(s) for s in args.positions.split(",")]
        runs = 1 if args.smoke else args.runs
        names = args.bug or [*HF_BUGS, *LOOP_BUGS]
        for name in names:
            caught = []
            for size in sizes:
                if name in HF_BUGS:
                    settings, injection = HF_BUGS[name]
                    hits = sum(hf_run(model, size, run, settings, injection) for run in range(runs))
                else:
                    hits = sum(loop_run(name, size, run) for run in range(runs))
                caught.append(f"{hits}/{runs} at {size}")
            print(f"{name}: caught " + ", ".join(caught), flush=True)
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
