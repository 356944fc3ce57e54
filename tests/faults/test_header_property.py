"""Finding 5 (issue 9), property-based: ikdata's safetensors header parser accepts exactly the
files the safetensors library accepts. Hypothesis builds valid files and mutates them (types,
offsets, trailing bytes, metadata, nesting, whitespace, duplicate keys), and both parsers judge
every one."""

from __future__ import annotations

import json
import struct

import pytest

hypothesis = pytest.importorskip("hypothesis")
safetensors = pytest.importorskip("safetensors")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ikdata.core.safetensors_format import BITS_BY_CODE, FormatError, parse_header  # noqa: E402

CODES = sorted(BITS_BY_CODE)
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False,
                       allow_infinity=False), st.text(max_size=4))
_json = st.recursive(_json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                     max_leaves=8)


def _safetensors_accepts(data: bytes) -> bool:
    try:
        safetensors.deserialize(data)
    except Exception:  # noqa: BLE001 - any refusal counts
        return False
    return True


def _ikdata_accepts(data: bytes) -> bool:
    try:
        parse_header(data, len(data))
    except FormatError:
        return False
    return True


@st.composite
def _valid(draw) -> tuple[dict, int]:
    """A valid header as a dict (tensor name -> fields) and its data size."""
    tensors, offset = {}, 0
    names = st.one_of(st.just("tensor"), st.text(min_size=0, max_size=4))  # "tensor": the canonical fast path
    for name in draw(st.lists(names, max_size=4, unique=True)):
        if name == "__metadata__":
            continue
        code = draw(st.sampled_from(CODES))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        count = 1
        for d in shape:
            count *= d
        bits = count * BITS_BY_CODE[code]
        if bits % 8:
            shape = shape + [2] if BITS_BY_CODE[code] in (4,) else shape + [4]
            bits *= 2 if BITS_BY_CODE[code] == 4 else 4
        tensors[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + bits // 8]}
        offset += bits // 8
    return tensors, offset


_MUTATIONS = ["none", "float-dim", "string-dim", "string-offset", "negative", "trailing", "short", "junk-after-json",
              "overlap", "gap", "metadata-int", "metadata-null", "metadata-ok", "extra-field", "drop-field",
              "dtype-bad", "dtype-unit-map", "as-array", "nested", "bool-dim", "whitespace", "dup-field",
              "dup-tensor", "big-dim", "top-array", "nan"]


@st.composite
def _file(draw) -> bytes:
    tensors, size = draw(_valid())
    names = list(tensors)
    mutation = draw(st.sampled_from(_MUTATIONS))
    pick = draw(st.sampled_from(names)) if names else None
    header_text = None
    extra = b""
    meta: object = ...
    if pick is not None:
        info = tensors[pick]
        if mutation == "float-dim" and info["shape"]:
            info["shape"][0] = float(info["shape"][0])
        elif mutation == "string-dim" and info["shape"]:
            info["shape"][0] = str(info["shape"][0])
        elif mutation == "bool-dim":
            info["shape"] = info["shape"] + [True]
        elif mutation == "big-dim":
            info["shape"] = info["shape"] + [draw(st.sampled_from([2**63, 2**64 - 1, 2**64, 0]))]
        elif mutation == "string-offset":
            info["data_offsets"] = [str(x) for x in info["data_offsets"]]
        elif mutation == "negative":
            info["data_offsets"] = [info["data_offsets"][0] - 1, info["data_offsets"][1]]
        elif mutation == "overlap" and len(names) > 1:
            other = tensors[names[-1]]
            other["data_offsets"] = [max(0, other["data_offsets"][0] - draw(st.integers(1, 4))),
                                     other["data_offsets"][1]]
        elif mutation == "gap":
            info["data_offsets"] = [x + draw(st.integers(0, 3)) for x in info["data_offsets"]]
        elif mutation == "extra-field":
            info[draw(st.text(max_size=3))] = draw(_json)
        elif mutation == "drop-field":
            del info[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))]
        elif mutation == "dtype-bad":
            info["dtype"] = draw(st.sampled_from(["f32", "", "F33", 3, None, ["F32"]]))
        elif mutation == "dtype-unit-map":
            info["dtype"] = {info["dtype"]: draw(st.sampled_from([None, [], {}]))}
        elif mutation == "as-array":
            tensors[pick] = [info["dtype"], info["shape"], info["data_offsets"]] + draw(
                st.lists(st.integers(0, 2), max_size=1))
        elif mutation == "nested":
            depth = draw(st.sampled_from([10, 124, 125, 126, 127, 500]))
            header_text = json.dumps({pick: None}).replace("null", "{" + json.dumps(info)[1:-1] + ',"x":'
                                                             + "[" * depth + "]" * depth + "}")
        elif mutation == "dup-field":
            body = json.dumps(info)[1:-1]
            key = draw(st.sampled_from(["dtype", "shape", "data_offsets", "zz"]))
            value = json.dumps(info.get(key, 1))
            header_text = json.dumps({pick: None}).replace("null", "{" + body + f',"{key}":{value}' + "}")
        elif mutation == "dup-tensor":
            body = json.dumps(tensors)[1:-1]
            header_text = "{" + body + "," + json.dumps({pick: info})[1:-1] + "}"
        elif mutation == "nan":
            header_text = json.dumps(tensors)[:-1] + ',"q":{"x":NaN}}' if tensors else "{NaN}"
    if mutation == "trailing":
        extra = b"\0" * draw(st.integers(1, 64))
    elif mutation == "short" and size:
        size -= 1
    elif mutation == "metadata-int":
        meta = {"k": draw(st.one_of(st.integers(), st.booleans(), st.none()))}
    elif mutation == "metadata-null":
        meta = None
    elif mutation == "metadata-ok":
        meta = draw(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2))
    elif mutation == "top-array":
        header_text = json.dumps(list(tensors))
    if header_text is None:
        document = dict(tensors) if meta is ... else {"__metadata__": meta, **tensors}
        compact = draw(st.booleans())  # ikdata's canonical form is compact
        header_text = json.dumps(document, ensure_ascii=draw(st.booleans()),
                                 separators=(",", ":") if compact else None)
    if mutation == "whitespace":
        header_text = draw(st.sampled_from(["", " ", "\n", "\t", "\r", "\x0b", "\x0c"])) + header_text \
            + draw(st.sampled_from(["", " ", "  \n", "\x00", "x", "\u00a0"]))
    elif mutation == "junk-after-json":
        header_text += draw(st.sampled_from(["}", "x", "\x00", "{}", "  "]))
    header = header_text.encode("utf-8", "surrogatepass")
    header += b" " * draw(st.sampled_from([-len(header) % 8, 0, 1, 8, 9]))
    return struct.pack("<Q", len(header)) + header + bytes(size) + extra


@settings(max_examples=1500, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(_file())
@example(b'X\x00\x00\x00\x00\x00\x00\x00{"tensor":{"dtype":"BF16","shape":[0,18446744073709551616],'
         b'"data_offsets":[0,0]}}       ')  # a dimension past 64 bits beside a 0: the fast path once took it
def test_ikdata_and_safetensors_agree_on_every_header(data: bytes) -> None:
    assert _ikdata_accepts(data) == _safetensors_accepts(data), data[:400]


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=64))
def test_ikdata_and_safetensors_agree_on_random_bytes(tail: bytes) -> None:
    for data in (tail, struct.pack("<Q", len(tail)) + tail, struct.pack("<Q", max(0, len(tail) - 4)) + tail):
        assert _ikdata_accepts(data) == _safetensors_accepts(data), data


def test_hundred_thousand_nested_brackets_are_a_format_error_not_a_recursion_error() -> None:
    for body in (b"[" * 100_000, b'{"a":' * 100_000, b"[" * 100_000 + b"]" * 100_000):
        data = struct.pack("<Q", len(body)) + body
        with pytest.raises(FormatError, match="deep|JSON"):
            parse_header(data, len(data))
        assert not _safetensors_accepts(data)


def test_canonical_blobs_are_marked_and_others_are_not() -> None:
    from ikdata.core.safetensors_format import encode_header

    header = encode_header("torch.float32", (2, 3), 24)
    assert parse_header(header + bytes(24), len(header) + 24)[0].canonical
    padded = header[8:] + b" " * 8
    other = struct.pack("<Q", len(padded)) + padded + bytes(24)
    assert _safetensors_accepts(other) and not parse_header(other, len(other))[0].canonical
