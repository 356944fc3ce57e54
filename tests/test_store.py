"""The blob store: the digest contract (pinned), canonical blob bytes (pinned), round trips,
dedup without writes, atomic writes, and verification without torch."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import uuid as uuid_mod
from pathlib import Path

import numpy as np
import pytest

from ikdata.core.digest import canonical_json, tensor_digest
from ikdata.core.errors import BlobCorrupted, BlobNotFound, StoreError
from ikdata.core.records import TensorRef
from ikdata.core.store import (BlobStore, RawTensor, blob_path, digest_from_path, raw_tensor, read_entries,
                          rehash_file, rehash_files, write_atomic)

GOLDEN_DIGEST = "f6e11624072a69183fb170a97573b9e225b7b7bf2a8469c60f864d97a5a6f579"
GOLDEN_HEADER = b'{"tensor":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}  '


def golden_array() -> np.ndarray:
    return np.arange(6, dtype=np.float32).reshape(2, 3)


def test_digest_follows_the_design_contract_exactly():
    array = golden_array()
    # DESIGN.md: sha256 over json.dumps([str(t.dtype), list(t.shape)]) then the contiguous raw bytes.
    independent = hashlib.sha256(json.dumps(["torch.float32", [2, 3]]).encode() + array.tobytes()).hexdigest()
    assert independent == GOLDEN_DIGEST
    assert raw_tensor(array).digest == GOLDEN_DIGEST
    assert tensor_digest("torch.float32", (2, 3), array.tobytes()) == GOLDEN_DIGEST


def test_golden_blob_file_bytes(tmp_path):
    put = BlobStore(tmp_path).put(golden_array())
    assert put.digest == GOLDEN_DIGEST
    assert put.ref == TensorRef(f"blob/sha256/f6/{GOLDEN_DIGEST}.safetensors", "tensor")
    assert put.ref.path == blob_path(GOLDEN_DIGEST)
    data = (tmp_path / put.ref.path).read_bytes()
    assert data == struct.pack("<Q", 64) + GOLDEN_HEADER + golden_array().tobytes()
    assert digest_from_path(put.ref.path) == GOLDEN_DIGEST


def test_golden_blob_loads_in_safetensors(tmp_path):
    from safetensors.numpy import load_file

    put = BlobStore(tmp_path).put(golden_array())
    loaded = load_file(str(tmp_path / put.ref.path))
    assert list(loaded) == ["tensor"]
    np.testing.assert_array_equal(loaded["tensor"], golden_array())


def test_golden_workload_uuid():
    from ikdata.core.writer import workload_uuid

    inputs = {"A": TensorRef(f"blob/sha256/f6/{GOLDEN_DIGEST}.safetensors")}
    provenance = {"request_id": "r1", "step": 0, "host": "ignored-host", "process_id": 99}
    got = workload_uuid("gemm_test_n4_k8", inputs, provenance)
    identity = canonical_json(["gemm_test_n4_k8", {"A": inputs["A"].to_dict()}, {"request_id": "r1", "step": 0}])
    assert got == str(uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, identity.decode()))
    assert got == "017699e2-5a4c-5a9a-85ab-424cd36ed12a"
    # host and process id do not identify a workload: the same capture elsewhere gives the same uuid
    assert workload_uuid("gemm_test_n4_k8", inputs, dict(provenance, host="other", process_id=1)) == got


NUMPY_CASES = {
    "float32": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
    "float16": np.linspace(-1, 1, 8, dtype=np.float16),
    "float64": np.array([[1.5, -2.25]], dtype=np.float64),
    "int64": np.arange(-3, 3, dtype=np.int64).reshape(2, 3),
    "int8": np.array([-128, 0, 127], dtype=np.int8),
    "uint8": np.arange(7, dtype=np.uint8),
    "bool": np.array([True, False, True]),
    "zero-d": np.array(3.5, dtype=np.float32),
    "empty": np.zeros((0, 4), dtype=np.float32),
    "non-contiguous": np.arange(12, dtype=np.int32).reshape(3, 4).T,
}


@pytest.mark.parametrize("name", list(NUMPY_CASES))
def test_numpy_round_trip(tmp_path, name):
    import torch

    array = NUMPY_CASES[name]
    store = BlobStore(tmp_path)
    put = store.put(array)
    assert put.written and put.nbytes == array.nbytes
    got = store.get(put.ref)
    assert tuple(got.shape) == array.shape
    assert str(got.dtype) == "torch." + array.dtype.name
    assert torch.equal(got, torch.from_numpy(np.array(array, order="C")))
    np.testing.assert_array_equal(store.get_numpy(put.ref), array)
    check = rehash_file(tmp_path / put.ref.path)
    assert check.error is None and check.digests == (put.digest,)


def _torch_cases():
    import torch

    generator = torch.Generator().manual_seed(0)
    return {
        "bfloat16": torch.randn(3, 5, generator=generator).to(torch.bfloat16),
        "float32": torch.randn(2, 2, 2, generator=generator),
        "bool": torch.tensor([[True, False], [False, True]]),
        "zero-d": torch.tensor(7, dtype=torch.int64),
        "empty": torch.empty(0, 3, dtype=torch.bfloat16),
        "float8": torch.randn(4, generator=generator).to(torch.float8_e4m3fn),
        "transposed": torch.arange(6, dtype=torch.int16).reshape(2, 3).T,
        "needs-grad": torch.ones(2, requires_grad=True),
    }


@pytest.mark.parametrize("name", ["bfloat16", "float32", "bool", "zero-d", "empty", "float8", "transposed",
                                  "needs-grad"])
def test_torch_round_trip(tmp_path, name):
    import torch

    tensor = _torch_cases()[name]
    store = BlobStore(tmp_path)
    put = store.put(tensor)
    got = store.get(put.ref)
    assert got.dtype == tensor.dtype and got.shape == tensor.shape
    assert torch.equal(got.view(torch.uint8) if tensor.dtype == torch.float8_e4m3fn else got,
                       (tensor.detach().contiguous().view(torch.uint8) if tensor.dtype == torch.float8_e4m3fn
                        else tensor.detach()))
    # the digest is the seed capture script's: torch dtype name, shape, contiguous bytes
    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
    expected = hashlib.sha256(json.dumps([str(tensor.dtype), list(tensor.shape)]).encode())
    expected.update(memoryview(flat))
    assert put.digest == expected.hexdigest()


def test_numpy_and_torch_of_the_same_tensor_share_one_blob(tmp_path):
    import torch

    store = BlobStore(tmp_path)
    first = store.put(golden_array())
    second = store.put(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert first.ref == second.ref and not second.written


def test_putting_twice_writes_nothing(tmp_path):
    store = BlobStore(tmp_path)
    first = store.put(golden_array())
    path = tmp_path / first.ref.path
    before = os.stat(path)
    second = store.put(golden_array().copy())
    after = os.stat(path)
    assert first.written and not second.written
    assert second.ref == first.ref
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file left behind
    assert store.has(first.digest)
    assert list(store.iter_blobs()) == [(first.ref.path, before.st_size)]


def test_unstorable_values_raise_store_error(tmp_path):
    store = BlobStore(tmp_path)
    with pytest.raises(StoreError, match="cannot store a list; pass a torch tensor or a numpy array"):
        store.put([1, 2, 3])
    with pytest.raises(StoreError, match="numpy dtype <U1 cannot be stored"):
        store.put(np.array(["a"]))
    assert not (tmp_path / "blob").exists()


def test_get_missing_and_corrupt_blobs(tmp_path):
    store = BlobStore(tmp_path)
    missing = TensorRef(blob_path("ab" * 32))
    with pytest.raises(BlobNotFound, match=r"blob/sha256/ab/.*\.safetensors: blob not found") as caught:
        store.get(missing)
    assert caught.value.digest == "ab" * 32
    put = store.put(golden_array())
    path = tmp_path / put.ref.path
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(BlobCorrupted, match="cannot read tensor 'tensor'"):
        store.get(put.ref)


def test_write_atomic_leaves_no_temp_on_failure(tmp_path):
    target = tmp_path / "sub" / "file.bin"

    def chunks():
        yield b"abc"
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        write_atomic(target, chunks())
    assert not target.exists()
    assert list((tmp_path / "sub").iterdir()) == []
    write_atomic(target, [b"abc", memoryview(b"def")])
    assert target.read_bytes() == b"abcdef"
    write_atomic(target, [b"new"])
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["file.bin"]


# -- reading headers and rehashing (no torch) ---------------------------------------------------


def _blob(tmp_path: Path) -> Path:
    put = BlobStore(tmp_path).put(golden_array())
    return tmp_path / put.ref.path


def test_read_entries_and_rehash_of_a_good_blob(tmp_path):
    path = _blob(tmp_path)
    entries = read_entries(path)
    assert [(e.key, e.dtype, e.shape, e.nbytes) for e in entries] == [("tensor", "torch.float32", (2, 3), 24)]
    check = rehash_file(path)
    assert check.error is None and check.digests == (GOLDEN_DIGEST,)


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:-4], "data ends at byte 24 but the file holds only 20 data bytes (truncated?)"),
    (lambda d: d[:40], "header claims 64 bytes but the file holds 32 after the length"),
    (lambda d: struct.pack("<Q", len(d) + 1) + d[8:], "header claims"),
    (lambda d: struct.pack("<Q", 1 << 62) + d[8:], f"header length {1 << 62} is absurd"),
    (lambda d: d[:5], "file is 5 bytes, too short for a safetensors header"),
    (lambda d: b"", "file is 0 bytes, too short for a safetensors header"),
    (lambda d: d[:8] + b"[" + d[9:], "header is not valid JSON"),
    (lambda d: d[:8] + d[8:].replace(b'"F32"', b'"F99"'), "malformed or unsupported entry"),
    (lambda d: d[:8] + d[8:].replace(b"[0,24]", b"[0,20]"), "offsets 0..20 do not hold 24 bytes"),
])
def test_damaged_headers_are_reported_never_trusted(tmp_path, damage, message):
    path = _blob(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(BlobCorrupted) as caught:
        read_entries(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)
    check = rehash_file(path)
    assert check.digests == () and message in check.error


def test_flipped_data_byte_changes_the_rehash(tmp_path):
    path = _blob(tmp_path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(bytes(data))
    assert read_entries(path)[0].shape == (2, 3)  # the header is fine...
    check = rehash_file(path)
    assert check.error is None and check.digests[0] != GOLDEN_DIGEST  # ...the content is not


def test_rehash_large_file_through_mmap(tmp_path):
    big = np.arange(600_000, dtype=np.float32)  # 2.4 MB, above the mmap threshold
    put = BlobStore(tmp_path).put(big)
    assert rehash_file(tmp_path / put.ref.path).digests == (put.digest,)


def test_rehash_multi_tensor_file_and_unreadable_path(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "two.safetensors"
    a, b = np.ones((2, 2), dtype=np.float32), np.arange(3, dtype=np.int64)
    save_file({"a": a, "b": b}, str(path), metadata={"note": "x"})
    check = rehash_file(path)
    assert {e.key: d for e, d in zip(check.entries, check.digests)} == {
        "a": raw_tensor(a).digest, "b": raw_tensor(b).digest}
    missing = rehash_file(tmp_path / "missing.safetensors")
    assert missing.error.startswith("cannot read: No such file")


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_rehash_files_keeps_input_order(tmp_path, jobs):
    store = BlobStore(tmp_path)
    arrays = [np.full((i + 1,), i, dtype=np.int32) for i in range(60)]
    paths = [tmp_path / store.put(a).ref.path for a in arrays]
    checks = list(rehash_files(paths, jobs=jobs))
    assert [c.path for c in checks] == [str(p) for p in paths]
    assert [c.digests[0] for c in checks] == [raw_tensor(a).digest for a in arrays]


def test_raw_tensor_input_is_stored_as_given(tmp_path):
    raw = RawTensor("torch.bfloat16", (2,), b"\x80\x3f\x00\x40")
    put = BlobStore(tmp_path).put(raw)
    assert put.digest == tensor_digest("torch.bfloat16", (2,), b"\x80\x3f\x00\x40")
    assert read_entries(tmp_path / put.ref.path)[0].dtype == "torch.bfloat16"


def test_link_or_copy_links_on_one_filesystem_and_copies_when_links_fail(tmp_path, monkeypatch):
    import errno

    from ikdata.core.store import link_or_copy

    source = tmp_path / "a" / "blob.safetensors"
    source.parent.mkdir()
    source.write_bytes(b"x" * 5_000_000)
    linked = tmp_path / "b" / "blob.safetensors"
    link_or_copy(source, linked)
    assert linked.stat().st_ino == source.stat().st_ino

    def cross_device(*_):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr("os.link", cross_device)  # another filesystem cannot be mounted here
    copied = tmp_path / "c" / "blob.safetensors"
    link_or_copy(source, copied)
    assert copied.read_bytes() == source.read_bytes() and copied.stat().st_ino != source.stat().st_ino
    assert [p.name for p in copied.parent.iterdir()] == ["blob.safetensors"]  # no temp file left
