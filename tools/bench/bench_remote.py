"""Benchmark ikdata push/clone/pull of small blobs on a real S3 API server (moto) on loopback: packed vs loose.

Measures, in one run, requests (counted at the server: a WSGI wrapper around moto's app) and seconds for:
  1. push of N small blobs: packed (the default: small loose blobs packed on the way) and ``--no-pack``;
  2. a no-op push of each;
  3. clone (every blob rehashed before it lands) of each;
  4. a range pull: 1% of the blobs missing locally (pull's ``fetch_blobs``), and a replay worker's cache
     taking 1% of the blobs (``BlobCache.prefetch``): byte ranges of the pack vs one GET per loose blob;
  5. the baseline, the bare program: s3fs ``put(recursive=True)`` and ``get(recursive=True)`` of the folder.

Ratios are against the s3fs baseline measured in the same run.

Run: .venv/bin/python tools/bench/bench_remote.py [--blobs 2000] [--jobs 16] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import load_average  # noqa: E402
from scale_gen import generate  # noqa: E402


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


def measure(counter: Counter, fn):
    counter.count = 0
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start, counter.count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blobs", type=int, default=2000, help="small blobs (8 weights + activations + outputs)")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--smoke", action="store_true", help="100 blobs: a few seconds")
    args = parser.parse_args()
    blobs = 100 if args.smoke else args.blobs

    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
    server, counter, endpoint = start_server()
    work = Path(tempfile.mkdtemp(prefix="ikdata-bench-remote-"))
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=endpoint, IKDATA_CACHE_DIR=str(work / "user-cache"))
    import boto3
    import s3fs

    from ikdata.core import manifest
    from ikdata.remote.blob_cache import BlobCache
    from ikdata.remote.connect import open_backend
    from ikdata.remote.pull import clone, fetch_blobs
    from ikdata.remote.push import push

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    try:
        root = work / "ds"
        generate(root, max(1, (blobs - 8) // 2), rows_per_blob=1)
        (root / ".complete").unlink()
        info = manifest.read(root)["blobs"]
        print(f"dataset: {info['count']} blobs, {info['bytes'] / 2**20:.1f} MiB; load {load_average()}")
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True, use_listings_cache=False)
        _, t_put, r_put = measure(counter, lambda: fs.put(str(root) + "/", "bench/baseline/", recursive=True))
        _, t_get, r_get = measure(counter, lambda: fs.get("bench/baseline/", str(work / "s3fs-get") + "/",
                                                          recursive=True))
        print(f"baseline s3fs: put(recursive) {t_put:.2f} s, {r_put} requests; get(recursive) {t_get:.2f} s, "
              f"{r_get} requests")
        sample = random.Random(0).sample(sorted(p.relative_to(root).as_posix()
                                                for p in (root / "blob").rglob("*.safetensors")),
                                          max(1, info["count"] // 100))
        for label, pack in (("packed", True), ("loose", False)):
            url = f"s3://bench/{label}"
            pushed, t, r = measure(counter, lambda: push(root, url, jobs=args.jobs, pack=pack))
            print(f"{label:6} push:   {t:7.2f} s, {r:5} requests ({pushed.blobs_sent} blobs, {pushed.packs_sent} "
                  f"packs); {t / t_put:.2f}x the time and {r / r_put:.3f}x the requests of s3fs put")
            _, t, r = measure(counter, lambda: push(root, url, jobs=args.jobs, pack=pack))
            print(f"{label:6} no-op push: {t:5.2f} s, {r:5} requests")
            copy = work / f"clone-{label}"
            cloned, t, r = measure(counter, lambda: clone(url, copy, jobs=args.jobs))
            assert cloned.dataset_id == manifest.current_id(root)
            print(f"{label:6} clone:  {t:7.2f} s, {r:5} requests ({cloned.blobs_fetched} blobs verified); "
                  f"{t / t_get:.2f}x the time and {r / r_get:.3f}x the requests of s3fs get")
            have = work / f"have-{label}"
            shutil.copytree(root, have)
            for rel in sample:
                (have / rel).unlink()
            wanted = {p.relative_to(root).as_posix() for p in (root / "blob").rglob("*.safetensors")}
            with open_backend(url) as backend:
                listed = backend.list_objects("")
                (fetched, nbytes, _), t, r = measure(counter, lambda: fetch_blobs(
                    backend, wanted, work / f"staging-{label}", have=have, jobs=args.jobs, listed=listed))
            print(f"{label:6} pull of {len(sample)} missing blobs: {t:5.2f} s, {r:4} requests, "
                  f"{nbytes / 2**10:.1f} KiB fetched")
            with open_backend(url) as backend:
                cache = BlobCache(backend, work / f"worker-{label}", max_bytes=1 << 30)
                failures, t, r = measure(counter, lambda: cache.prefetch(sample, jobs=args.jobs))
            assert not failures, failures
            print(f"{label:6} replay cache, {len(sample)} blobs: {t:5.2f} s, {r:4} requests, "
                  f"{cache.fetched_bytes / 2**10:.1f} KiB fetched")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    main()
