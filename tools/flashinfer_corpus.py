"""Real FlashInfer recorder dumps and trace definitions, written by FlashInfer's own code on CPU.

Small CPU engines (each computes its template's reference) are decorated with
``@flashinfer_api(trace=TEMPLATE)`` and called in a child process with
``FLASHINFER_LOGLEVEL=10 FLASHINFER_DUMP_DIR=... FLASHINFER_TRACE_DUMP=1``: repeated and
varied calls, one deliberately wrong engine (rmsnorm 1% off, bf16, hidden size 48).

    python tools/flashinfer_corpus.py OUT [--format safetensors|torch|both]
    python tools/flashinfer_corpus.py --count     # the closing-note figures over every template

OUT/<format>/dumps holds the recorder's folders, OUT/<format>/definitions the trace definitions.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

# (template attribute in flashinfer.trace.templates.<module>, module, var axis sizes per call, const overrides)
CORPUS = [
    ("rmsnorm_trace", "norm", [1, 2, 2, 3], {"hidden_size": 64}),
    ("silu_and_mul_trace", "activation", [1, 3, 3], {"hidden_size": 64}),
    ("gelu_tanh_and_mul_trace", "activation", [2, 5], {"hidden_size": 32}),
    ("mm_bf16_trace", "gemm", [1, 4, 4], {"N": 16, "K": 32}),
    ("softmax_trace", "sampling", [2, 3], {"vocab_size": 64}),
]
WRONG = ("rmsnorm_trace", "norm", [2, 3], {"hidden_size": 48})


def _engine(name: str, template, params: list[str], wrong: bool = False):
    """A CPU engine named ``name`` with the API's parameters; it returns the reference's outputs."""
    inputs = {json_key: (d.param or json_key) for json_key, d in template.inputs.items()}

    def compute(values: dict):
        ref = template.reference
        accepted = inspect.signature(ref).parameters
        kwargs = {k: values[p] for k, p in inputs.items() if p in values and k in accepted}
        out = ref(**kwargs)
        if wrong:
            out = (out.float() * 1.01).to(out.dtype)
        return out

    source = f"def {name}({', '.join(params)}):\n    return _compute(dict({', '.join(f'{p}={p}' for p in params)}))\n"
    namespace = {"_compute": compute, "__name__": "corpus_engines"}
    exec(source, namespace)
    return namespace[name]


def _child(out: Path) -> None:
    import torch

    from ikdata.flashinfer import loader

    api = loader.submodule("api_logging")
    for attr, module, sizes, consts, wrong in [(*c, False) for c in CORPUS] + [(*WRONG, True)]:
        template = getattr(loader.submodule(f"trace.templates.{module}"), attr)
        var = [a for a, m in template.axes.items() if type(m).__name__ == "Var"]
        init_params = inspect.signature(template.init).parameters
        name = ("wrong_" if wrong else "") + attr.removesuffix("_trace")
        engine = None
        for call, size in enumerate(sizes):
            kwargs = {a: size for a in var if a in init_params}
            kwargs.update({k: v for k, v in consts.items() if k in init_params})
            values = template.init(device="cpu", seed=size, **kwargs)
            params = list(values)
            if engine is None:
                engine = api.flashinfer_api(trace=template)(_engine(name, template, params, wrong))
            first, rest = params[0], params[1:]
            engine(values[first], **{p: values[p] for p in rest})  # arg_0 and kwarg_<name>
    del torch


def generate(out: Path, fmt: str = "both") -> dict[str, Path]:
    """Write the corpus under ``out/<format>/``; returns format -> that folder."""
    made = {}
    for name in (["safetensors", "torch"] if fmt == "both" else [fmt]):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "FLASHINFER_LOGLEVEL": "10", "FLASHINFER_DUMP_DIR": str(folder / "dumps"),
               "FLASHINFER_TRACE_DUMP": "1", "FLASHINFER_TRACE_DUMP_DIR": str(folder / "definitions"),
               "FLASHINFER_LOGDEST": str(folder / "log.txt"),
               "FLASHINFER_DUMP_SAFETENSORS": "1" if name == "safetensors" else "0", "PYTHONWARNINGS": "ignore"}
        subprocess.run([sys.executable, __file__, "--child", str(folder)], env=env, check=True)
        made[name] = folder
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--format", default="both", choices=["both", "safetensors", "torch"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help="count FlashInfer's templates: verbatim, replay, refused")
    args = parser.parse_args()
    if args.child:
        _child(Path(args.out))
    elif args.count:
        from ikdata.flashinfer.census import census

        print(json.dumps(census(progress=lambda line: print(line, file=sys.stderr, flush=True)), indent=2))
    else:
        for fmt, folder in generate(Path(args.out or "flashinfer-corpus"), args.format).items():
            print(f"{fmt}: {folder}/dumps, {folder}/definitions")


if __name__ == "__main__":
    main()
