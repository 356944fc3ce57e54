"""Read and write single-tensor safetensors files without torch.

A blob is a safetensors file holding exactly one tensor under the key ``"tensor"``
with no metadata, so equal tensors give byte-identical files. Reading parses the
header directly and checks every offset against the file size, so a truncated
file or an absurd header length is reported, never trusted.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass

BLOB_KEY = "tensor"
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the limit safetensors itself enforces

# torch dtype name -> (safetensors code, item size in bytes)
DTYPES: dict[str, tuple[str, int]] = {
    "torch.float64": ("F64", 8), "torch.float32": ("F32", 4), "torch.float16": ("F16", 2),
    "torch.bfloat16": ("BF16", 2), "torch.float8_e4m3fn": ("F8_E4M3", 1),
    "torch.float8_e5m2": ("F8_E5M2", 1), "torch.int64": ("I64", 8), "torch.int32": ("I32", 4),
    "torch.int16": ("I16", 2), "torch.int8": ("I8", 1), "torch.uint8": ("U8", 1),
    "torch.uint16": ("U16", 2), "torch.uint32": ("U32", 4), "torch.uint64": ("U64", 8),
    "torch.bool": ("BOOL", 1), "torch.complex64": ("C64", 8),
}
TORCH_NAME_BY_CODE = {code: name for name, (code, _) in DTYPES.items()}


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies in a safetensors file."""

    key: str
    dtype: str  # torch name, e.g. "torch.bfloat16"
    shape: tuple[int, ...]
    start: int  # absolute byte offset of the data in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class FormatError(ValueError):
    """The bytes are not a well-formed safetensors file."""


def encode_header(dtype: str, shape: tuple[int, ...] | list[int], nbytes: int) -> bytes:
    """The 8-byte length and canonical JSON header of a one-tensor blob."""
    code = DTYPES[dtype][0]
    header = json.dumps({BLOB_KEY: {"dtype": code, "shape": list(shape), "data_offsets": [0, nbytes]}},
                        separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header


def parse_header(prefix: bytes, file_size: int) -> list[TensorEntry]:
    """Parse a safetensors header from the file's first bytes.

    Args:
        prefix: at least the first 8 bytes of the file, and the whole header if it fits.
        file_size: the size of the whole file, to check every offset against.

    Raises:
        FormatError: with a message saying which bound is broken.
    """
    if file_size < 8 or len(prefix) < 8:
        raise FormatError(f"file is {file_size} bytes, too short for a safetensors header")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_HEADER_BYTES:
        raise FormatError(f"header length {length} is absurd (limit {MAX_HEADER_BYTES})")
    if 8 + length > file_size:
        raise FormatError(f"header claims {length} bytes but the file holds {file_size - 8} after the length")
    if len(prefix) < 8 + length:
        raise FormatError("header not fully read")
    try:
        header = json.loads(prefix[8:8 + length])
    except ValueError as exc:
        raise FormatError(f"header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise FormatError("header is not a JSON object")
    entries = []
    data_size = file_size - 8 - length
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype = TORCH_NAME_BY_CODE[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"tensor {key!r}: malformed or unsupported entry {info!r}") from exc
        expected = math.prod(shape) * DTYPES[dtype][1]
        if not 0 <= begin <= end or end - begin != expected:
            raise FormatError(f"tensor {key!r}: offsets {begin}..{end} do not hold {expected} bytes "
                              f"for {dtype} {list(shape)}")
        if end > data_size:
            raise FormatError(f"tensor {key!r}: data ends at byte {end} but the file holds only "
                              f"{data_size} data bytes (truncated?)")
        entries.append(TensorEntry(key, dtype, shape, 8 + length + begin, 8 + length + end))
    return entries
