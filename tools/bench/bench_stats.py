"""Benchmark: opening a 100,000-row dataset and printing its stats vs bare ``json.loads``.

Builds (once, cached) an ikdata dataset of 100,000 workload rows and 100,000
receipts referencing 40,024 small blobs (activations and outputs drawn from pools
of 20,000 each, 24 shared weights), then measures in the same run:

* baseline: reading every JSONL file and ``json.loads`` on each of the same lines
  (stdlib, one thread): the least any reader must do;
* ``ikdata index DIR`` (once: builds the index, with what stats prints);
* ``ikdata stats DIR`` in-process answered from that index (open the dataset, refresh the index,
  a few aggregate queries, print the table), stdout discarded;
* ``ikdata stats DIR`` in-process with the index set aside: reading every row and scanning the blob
  folder (open, count, scan, print), which must print the same text;
* the CLI as a subprocess, which adds interpreter and import start-up.

``--million``: the 1,000,000-row dataset of ``scale_gen.py`` (1M rows + 1M receipts, 250,008 blobs;
generating it takes ~70 s, once) instead.

Usage:
    .venv/bin/python tools/bench/bench_stats.py [--rows 100000 | --million] [--dir PATH] [--repeat 3] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_validate import DEFINITION, NAME, _blob  # noqa: E402  (same definition and blob writer)
from _bench import best_of, load_average  # noqa: E402  (tools/bench is on sys.path)


def build(root: Path, rows: int) -> None:
    from ikdata.core import manifest

    rng = np.random.default_rng(0)
    (root / "definitions/gemm").mkdir(parents=True, exist_ok=True)
    (root / f"definitions/gemm/{NAME}.json").write_text(json.dumps(DEFINITION))
    weights = [_blob(root, (1024, 512), rng.bytes(1024 * 512 * 2)) for _ in range(24)]
    pool = 20_000
    ms = rng.integers(1, 5, size=pool)
    a_pool = [_blob(root, (int(m), 512), rng.bytes(int(m) * 512 * 2)) for m in ms]
    c_pool = [_blob(root, (int(m), 1024), rng.bytes(int(m) * 1024 * 2)) for m in ms]
    (root / "workloads/gemm").mkdir(parents=True, exist_ok=True)
    with open(root / f"workloads/gemm/{NAME}.jsonl", "w") as rows_out, \
            open(root / "receipts.jsonl", "w") as receipts_out:
        for i in range(rows):
            k = i % pool
            uuid = f"bench-{i:07d}"
            rows_out.write(json.dumps({"definition": NAME, "workload": {
                "uuid": uuid, "axes": {"M": int(ms[k])}, "inputs": {"A": a_pool[k], "W": weights[i % 24]}}}) + "\n")
            receipts_out.write(json.dumps({"uuid": uuid, "definition": NAME, "axes": {"M": int(ms[k])},
                                           "expected_output": {"C": c_pool[k]}, "engine": "bench",
                                           "request_id": f"r{i}", "step": i % 7}) + "\n")
    manifest.write(root)
    (root / ".complete").write_text("ok\n")


def jsonl_files(root: Path) -> list[Path]:
    return sorted((root / "workloads").rglob("*.jsonl")) + [root / "receipts.jsonl"]


def baseline(root: Path) -> int:
    """Bare stdlib: read each file, json.loads every line."""
    count = 0
    loads = json.loads
    for path in jsonl_files(root):
        with open(path, "rb") as stream:
            for line in stream.read().splitlines():
                loads(line)
                count += 1
    return count


def stats_in_process(root: Path) -> str:
    """``ikdata stats DIR`` as the console script runs it (``ikdata.cli.main``: a local folder is read
    without building the typer app), stdout captured."""
    from ikdata.cli import _output, main

    buffer = io.StringIO()
    console_file = _output.console.file
    _output.console.file = buffer
    try:
        with contextlib.redirect_stdout(buffer):
            try:
                main(["stats", str(root)])
            except SystemExit:
                pass
    finally:
        _output.console.file = console_file
    return buffer.getvalue()


def _index(root: Path) -> float:
    from ikdata.cli import app

    start = time.perf_counter()
    try:
        app(["index", str(root), "--quiet"], standalone_mode=False)
    except SystemExit:
        pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="2,000 rows, one repeat: a few seconds")
    parser.add_argument("--million", action="store_true", help="1,000,000 rows made by scale_gen.py")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.repeat = 2000, 1
    if args.million:
        args.rows = 1_000_000
    print(f"load average before: {load_average()} on {os.cpu_count()} cores")

    root = args.dir or Path(os.environ.get("TMPDIR", "/tmp")) / (
        "ikdata-bench-stats-1m" if args.million else f"ikdata-bench-stats-{args.rows}")
    if args.million:
        from scale_gen import ensure

        start = time.perf_counter()
        if ensure(root, args.rows):
            print(f"  generated {root} in {time.perf_counter() - start:.1f} s", flush=True)
    elif not (root / ".complete").exists():
        print(f"building {root} ...", flush=True)
        start = time.perf_counter()
        build(root, args.rows)
        print(f"  built in {time.perf_counter() - start:.1f} s", flush=True)
    lines = sum(1 for p in jsonl_files(root) for _ in open(p, "rb"))
    size = sum(p.stat().st_size for p in jsonl_files(root))
    print(f"dataset: {args.rows} rows + receipts = {lines} JSONL lines ({size / 1e6:.1f} MB)")
    for path in jsonl_files(root):
        path.read_bytes()  # warm

    base_time, count = best_of(args.repeat, lambda: baseline(root))
    assert count == lines
    print(f"baseline: json.loads over every line:  {base_time:6.3f} s")
    from ikdata.core.index import INDEX_FILE

    index = root / INDEX_FILE
    aside = root / "bench-index.aside"
    if aside.exists():
        os.replace(aside, index)
    print(f"ikdata index (build, once):             {_index(root):6.3f} s")
    stats_time, text = best_of(args.repeat, lambda: stats_in_process(root))
    assert f"workloads {args.rows}" in text, text
    print(f"ikdata stats from the index:            {stats_time:6.3f} s  = {stats_time / base_time:7.4f}x the baseline "
          f"(target at 1M rows: <= 0.2 s: {'met' if stats_time <= 0.2 else 'not met'})")
    os.replace(index, aside)
    try:
        read_time, read_text = best_of(args.repeat, lambda: stats_in_process(root))
    finally:
        os.replace(aside, index)
    assert read_text == text, (read_text, text)
    print(f"ikdata stats reading every row:         {read_time:6.3f} s  = {read_time / base_time:7.4f}x the baseline "
          f"({'not slower' if read_time <= base_time else 'SLOWER'}); same output: yes; "
          f"the index answers {read_time / stats_time:.0f}x faster")
    cli = Path(sys.executable).with_name("ikdata")
    start = time.perf_counter()
    proc = subprocess.run([str(cli), "stats", str(root)], capture_output=True, text=True)
    cli_time = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    start = time.perf_counter()
    subprocess.run([str(cli), "--help"], capture_output=True, text=True)
    startup = time.perf_counter() - start
    print(f"ikdata stats as a subprocess:           {cli_time:6.3f} s  (of which ~{startup:.2f} s interpreter + "
          f"import start-up, measured with 'ikdata --help')")


if __name__ == "__main__":
    main()
    print(f"load average after:  {load_average()}")
