"""A synthetic ikdata dataset of N workload rows and N receipts, made fast, for the scale benchmarks.

Rows are written with orjson in large chunks; blobs are real safetensors files (the canonical
one-tensor header of :func:`ikdata.core.safetensors_format.encode_header`, random bf16 bytes,
named by their tensor digest), so every check ``validate --deep`` makes passes on them.

Shape mix: one decode-server GEMM ``C[M,64] = A[M,256] . W[64,256]^T`` (bf16), M in 1..8; each
activation blob ``A`` and output blob ``C`` is used by ``--rows-per-blob`` rows (default 8: 1M rows
hold 125,000 activations and 125,000 outputs, 1.0 GB), plus 8 shared weights.

    .venv/bin/python tools/bench/scale_gen.py DIR --rows 1000000 [--rows-per-blob 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import orjson

NAME = "gemm_scale_n64_k256"
DEFINITION = {
    "name": NAME, "op_type": "gemm",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 64}, "K": {"type": "const", "value": 256}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "bfloat16"}, "W": {"shape": ["N", "K"], "dtype": "bfloat16"}},
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "bfloat16"}},
    "reference": "import torch\n\ndef run(A, W):\n    return A @ W.T\n",
}
_CHUNK = 50_000  # rows per write


def uuid_of(i: int) -> str:
    """Row ``i``'s uuid: 32 hex digits, spread (a hash-like order, as content-derived uuids are)."""
    return f"{i * 2654435761 % (1 << 64):016x}{i:016x}"


def _blob(root: Path, shape: tuple[int, ...], data: bytes, made: set[str]) -> dict:
    from ikdata.core.digest import tensor_digest
    from ikdata.core.safetensors_format import encode_header
    from ikdata.core.store import blob_path

    rel = blob_path(tensor_digest("torch.bfloat16", shape, data))
    folder = os.path.dirname(rel)
    if folder not in made:
        (root / folder).mkdir(parents=True, exist_ok=True)
        made.add(folder)
    fd = os.open(root / rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_header("torch.bfloat16", shape, len(data)) + data)
    finally:
        os.close(fd)
    return {"type": "safetensors", "path": rel, "tensor_key": "tensor"}


def generate(root: Path, rows: int, *, rows_per_blob: int = 8, seed: int = 0, first: int = 0) -> dict:
    """Write the dataset (rows, receipts, blobs, manifest) into an empty ``root``; return its sizes.

    Rows are numbered from ``first`` (their uuids and request ids), so two calls with disjoint ranges and
    seeds make datasets that import into each other without conflicts."""
    from ikdata.core import manifest

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "definitions/gemm").mkdir(parents=True, exist_ok=True)
    (root / f"definitions/gemm/{NAME}.json").write_bytes(orjson.dumps(DEFINITION, option=orjson.OPT_INDENT_2))
    made: set[str] = set()
    weights = [_blob(root, (64, 256), rng.bytes(64 * 256 * 2), made) for _ in range(8)]
    groups = max(1, -(-rows // rows_per_blob))
    ms = rng.integers(1, 9, size=groups)
    a_pool, c_pool = [], []
    for g in range(groups):
        m = int(ms[g])
        a_pool.append(_blob(root, (m, 256), rng.bytes(m * 256 * 2), made))
        c_pool.append(_blob(root, (m, 64), rng.bytes(m * 64 * 2), made))
    (root / "workloads/gemm").mkdir(parents=True, exist_ok=True)
    dumps = orjson.dumps
    with open(root / f"workloads/gemm/{NAME}.jsonl", "wb") as rows_out, \
            open(root / "receipts.jsonl", "wb") as receipts_out:
        for start in range(0, rows, _CHUNK):
            row_lines, receipt_lines = [], []
            for i in range(start, min(rows, start + _CHUNK)):
                g = i // rows_per_blob
                i += first
                m = int(ms[g])
                uuid = uuid_of(i)
                row_lines.append(dumps({"definition": NAME, "workload": {
                    "uuid": uuid, "axes": {"M": m}, "inputs": {"A": a_pool[g], "W": weights[i % 8]}}}))
                receipt_lines.append(dumps({"uuid": uuid, "definition": NAME, "axes": {"M": m},
                                            "expected_output": {"C": c_pool[g]}, "engine": "bench",
                                            "request_id": f"r{i}", "step": i % 7}))
            rows_out.write(b"\n".join(row_lines) + b"\n")
            receipts_out.write(b"\n".join(receipt_lines) + b"\n")
    manifest.write(root)
    (root / ".complete").write_text(f"{rows}\n")
    return {"rows": rows, "blobs": 8 + 2 * groups}


def ensure(root: Path, rows: int, *, rows_per_blob: int = 8, seed: int = 0, first: int = 0) -> bool:
    """Generate ``root`` unless a complete copy of that size is there; True when it was generated."""
    marker = root / ".complete"
    if marker.is_file() and marker.read_text().strip() == str(rows):
        return False
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root}: exists and is not a complete generated dataset of {rows} rows; remove it")
    generate(root, rows, rows_per_blob=rows_per_blob, seed=seed, first=first)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rows-per-blob", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="number rows from here (uuids, request ids)")
    args = parser.parse_args()
    start = time.perf_counter()
    made = ensure(args.dir, args.rows, rows_per_blob=args.rows_per_blob, seed=args.seed, first=args.first)
    print(f"{args.dir}: {args.rows} rows {'generated' if made else 'already there'} "
          f"in {time.perf_counter() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
