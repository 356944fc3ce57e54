"""Finding 5 (issue 9): files safetensors refuses are refused by validate (with and without
--deep) and by import, and --deep checks every tensor of a file: a flipped data byte hidden
behind an empty second tensor is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fault_helpers import blob_of, header_dict, join, make_validated, recommit, rewrite, tree_digest

import ikdata
from ikdata.core.errors import ProblemsFound
from ikdata.importing.apply import import_dataset


def _float_dim(h, d):
    return join(h.replace('"shape":[1,', '"shape":[1.0,'), d)


def _string_dim(h, d):
    return join(h.replace('"shape":[1,', '"shape":["1",'), d)


def _string_offsets(h, d):
    return join(h.replace('"data_offsets":[0,32]', '"data_offsets":["0","32"]'), d)


def _trailing(h, d):
    return join(h, d + bytes(64 * 1024))


def _junk_in_header(h, d):
    return join(h.rstrip() + "junk", d)


def _junk_between(h, d):  # bytes between the header and the tensor's data, offsets shifted past them
    return join(h.replace('"data_offsets":[0,32]', '"data_offsets":[16,48]'), b"J" * 16 + d)


def _overlap(h, d):
    doc = header_dict(h)
    doc["b"] = {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}
    return join(json.dumps(doc), d)


def _metadata_not_strings(h, d):
    doc = header_dict(h)
    doc["__metadata__"] = {"k": 1}
    return join(json.dumps(doc), d)


def _flip_behind_empty_tensor(h, d):
    doc = header_dict(h)
    doc["x"] = {"dtype": "F32", "shape": [0], "data_offsets": [32, 32]}
    flipped = bytearray(d)
    flipped[0] ^= 0xFF
    return join(json.dumps(doc), bytes(flipped))


def _metadata_ok(h, d):  # safetensors accepts it, but an ikdata blob is canonical: no metadata
    doc = header_dict(h)
    doc["__metadata__"] = {"k": "v"}
    return join(json.dumps(doc), d)


REFUSED_BY_SAFETENSORS = [_float_dim, _string_dim, _string_offsets, _trailing, _junk_in_header, _junk_between,
                          _overlap, _metadata_not_strings]
NOT_CANONICAL = [_flip_behind_empty_tensor, _metadata_ok]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_validated(tmp_path / "src", rows=1)  # row 1: A is [1, 8] float32, 32 bytes


def _blob_problems(root: Path, blob: Path, *, deep: bool) -> list[str]:
    report = ikdata.validate(ikdata.open(root), deep=deep)
    rel = blob.relative_to(root).as_posix()
    return [str(p) for p in report.problems if rel in str(p)]


@pytest.mark.parametrize("damage", REFUSED_BY_SAFETENSORS + NOT_CANONICAL, ids=lambda f: f.__name__.strip("_"))
def test_validate_refuses_what_safetensors_refuses_and_non_canonical_blobs(src, damage):
    blob = blob_of(src)
    assert '"shape":[1,8]' in blob.read_bytes()[:200].decode(errors="replace")
    rewrite(blob, damage)
    recommit(src)
    if damage in REFUSED_BY_SAFETENSORS:
        from safetensors import deserialize

        with pytest.raises(Exception):
            deserialize(blob.read_bytes())
    assert _blob_problems(src, blob, deep=False), "validate accepted it"
    assert _blob_problems(src, blob, deep=True), "validate --deep accepted it"


@pytest.mark.parametrize("damage", REFUSED_BY_SAFETENSORS + [_flip_behind_empty_tensor],
                         ids=lambda f: f.__name__.strip("_"))
def test_import_refuses_them_and_writes_nothing(src, tmp_path, damage):
    dst = make_validated(tmp_path / "dst", rows=1, seed=7, w_seed=7)
    before = tree_digest(dst)
    rewrite(blob_of(src), damage)
    recommit(src)
    with pytest.raises(ProblemsFound):
        import_dataset(src, dst, trust_reports=True)  # a hand-written report: the blob is what is tested
    assert tree_digest(dst) == before


def test_deep_names_the_flip_hidden_behind_an_empty_second_tensor(src):
    blob = blob_of(src)
    rewrite(blob, _flip_behind_empty_tensor)
    recommit(src)
    found = _blob_problems(src, blob, deep=True)
    assert any("holds 2 tensors" in p for p in found), found


def test_a_clean_dataset_stays_clean(src):
    report = ikdata.validate(ikdata.open(src), deep=True)
    assert report.ok, [str(p) for p in report.problems]


def test_import_rewrites_a_valid_but_non_canonical_blob_in_canonical_form(src, tmp_path):
    rewrite(blob_of(src), _metadata_ok)
    recommit(src)
    dst = tmp_path / "dst"
    import_dataset(src, dst, trust_reports=True)  # a hand-written report: the blob is what is tested
    blob = dst / blob_of(src).relative_to(src)
    assert b"__metadata__" not in blob.read_bytes()
    report = ikdata.validate(ikdata.open(dst), deep=True)
    assert report.ok, [str(p) for p in report.problems]
