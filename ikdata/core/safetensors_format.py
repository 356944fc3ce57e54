"""Read and write safetensors files without torch, accepting exactly what safetensors accepts.

A blob is a safetensors file holding exactly one tensor under the key ``"tensor"``
with no metadata, in one canonical header (:func:`encode_header`), so equal tensors
give byte-identical files. :func:`parse_header` is strict in the way the safetensors
library (``read_metadata`` in its Rust core) is: an 8-byte length of at most 100,000,000,
a UTF-8 JSON object nested at most 127 deep, every tensor's ``dtype``, integer ``shape`` and
integer ``data_offsets`` present exactly once, offsets contiguous from 0 in offset order,
each tensor's bytes exactly its shape's size, ``__metadata__`` a string-to-string map, and
the data covering the rest of the file exactly: no gap, no overlap, no trailing byte.
Nothing is parsed recursively before its depth is known, so hostile headers give a
:class:`FormatError`, never a ``RecursionError``.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field, replace
from typing import Any

BLOB_KEY = "tensor"
MAX_HEADER_BYTES = 100_000_000  # the limit safetensors itself enforces
MAX_DEPTH = 127  # serde_json's recursion limit: 128 nested arrays/objects are refused
_U64_MAX = (1 << 64) - 1

# torch dtype name -> (safetensors code, item size in bytes): what ikdata stores
DTYPES: dict[str, tuple[str, int]] = {
    "torch.float64": ("F64", 8), "torch.float32": ("F32", 4), "torch.float16": ("F16", 2),
    "torch.bfloat16": ("BF16", 2), "torch.float8_e4m3fn": ("F8_E4M3", 1),
    "torch.float8_e5m2": ("F8_E5M2", 1), "torch.float8_e8m0fnu": ("F8_E8M0", 1), "torch.int64": ("I64", 8), "torch.int32": ("I32", 4),
    "torch.int16": ("I16", 2), "torch.int8": ("I8", 1), "torch.uint8": ("U8", 1),
    "torch.uint16": ("U16", 2), "torch.uint32": ("U32", 4), "torch.uint64": ("U64", 8),
    "torch.bool": ("BOOL", 1), "torch.complex64": ("C64", 8),
}
TORCH_NAME_BY_CODE = {code: name for name, (code, _) in DTYPES.items()}

# every dtype safetensors reads, with its size in bits; codes torch lacks get "safetensors.<code>"
BITS_BY_CODE: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
    "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
_FIELDS = ("dtype", "shape", "data_offsets")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_CANONICAL = re.compile(rb'\{"tensor":\{"dtype":"([A-Z0-9_]+)","shape":\[((?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*)?\],'
                        rb'"data_offsets":\[0,(0|[1-9][0-9]*)\]\}\} *')


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies in a safetensors file."""

    key: str
    dtype: str  # torch name, e.g. "torch.bfloat16" ("safetensors.F4" for codes torch lacks)
    shape: tuple[int, ...]
    start: int  # absolute byte offset of the data in the file
    end: int
    canonical: bool = field(default=False, compare=False)  # the file is a canonical one-tensor ikdata blob

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


def canonical_problem(entries: list[TensorEntry] | tuple[TensorEntry, ...]) -> str | None:
    """Why a file is not in the canonical one-tensor blob form, or None if it is.

    Args:
        entries: what :func:`parse_header` found in the file (it marks a canonical header).
    """
    if len(entries) != 1 or entries[0].key != BLOB_KEY:
        return (f"holds tensors {[e.key for e in entries]}; an ikdata blob holds exactly one, "
                f"under the key {BLOB_KEY!r}")
    if entries[0].dtype not in DTYPES:
        return f"holds dtype {entries[0].dtype}, which ikdata does not store"
    if not entries[0].canonical:
        return ("its header is not the canonical one (extra metadata, fields, spacing or key order); "
                "equal tensors must give byte-identical blobs")
    return None


def parse_header(prefix: bytes, file_size: int) -> list[TensorEntry]:
    """Parse and check a safetensors header from the file's first bytes.

    Args:
        prefix: at least the first 8 bytes of the file, and the whole header if it fits.
        file_size: the size of the whole file, to check every offset against.

    Returns:
        The tensors in offset order.

    Raises:
        FormatError: with a message saying which rule is broken; exactly the files the
            safetensors library refuses.

    Example:
        >>> data = encode_header("torch.float32", (2,), 8) + bytes(8)
        >>> parse_header(data, len(data))[0].shape
        (2,)
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
    raw = bytes(prefix[8:8 + length])
    fast = _canonical_fast_path(raw, length, file_size)
    if fast is not None:
        return fast
    return _check_layout(prefix, length, file_size, _read_tensors(raw))


def _canonical_fast_path(raw: bytes, length: int, file_size: int) -> list[TensorEntry] | None:
    """A well-formed one-tensor header in the canonical shape (what ikdata reads most), by one regular
    expression; None sends anything else, including anything wrong, to the full parser."""
    match = _CANONICAL.fullmatch(raw)
    if match is None:
        return None
    code = match.group(1).decode()
    bits = BITS_BY_CODE.get(code)
    if bits is None:
        return None
    dims = tuple(map(int, match.group(2).split(b","))) if match.group(2) else ()
    end = int(match.group(3))
    count = 1
    for dim in dims:  # a dimension past 64 bits is refused by safetensors even where another is 0
        count *= dim
        if count > _U64_MAX or dim > _U64_MAX:
            return None
    if count * bits > _U64_MAX or count * bits % 8 or count * bits // 8 != end or 8 + length + end != file_size:
        return None
    core = match.end(3) + 3  # the bytes before the padding
    dtype = TORCH_NAME_BY_CODE.get(code)
    canonical = dtype is not None and len(raw) - core == -core % 8
    return [TensorEntry(BLOB_KEY, dtype or f"safetensors.{code}", dims, 8 + length, 8 + length + end, canonical)]


def _read_tensors(raw: bytes) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """Every tensor of a header as (dtype code, shape, begin, end), read as safetensors reads it."""
    header = _load_json(raw)
    if not isinstance(header, _Object):
        raise FormatError(f"header is a JSON {_kind(header)}, expected an object")
    tensors: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
    seen_metadata = False
    for key, info in header.pairs:
        if key == "__metadata__":
            if seen_metadata:
                raise FormatError("header names '__metadata__' twice")
            seen_metadata = True
            _check_metadata(info)
            continue
        tensors[key] = _tensor_info(key, info)  # a repeated tensor name: the last one counts, as in safetensors
    return tensors


def _check_layout(prefix: bytes, length: int, file_size: int,
                  tensors: dict[str, tuple[str, tuple[int, ...], int, int]]) -> list[TensorEntry]:
    """Offsets contiguous from 0, sizes by shape, data covering the file exactly: the entries."""
    data_size = file_size - 8 - length
    entries = []
    position = 0
    for key, (code, shape, begin, end) in sorted(tensors.items(), key=lambda item: item[1][2:]):
        if begin != position or end < begin:
            raise FormatError(f"tensor {key!r}: offsets {begin}..{end} do not follow on from byte {position}; "
                              "tensors must cover the data contiguously from 0, without gaps or overlaps")
        position = end
        count = 1
        for dim in shape:  # as safetensors: every partial product must fit in 64 bits
            count *= dim
            if count > _U64_MAX:
                raise FormatError(f"tensor {key!r}: shape {list(shape)} overflows 64 bits")
        bits = count * BITS_BY_CODE[code]
        if bits > _U64_MAX:
            raise FormatError(f"tensor {key!r}: shape {list(shape)} overflows 64 bits")
        if bits % 8:
            raise FormatError(f"tensor {key!r}: {code} {list(shape)} is not a whole number of bytes")
        if end - begin != bits // 8:
            raise FormatError(f"tensor {key!r}: offsets {begin}..{end} do not hold {bits // 8} bytes "
                              f"for {code} {list(shape)}")
        dtype = TORCH_NAME_BY_CODE.get(code, f"safetensors.{code}")
        entries.append(TensorEntry(key, dtype, shape, 8 + length + begin, 8 + length + end))
    if position > data_size:
        raise FormatError(f"data ends at byte {position} but the file holds only {data_size} data bytes "
                          "(truncated?)")
    if position < data_size:
        raise FormatError(f"{data_size - position} bytes after the last tensor's data; a safetensors file "
                          "ends where its data ends")
    if len(entries) == 1 and entries[0].key == BLOB_KEY and entries[0].dtype in DTYPES:
        only = entries[0]
        if prefix[:8 + length] == encode_header(only.dtype, only.shape, only.nbytes):
            entries[0] = replace(only, canonical=True)
    return entries


class _Object:
    """A JSON object as its (key, value) pairs in order, duplicates kept (safetensors refuses some)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


class _NotU64:
    """A JSON number safetensors cannot read as an unsigned 64-bit integer (negative, -0, or huge)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_int(text: str) -> Any:
    if len(text) > 400:  # beyond any double, as serde_json sees it (and before int() parses it)
        raise FormatError(f"number {text[:20]}... is out of range")
    value = int(text)
    if 0 <= value <= _U64_MAX and not text.startswith("-"):
        return value
    try:
        float(value)  # serde_json reads other integers as doubles: a finite one is fine outside shape/offsets
    except OverflowError:
        raise FormatError(f"number {text[:20]}... is out of range") from None
    return _NotU64(text)


def _parse_float(text: str) -> Any:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise FormatError(f"number {text[:20]} is out of range")
    return value


def _parse_constant(text: str) -> Any:
    raise FormatError(f"{text} is not JSON")


def _load_json(raw: bytes) -> Any:
    """The header's JSON, parsed as serde_json parses it (strict UTF-8, depth at most 127, no NaN)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"header is not UTF-8: {exc}") from None
    depth = _max_depth(raw)
    if depth > MAX_DEPTH:
        raise FormatError(f"header nests arrays and objects {depth} deep; safetensors allows {MAX_DEPTH}")
    try:
        value = json.loads(text, object_pairs_hook=_Object, parse_int=_parse_int, parse_float=_parse_float,
                           parse_constant=_parse_constant)
    except FormatError:
        raise
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"header is not valid JSON: {exc}") from None
    if "\\u" in text:
        _check_surrogates(value)
    return value


def _max_depth(raw: bytes) -> int:
    """How deep brackets nest outside strings, counted without recursion."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return 0
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw))
    depth = deepest = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _check_surrogates(value: Any) -> None:
    """Refuse lone UTF-16 surrogates (``"\\ud800"``), which Python's json accepts and serde_json does not."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise FormatError("header holds a lone UTF-16 surrogate escape") from None
        elif isinstance(item, _Object):
            for key, inner in item.pairs:
                stack += (key, inner)
        elif isinstance(item, list):
            stack += item


def _kind(value: Any) -> str:
    if isinstance(value, _Object):
        return "object"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    return "number"


def _u64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        shown = value.text if isinstance(value, _NotU64) else json.dumps(value) if not isinstance(
            value, (_Object, list)) else _kind(value)
        raise FormatError(f"{what} is {shown}; expected an unsigned integer")
    return value


def _check_metadata(info: Any) -> None:
    if info is None:
        return
    if not isinstance(info, _Object):
        raise FormatError(f"'__metadata__' is a JSON {_kind(info)}; expected an object of strings")
    for key, value in info.pairs:
        if not isinstance(value, str):
            raise FormatError(f"'__metadata__' entry {key!r} is a {_kind(value)}; expected a string")


def _dtype_code(key: str, value: Any) -> str:
    if isinstance(value, _Object) and len(value.pairs) == 1 and value.pairs[0][1] is None:
        value = value.pairs[0][0]  # serde reads {"F32": null} as the unit variant F32
    if not isinstance(value, str) or value not in BITS_BY_CODE:
        raise FormatError(f"tensor {key!r}: malformed or unsupported entry: dtype "
                          f"{value if isinstance(value, str) else _kind(value)!r} is not a safetensors dtype; "
                          f"expected one of {sorted(BITS_BY_CODE)}")
    return value


def _tensor_info(key: str, info: Any) -> tuple[str, tuple[int, ...], int, int]:
    """(dtype code, shape, begin, end) of one tensor entry, read as serde reads ``TensorInfo``."""
    if isinstance(info, list):  # serde also reads a struct from a sequence of its fields, in order
        if len(info) != 3:
            raise FormatError(f"tensor {key!r}: an entry given as an array needs exactly 3 items, has {len(info)}")
        fields = dict(zip(_FIELDS, info))
    elif isinstance(info, _Object):
        fields = {}
        for name, value in info.pairs:
            if name in _FIELDS:
                if name in fields:
                    raise FormatError(f"tensor {key!r}: field {name!r} appears twice")
                fields[name] = value
        missing = [name for name in _FIELDS if name not in fields]
        if missing:
            raise FormatError(f"tensor {key!r}: missing {missing}")
    else:
        raise FormatError(f"tensor {key!r}: entry is a JSON {_kind(info)}; expected an object with "
                          "dtype, shape and data_offsets")
    code = _dtype_code(key, fields["dtype"])
    shape, offsets = fields["shape"], fields["data_offsets"]
    if not isinstance(shape, list):
        raise FormatError(f"tensor {key!r}: shape is a JSON {_kind(shape)}; expected an array of integers")
    dims = tuple(_u64(d, f"tensor {key!r}: a dimension") for d in shape)
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise FormatError(f"tensor {key!r}: data_offsets must be an array of 2 integers")
    begin, end = (_u64(x, f"tensor {key!r}: an offset") for x in offsets)
    return code, dims, begin, end
