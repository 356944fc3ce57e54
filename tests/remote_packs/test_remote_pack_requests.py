"""What an object store sees: push and clone of 2,000 small blobs make at most 20 requests on S3 (moto on
loopback, every request counted at the server), and a pull of a few members reads byte ranges."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from ikdata.core import manifest
from ikdata.core.packs import load_packs
from ikdata.remote.pull import clone
from ikdata.remote.push import push

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "bench"))
from scale_gen import generate  # noqa: E402  (real blobs named by digest, rows and receipts, written fast)


@pytest.fixture(scope="module")
def small_blobs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("two-thousand") / "ds"
    generate(root, 996, rows_per_blob=1)  # 8 weights + 996 activations + 996 outputs = 2,000 blobs
    (root / ".complete").unlink()
    assert manifest.read(root)["blobs"]["count"] == 2000
    return root


def test_push_and_clone_of_2000_small_blobs_make_at_most_20_requests(small_blobs, s3_requests, tmp_path):
    url = f"s3://ikdata-test/count-{uuid.uuid4().hex[:8]}"
    s3_requests.clear()
    pushed = push(small_blobs, url)
    push_requests = list(s3_requests)
    assert pushed.published and pushed.blobs_sent == 2000 and pushed.packs_sent == 1
    s3_requests.clear()
    copy = clone(url, tmp_path / "copy")
    clone_requests = list(s3_requests)
    assert copy.dataset_id == manifest.current_id(small_blobs) and copy.blobs_fetched == 2000
    assert len(load_packs(tmp_path / "copy").blobs) == 2000  # kept packed
    assert len(push_requests) + len(clone_requests) <= 20, "\n".join(push_requests + ["--"] + clone_requests)

    s3_requests.clear()
    again = push(small_blobs, url)
    assert not again.published and len(s3_requests) == 2, s3_requests  # the manifest read and one listing
