"""Two pushers racing to one remote: the manifest write is a compare-and-swap, so the remote never mixes.

The race is made deterministic: pusher A stops just before writing its manifest
(the ``before-manifest`` checkpoint) while pusher B runs a whole push.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

import ikdata
from ikdata.core import manifest
from ikdata.core import faults
from ikdata.core.errors import IkdataError
from ikdata.remote import push as push_mod
from ikdata.remote.backend import ManifestState, PublishConflict
from ikdata.remote.connect import open_backend
from ikdata.remote.pull import clone
from ikdata.ops.validate import validate


def _remote_id(url: str) -> str | None:
    with open_backend(url) as backend:
        data = backend.read_manifest().data
    return manifest.dataset_id(orjson.loads(data)) if data else None


def _race(a, url, b_push, **judging):
    """Push ``a``, running ``b_push()`` once when A is about to publish its manifest."""
    fired = []

    def on_checkpoint(name: str) -> None:
        if name == "before-manifest" and not fired:
            fired.append(name)
            b_push()

    with faults.observe(on_checkpoint):
        return push_mod.push(a, url, **judging)


def test_conditional_put_refuses_a_stale_manifest(remote_url):
    """Every backend's compare-and-swap: the first publish wins, a publish against a stale base fails."""
    with open_backend(remote_url) as backend:
        backend.prepare_push()
        empty = backend.read_manifest()
        backend.publish_manifest(b'{"first": 1}', empty)
        with pytest.raises(PublishConflict):
            backend.publish_manifest(b'{"second": 2}', empty)
        current = backend.read_manifest()
        assert current.data == b'{"first": 1}'
        backend.publish_manifest(b'{"third": 3}', current)
        with pytest.raises(PublishConflict):
            backend.publish_manifest(b'{"fourth": 4}', current)
        assert backend.read_manifest().data == b'{"third": 3}'


def test_moto_enforces_if_none_match_and_if_match(s3_env):
    """The installed moto server really enforces conditional puts (the S3 backend relies on it)."""
    import boto3
    from botocore.exceptions import ClientError

    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    client.put_object(Bucket="ikdata-test", Key="cas/x", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket="ikdata-test", Key="cas/x", Body=b"2", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket="ikdata-test", Key="cas/x", Body=b"2", IfMatch='"0000"')


def test_loser_whose_data_contains_the_winner_retries_and_publishes(remote_url, make_dataset, gemm_record,
                                                                   monkeypatch):
    """B publishes a dataset; A holds B's rows and more: A loses the race, sees B inside, and publishes."""
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    b = make_dataset("b", rows=2)
    b_id = manifest.current_id(b)
    import shutil

    a = b.parent / "a"
    shutil.copytree(b, a)
    a_rows = np.ones((2, 8), dtype=np.float32)
    w = np.zeros((4, 8), dtype=np.float32)
    DatasetWriter(a).add(Definition.from_dict(gemm_record, origin=USER, source="t"), {"A": a_rows, "W": w},
                         {"C": a_rows @ w.T}, {"request_id": "only-in-a"})
    a_id = DatasetWriter(a).commit()

    result = _race(a, remote_url, lambda: push_mod.push(b, remote_url))
    assert _remote_id(remote_url) == a_id != b_id
    assert result.attempts == 2 and result.published


def test_loser_with_unmergeable_data_refuses_and_remote_holds_the_winner_intact(remote_url, make_dataset,
                                                                              tmp_path, monkeypatch):
    """A and B hold different unvalidated data: B wins; A refuses (import's rules); the remote is B, whole."""
    a = make_dataset("a", rows=2, seed=1)
    b = make_dataset("b", rows=2, seed=2)
    b_id = manifest.current_id(b)
    a_before = manifest.current_id(a)

    with pytest.raises(IkdataError) as caught:
        _race(a, remote_url, lambda: push_mod.push(b, remote_url))
    message = str(caught.value)
    assert f"holds dataset {b_id[:12]} (published by another pusher), which has data {a} lacks, and merging it " \
           "was refused, so nothing was published" in message
    assert "not validated" in message
    assert _remote_id(remote_url) == b_id
    assert manifest.current_id(a) == a_before  # the refused merge left A as it was

    copy = clone(remote_url, tmp_path / "copy")
    assert copy.dataset_id == b_id
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok


def test_losers_with_validated_data_rebase_and_the_remote_holds_both(make_dataset, tmp_path, monkeypatch,
                                                                    gemm_record):
    """Validated datasets merge: the loser pulls the winner (import rules), then publishes the union."""
    from remote_helpers import replay_and_commit

    url = str(tmp_path / "remote")
    a = make_dataset("a", rows=2, seed=1)
    b = make_dataset("b", rows=2, seed=2)
    replay_and_commit(a, tmp_path, gemm_record)
    replay_and_commit(b, tmp_path, gemm_record)
    b_id = manifest.current_id(b)

    # the loser re-judges the winner's verdicts with the definitions it trusts (a report from elsewhere is a claim)
    result = _race(a, url, lambda: push_mod.push(b, url), definitions=[tmp_path / "trusted-definitions"])
    assert result.merged == (b_id,) and result.published
    final = _remote_id(url)
    assert final == manifest.current_id(a)
    parents = [p["id"] for p in manifest.read(a)["parents"]]
    assert b_id in parents
    clone(url, tmp_path / "copy")
    assert sum(1 for _ in ikdata.open(tmp_path / "copy").workloads()) == 4


def test_identical_pushers_both_succeed(remote_url, make_dataset, monkeypatch):
    a = make_dataset("a", rows=2)
    result = _race(a, remote_url, lambda: push_mod.push(a, remote_url))
    assert result.published is False and _remote_id(remote_url) == manifest.current_id(a)


def test_a_stale_state_token_never_overwrites(tmp_path):
    """A local remote's compare-and-swap uses the bytes' sha256: a forged token cannot match."""
    url = str(tmp_path / "r")
    with open_backend(url) as backend:
        backend.prepare_push()
        backend.publish_manifest(b"x", ManifestState(None, None))
        with pytest.raises(PublishConflict):
            backend.publish_manifest(b"y", ManifestState(b"z", "0" * 64))
