"""Load a blob for replay, verifying its bytes against the digest its name gives, with one read.

A blob up to 1 MiB is read once into memory, its header parsed, its tensor hashed and
wrapped as a torch tensor without a copy. A larger one is hashed through ``mmap``
(:func:`ikdata.core.store.rehash_file`) and loaded memory-mapped by safetensors, straight
onto the device. Either way a blob whose content does not match its name is
refused, so a corrupt file gives an error, never a false verdict.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ikdata.core.digest import tensor_digest
from ikdata.core.errors import BlobCorrupted, BlobNotFound
from ikdata.core.records import TensorRef
from ikdata.core.safetensors_format import FormatError, parse_header
from ikdata.core.store import BlobStore, digest_from_path, rehash_file

READ_WHOLE_UP_TO = 1 << 20  # as the store's rehash: smaller files are read whole, larger ones mapped

_RESTORE = "restore it from where the dataset came from (ikdata validate --deep lists every such blob)"


def load_verified(store: BlobStore, path: Path, ref: TensorRef, *, device: str = "cpu") -> tuple[torch.Tensor, str]:
    """The tensor a descriptor names and its digest, recomputed from the file's bytes.

    Raises:
        BlobNotFound: the file is missing.
        BlobCorrupted: the file is truncated or malformed, lacks the key, or its content's
            digest differs from the digest in its name.
    """
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        packed = store.packed_ref(ref)
        if packed is not None:  # a small blob in a pack: its slice read once and hashed (core.packs)
            return _packed_tensor(store, packed, device), packed.digest
        raise BlobNotFound(f"{ref.path}: blob not found", path=ref.path, digest=digest_from_path(ref.path)) from None
    if size <= READ_WHOLE_UP_TO:
        tensor, digest = _read_whole(path, ref, size)
        tensor = tensor if device == "cpu" else tensor.to(device)
    else:
        check = rehash_file(path)
        if check.error:
            raise BlobCorrupted(f"{ref.path}: {check.error}; {_RESTORE}", path=ref.path)
        keys = [e.key for e in check.entries]
        if ref.tensor_key not in keys:
            raise BlobCorrupted(f"{ref.path}: no tensor {ref.tensor_key!r} (holds {keys}); {_RESTORE}", path=ref.path)
        digest = check.digests[keys.index(ref.tensor_key)]
        tensor = store.get(ref, device=device)
    named = digest_from_path(ref.path)
    if named is not None and digest != named:
        raise BlobCorrupted(f"{ref.path}: the content's digest is {digest}, but the blob is named {named}: the "
                            f"file is corrupt; {_RESTORE}", path=ref.path, digest=named)
    return tensor, digest


def _read_whole(path: Path, ref: TensorRef, size: int) -> tuple[torch.Tensor, str]:
    data = bytearray(size)
    with open(path, "rb") as stream:
        got = stream.readinto(data)
    try:
        if got != size:
            raise FormatError(f"read {got} of {size} bytes")
        entries = {e.key: e for e in parse_header(bytes(data[:min(size, 8 + _header_length(data))]), size)}
    except FormatError as exc:
        raise BlobCorrupted(f"{ref.path}: {exc}; {_RESTORE}", path=ref.path) from exc
    entry = entries.get(ref.tensor_key)
    if entry is None:
        raise BlobCorrupted(f"{ref.path}: no tensor {ref.tensor_key!r} (holds {sorted(entries)}); {_RESTORE}",
                            path=ref.path)
    view = memoryview(data)[entry.start:entry.end]
    digest = tensor_digest(entry.dtype, entry.shape, view)
    dtype = getattr(torch, entry.dtype.removeprefix("torch."))
    if entry.end == entry.start:
        return torch.empty(entry.shape, dtype=dtype), digest
    flat = torch.frombuffer(data, dtype=torch.uint8, offset=entry.start, count=entry.end - entry.start)
    return flat.view(dtype).reshape(entry.shape), digest


def _packed_tensor(store: BlobStore, packed, device: str) -> torch.Tensor:
    """A packed tensor, verified against its digest by :func:`ikdata.core.packs.read_packed`."""
    from ikdata.core.packs import read_packed

    data = read_packed(store.root, packed)
    dtype = getattr(torch, packed.dtype.removeprefix("torch."))
    if not data:
        tensor = torch.empty(packed.shape, dtype=dtype)
    else:
        tensor = torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(packed.shape)
    return tensor if device == "cpu" else tensor.to(device)


def _header_length(data: bytearray) -> int:
    return int.from_bytes(data[:8], "little") if len(data) >= 8 else 0


__all__ = ["READ_WHOLE_UP_TO", "load_verified"]
