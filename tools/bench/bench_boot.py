"""What the capture boot hook costs a Python process that never imports torch.

    python tools/bench/bench_boot.py [--runs 40] [--smoke]

It then times the CLI's own start-up (issue 26): ``ikdata --version``, ``ikdata --help`` and
``ikdata show DIR UUID``, ``ls``, ``lineage`` and ``stats`` on a 3-row dataset, interleaved with
``python -c pass`` in the same rounds (target for read-only commands: 0.15 s wall on a quiet machine).
``--smoke``: 3 runs each.

Interleaved runs of ``python -c pass`` three ways: capture off (``IKDATA_CAPTURE``
unset: the .pth line is one environ lookup), capture on (the .pth imports the
stdlib-only ``ikdata_boot`` and leaves a finder waiting for torch), and, for the
record, the boot line this project shipped before (``__import__('ikdata.capture.boot')``,
which runs ``ikdata/__init__.py``). Prints wall time (median and best, ms), the
modules each way loads, and ``-X importtime``'s own figure for ``ikdata_boot``.
Target (issue 10): standard library only, under 5 ms.

``ikdata_boot``'s bytecode is compiled first, as pip does when it installs a wheel: with
``PYTHONDONTWRITEBYTECODE`` set (these machines) nothing else would cache it, and every
process would compile the module again (about 2.5 ms more).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import py_compile
import statistics
import subprocess
import sys
import tempfile
import time

from _bench import load_average

OLD_LINE = ("import os; os.environ.get('IKDATA_CAPTURE') and "
            "__import__('ikdata.capture.boot').capture.boot.boot()")
MODULES = "import json, sys; print(json.dumps(sorted(sys.modules)))"


def _env(capture: bool, into: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("IKDATA_CAPTURE", "PYTHONPATH")}
    if capture:
        env["IKDATA_CAPTURE"] = json.dumps({"into": into})
    return env


def _wall(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - start


def _modules(code: str, env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\n" + MODULES], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def _importtime_us(module: str, env: dict[str, str]) -> int | None:
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], env=env, check=True,
                         capture_output=True, text=True).stderr
    for line in err.splitlines():  # "import time: self [us] | cumulative | imported package"
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == module:
            return int(parts[1])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="runs of each way, interleaved")
    parser.add_argument("--smoke", action="store_true", help="3 runs each: checks that the script works")
    parser.add_argument("--ikdata-path", default=None, help="put another checkout's ikdata first on PYTHONPATH "
                        "for the CLI figures (a 'before' measured with this script)")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 3
    spec = importlib.util.find_spec("ikdata_boot")
    if spec is None or spec.origin is None:
        sys.exit("ikdata_boot is not importable: install ikdata (pip install -e .) first")
    print(f"bytecode: {py_compile.compile(spec.origin)}")
    with tempfile.TemporaryDirectory() as tmp:
        into = os.path.join(tmp, "never-written")
        ways = {"off": ("pass", _env(False, into)), "on": ("pass", _env(True, into)),
                "old line, on": (OLD_LINE, _env(True, into))}
        for code, env in ways.values():  # warm the page cache and bytecode
            _wall(code, env)
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.runs):
            for name, (code, env) in ways.items():
                times[name].append(_wall(code, env))
        modules = {name: _modules(code if code != "pass" else "", env) for name, (code, env) in ways.items()}
        hook_us = _importtime_us("ikdata_boot", ways["on"][1])
        assert not os.path.exists(into), "a process that never imported torch created the dataset"
    base = set(modules["off"])
    median_off = statistics.median(times["off"])
    print(f"python -c pass, {args.runs} interleaved runs each  (load {load_average()})")
    print(f"{'way':<14} {'median ms':>10} {'best ms':>8} {'added ms':>9} {'modules':>8} {'added':>6}")
    for name in ways:
        median, best = statistics.median(times[name]) * 1e3, min(times[name]) * 1e3
        added = [m for m in modules[name] if m not in base]
        print(f"{name:<14} {median:>10.1f} {best:>8.1f} {median - median_off * 1e3:>9.1f} "
              f"{len(modules[name]):>8} {len(added):>6}")
    added_on = sorted(set(modules["on"]) - base)
    outside = [m for m in added_on if m.split(".")[0] not in sys.stdlib_module_names and m != "ikdata_boot"]
    print(f"capture on adds: {', '.join(added_on) or 'nothing'}; outside the standard library: "
          f"{', '.join(outside) or 'none'}")
    print(f"-X importtime, ikdata_boot cumulative: {hook_us} us")
    old_added = set(modules["old line, on"]) - base
    print(f"old line adds {len(old_added)} modules, e.g. "
          f"{', '.join(sorted(m for m in old_added if m.split('.')[0] in ('ikdata', 'orjson', 'jsonschema'))[:6])}")

    cli_startup(args.runs, args.ikdata_path)


def cli_startup(runs: int, ikdata_path: str | None = None) -> None:
    """Wall time of ``ikdata --version``, ``--help`` and ``show`` against ``python -c pass``, same rounds."""
    from pathlib import Path

    ikdata = str(Path(sys.executable).with_name("ikdata"))
    with tempfile.TemporaryDirectory() as tmp:
        # Bytecode as an installed package has it: these machines set PYTHONDONTWRITEBYTECODE, so an editable
        # checkout would be compiled from source by every process (most of its start-up); the first round
        # writes it into a private prefix (nothing is written into the checkout).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        if ikdata_path:
            env["PYTHONPATH"] = ikdata_path
        root = os.path.join(tmp, "ds")
        uuid = _three_rows(root)
        ways = {"python -c pass": [sys.executable, "-c", "pass"], "ikdata --version": [ikdata, "--version"],
                "ikdata --help": [ikdata, "--help"], "ikdata show": [ikdata, "show", root, uuid[:8]],
                "ikdata ls": [ikdata, "ls", root], "ikdata lineage": [ikdata, "lineage", root, uuid[:8]],
                "ikdata stats": [ikdata, "stats", root]}
        times: dict[str, list[float]] = {name: [] for name in ways}
        cpu: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(runs + 1):  # the first round warms the page cache and writes the bytecode
            for name, argv in ways.items():
                used = _children_cpu()
                start = time.perf_counter()
                subprocess.run(argv, capture_output=True, env=env)  # an older ikdata: --version exits 2
                times[name].append(time.perf_counter() - start)
                cpu[name].append(_children_cpu() - used)
    bare = statistics.median(times["python -c pass"][1:])
    bare_cpu = statistics.median(cpu["python -c pass"][1:])
    print(f"\nCLI start-up, {runs} interleaved runs each (load {load_average()}; CPU time is user+sys of the "
          "process, which a busy machine inflates less than wall time)")
    print(f"{'command':<18} {'median ms':>10} {'best ms':>8} {'x bare':>7} {'CPU ms':>7} {'x bare':>7}")
    for name, found in times.items():
        median, median_cpu = statistics.median(found[1:]), statistics.median(cpu[name][1:])
        print(f"{name:<18} {median * 1e3:>10.1f} {min(found[1:]) * 1e3:>8.1f} {median / bare:>7.2f} "
              f"{median_cpu * 1e3:>7.1f} {median_cpu / bare_cpu:>7.2f}")


def _three_rows(root: str) -> str:
    """A dataset of 3 small GEMM workloads with receipts (as the tests write it); the first uuid."""
    import numpy as np

    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    record = {"name": "gemm_bench_n4_k8", "op_type": "gemm",
              "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 4}, "K": {"type": "const", "value": 8}},
              "inputs": {"A": {"shape": ["M", "K"], "dtype": "float32"}, "W": {"shape": ["N", "K"], "dtype": "float32"}},
              "outputs": {"C": {"shape": ["M", "N"], "dtype": "float32"}},
              "reference": "import torch\n\ndef run(A, W):\n    return A @ W.T\n"}
    definition = Definition.from_dict(record, origin=USER, source="bench")
    writer = DatasetWriter(root)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    for i in range(3):
        a = rng.standard_normal((i + 1, 8)).astype(np.float32)
        writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, {"engine": "bench", "request_id": f"r{i}", "step": i})
    writer.commit()
    import ikdata

    return next(ikdata.open(root).workloads()).uuid


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
