"""Finding 10 of issue 9: push checks the remote blobs it relies on.

A remote blob flipped in place (same size, so a listing cannot tell) must not stay named by the
next manifest push publishes: folder and memory remotes are rehashed or compared, S3 is checked
through the ETag of the listing and the sha256 checksum stored at upload, the Hub through the
content ids of its tree listing (git blob id, LFS sha256); ``validate --deep URL`` catches the rest.
"""

from __future__ import annotations

import numpy as np
import pytest

import ikdata
from ikdata.core.definitions import USER, Definition
from ikdata.core.writer import DatasetWriter
from ikdata.ops.validate import validate
from ikdata.remote.pull import clone
from ikdata.remote.push import push
from foundation_helpers import gemm_definition_record
from remote_helpers import first_blob, flip_last_byte, tamper
from security_helpers import remote_url


@pytest.mark.parametrize("backend", ["folder", "memory", "s3", "hf"])
def test_a_remote_blob_flipped_in_place_is_sent_again(backend, request, make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    url = remote_url(backend, request, tmp_path)
    push(root, url, pack=False)  # a loose object to damage
    rel = first_blob(root)
    tamper(url, rel, flip_last_byte(root / rel), hub=request.getfixturevalue("hub_server") if backend == "hf" else None)
    a = np.full((3, 8), 2.0, dtype=np.float32)
    writer = DatasetWriter(root)
    writer.add(Definition.from_dict(gemm_definition_record(), origin=USER, source="t"),
               {"A": a, "W": np.ones((4, 8), dtype=np.float32)}, {"C": a @ np.ones((8, 4), dtype=np.float32)},
               {"request_id": "late"})
    writer.commit()
    result = push(root, url)
    assert result.published and result.blobs_sent >= 2  # the new blobs and the damaged one
    copy = clone(url, tmp_path / "copy")
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok
    assert copy.dataset_id == result.dataset_id


@pytest.mark.parametrize("backend", ["folder", "s3", "hf"])
def test_an_intact_remote_is_not_sent_again(backend, request, make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    url = remote_url(backend, request, tmp_path)
    push(root, url)
    again = push(root, url)
    assert not again.published and again.blobs_sent == 0
