"""Benchmark ikdata push/pull against a real S3 API server (moto) on loopback.

Measures, in one run:
  1. a no-op push of a dataset with ~10,000 blobs: time and number of HTTP requests;
  2. a push where ~10% of the blobs are new, against s3fs ``put(recursive=True)`` of the whole folder;
  3. pull (clone, every blob rehashed before it enters) against s3fs ``get`` of the same blobs.

Requests are counted at the server (a WSGI wrapper around moto's app), so every
request of every client is seen.

Run: .venv/bin/python tools/bench/bench_remote.py [--blobs 10000] [--floats 256]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

GEMM = {
    "name": "gemm_bench_n4", "op_type": "gemm", "description": "bench GEMM",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 4}, "K": {"type": "var"}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "float32"}, "W": {"shape": ["N", "K"], "dtype": "float32"}},
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(A, W):\n    return torch.matmul(A, W.T)\n",
}


class Counter:
    def __init__(self, app):
        self.app, self.count, self.lock = app, 0, threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            self.count += 1
        return self.app(environ, start_response)


def start_server():
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    counter = Counter(server._server.app)
    server._server.app = counter
    return server, counter, f"http://127.0.0.1:{port}"


def add_rows(root: Path, rows: int, start: int, floats: int) -> None:
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    definition = Definition.from_dict(GEMM, origin=USER, source="bench")
    writer = DatasetWriter(root)
    rng = np.random.default_rng(start)
    k = max(1, floats // 4)
    for i in range(start, start + rows):
        a = rng.standard_normal((4, k)).astype(np.float32)
        w = rng.standard_normal((4, k)).astype(np.float32)
        writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, {"request_id": f"r{i}", "step": i})
    writer.commit()


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blobs", type=int, default=10_000)
    parser.add_argument("--floats", type=int, default=256, help="floats per input tensor (A and W)")
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()

    server, counter, endpoint = start_server()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=endpoint)
    import boto3
    import s3fs

    from ikdata.remote.pull import clone
    from ikdata.remote.push import push
    from ikdata.core.store import BlobStore

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    work = Path(tempfile.mkdtemp(prefix="ikdata-bench-"))
    try:
        root = work / "ds"
        rows = args.blobs // 3
        _, t = timed(lambda: add_rows(root, rows, 0, args.floats))
        blobs = sum(1 for _ in BlobStore(root).iter_blobs())
        size = sum(s for _, s in BlobStore(root).iter_blobs())
        print(f"dataset: {rows} rows, {blobs} blobs, {size / 2**20:.1f} MiB (built in {t:.1f} s)")
        url = "s3://bench/ikdata"

        counter.count = 0
        first, t_first = timed(lambda: push(root, url, jobs=args.jobs))
        print(f"initial push: {first.blobs_sent} blobs in {t_first:.2f} s, {counter.count} requests")

        counter.count = 0
        noop, t_noop = timed(lambda: push(root, url, jobs=args.jobs))
        assert not noop.published and noop.blobs_sent == 0
        requests_noop = counter.count
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True, use_listings_cache=False)
        counter.count = 0
        listing, t_list = timed(lambda: fs.find("bench/ikdata/blob"))
        print(f"no-op push: {t_noop:.2f} s, {requests_noop} requests ({blobs} blobs listed); a bare s3fs find of "
              f"the blob prefix alone takes {t_list:.2f} s ({counter.count} requests, {len(listing)} keys)")

        add_rows(root, rows // 10, rows, args.floats)
        blobs_now = sum(1 for _ in BlobStore(root).iter_blobs())
        counter.count = 0
        grown, t_grown = timed(lambda: push(root, url, jobs=args.jobs))
        requests_grown = counter.count
        counter.count = 0
        _, t_put = timed(lambda: fs.put(str(root) + "/", "bench/baseline/", recursive=True))
        requests_put = counter.count
        print(f"10% new: ikdata push {grown.blobs_sent} of {blobs_now} blobs in {t_grown:.2f} s "
              f"({requests_grown} requests); s3fs put(recursive=True) of the folder {t_put:.2f} s "
              f"({requests_put} requests); ratio {t_grown / t_put:.1%} (target <= 20%)")

        counter.count = 0
        pulled, t_pull = timed(lambda: clone(url, work / "clone", jobs=args.jobs))
        requests_pull = counter.count
        nbytes = pulled.bytes_fetched
        get_dir = work / "s3fs-get"
        counter.count = 0
        _, t_get = timed(lambda: fs.get("bench/ikdata/blob/", str(get_dir) + "/", recursive=True))
        requests_get = counter.count
        got = sum(f.stat().st_size for f in get_dir.rglob("*") if f.is_file())
        print(f"pull (clone, verified): {pulled.blobs_fetched} blobs, {nbytes / 2**20:.1f} MiB in {t_pull:.2f} s = "
              f"{nbytes / 2**10 / t_pull:.1f} KiB/s, {pulled.blobs_fetched / t_pull:.0f} blobs/s "
              f"({requests_pull} requests)")
        print(f"s3fs get of the same blobs: {got / 2**20:.1f} MiB in {t_get:.2f} s = {got / 2**10 / t_get:.1f} KiB/s "
              f"({requests_get} requests); ikdata pull takes {t_pull / t_get:.2f}x the time of s3fs get")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    main()
