"""The noise recipe ``cpu-randn-float32/1``: the initial noise of a diffusion run, the same for every engine.

The recipe (another engine can follow it without ikdata)::

    g = torch.Generator(device="cpu").manual_seed(seed)
    for name, shape in shapes:          # in order: "video" first, then "audio" when the model makes audio
        noise[name] = torch.randn(shape, generator=g, dtype=torch.float32)

The numbers are drawn on the CPU and only then moved to a device: CUDA's generator gives other numbers
for the same seed. For a Diffusers pipeline called with ``generator=torch.Generator("cpu").manual_seed(seed)``
these are the pipeline's own first draws (LTX-2: video, then audio), in the unpacked latent layout.

The digest hashes the recipe name, then for each stream ``|name:d0xd1x...|`` and its float32 bytes
(C order, little-endian), in order: equal digests mean identical noise. It is the digest the earlier
clip tool printed as ``noise_sha256`` for the same seed and shapes.

The digest part is torch-free (numpy arrays or raw float32 buffers); :func:`draw` imports torch lazily.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ikdata.core.digest import parts_digest
from ikdata.core.errors import UsageError

RECIPE = "cpu-randn-float32/1"  # bump if the recipe above ever changes
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
SEED_MAX = (1 << 64) - 1  # torch.Generator.manual_seed takes 0 .. 2**64-1 (a negative seed s wraps to s + 2**64)
MAX_DIMS = 8  # a latent has at most 5 (batch, channels, frames, height, width); 8 leaves room
DEFAULT_MAX_BYTES = 4 << 30  # `ikdata noise` draws at most this much unless --max-bytes says more


@dataclass(frozen=True)
class Stream:
    """One stream of the recipe: its name and the shape drawn for it."""

    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def parse_shape(text: str) -> Stream:
    """A stream from ``NAME=d0,d1,...`` (``video=1,128,3,4,6``).

    Raises:
        UsageError: the text is not a name, '=' and positive integers separated by commas.

    Example:
        >>> parse_shape("audio=1,8,25,16")
        Stream(name='audio', shape=(1, 8, 25, 16))
    """
    name, sep, dims = str(text).partition("=")
    name = name.strip()
    parts = [p.strip() for p in dims.split(",")] if sep else []
    if not sep or not _NAME.match(name) or not parts or not all(_dim(p) for p in parts):
        raise UsageError(f"bad --shape {text!r}; expected NAME=D0,D1,... with positive integers, "
                         "e.g. video=1,128,3,4,6")
    if len(parts) > MAX_DIMS:
        raise UsageError(f"bad --shape {name}=...: {len(parts)} dimensions; expected at most {MAX_DIMS}")
    return Stream(name, tuple(int(p) for p in parts))


def _dim(text: str) -> bool:
    """Whether ``text`` is a positive dimension in ASCII digits (no more than 18 of them)."""
    return text.isascii() and text.isdigit() and len(text) <= 18 and int(text) > 0


def seed_refusal(seed: object) -> str | None:
    """Why ``seed`` cannot seed the recipe's generator (what was expected), or None."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        return f"seed {seed!r} is out of range; expected an integer from 0 to 2**64-1 ({SEED_MAX})"
    return None


def check_seed(seed: object, *, option: str = "SEED") -> int:
    """``seed`` if the recipe's generator takes it.

    Raises:
        UsageError: naming ``option``.
    """
    refusal = seed_refusal(seed)
    if refusal is not None:
        raise UsageError(f"{option}: {refusal}")
    return seed  # type: ignore[return-value]


def total_bytes(streams: Sequence[Stream]) -> int:
    """The float32 bytes :func:`draw` allocates for ``streams``."""
    return 4 * sum(s.numel for s in streams)


def check_size(streams: Sequence[Stream], max_bytes: int, *, option: str = "--max-bytes") -> None:
    """Refuse streams whose noise would take more than ``max_bytes`` before anything is drawn.

    Raises:
        UsageError: naming the size, the cap and ``option`` that raises it.
    """
    need = total_bytes(streams)
    if need > max_bytes:
        raise UsageError(f"the noise of {', '.join(f'{s.name}={list(s.shape)}' for s in streams)} takes {need:,} "
                         f"bytes, more than the cap of {max_bytes:,}; pass {option} SIZE to draw more")


def check_streams(streams: Sequence[Stream]) -> None:
    """Refuse an empty list or a name given twice (the order is part of the recipe).

    Raises:
        UsageError: naming the repeated stream.
    """
    if not streams:
        raise UsageError("no stream given; pass --shape NAME=D0,D1,... once per stream, video first")
    seen: set[str] = set()
    for s in streams:
        if s.name in seen:
            raise UsageError(f"stream {s.name!r} given twice; each stream is drawn once, in order")
        seen.add(s.name)


def digest(streams: Iterable[tuple[str, Sequence[int], Any]]) -> str:
    """The recipe digest of ``(name, shape, float32 data)`` triples, in order.

    ``data`` is a numpy float32 array, a CPU float32 torch tensor, or a buffer of float32 bytes.

    Raises:
        UsageError: data that is not float32 or whose size disagrees with its shape.
    """
    def parts() -> Iterable[bytes | memoryview]:
        yield RECIPE.encode()
        for name, shape, data in streams:
            shape = tuple(int(d) for d in shape)
            yield f"|{name}:{'x'.join(str(d) for d in shape)}|".encode()
            yield _float32_bytes(name, shape, data)

    return parts_digest(parts())


def _float32_bytes(name: str, shape: tuple[int, ...], data: Any) -> memoryview:
    module = type(data).__module__
    if module.startswith("torch"):
        if str(data.dtype) != "torch.float32":
            raise UsageError(f"noise stream {name!r} is {data.dtype}; the recipe draws float32")
        data = data.detach().to("cpu").contiguous().numpy()
    if module == "numpy" or hasattr(data, "dtype"):
        if str(data.dtype) != "float32":
            raise UsageError(f"noise stream {name!r} is {data.dtype}; the recipe draws float32")
        if tuple(data.shape) != shape:
            raise UsageError(f"noise stream {name!r} has shape {list(data.shape)}, expected {list(shape)}")
        import numpy as np

        data = np.ascontiguousarray(data).astype("<f4", copy=False)
    view = memoryview(data).cast("B")
    expected = 4
    for d in shape:
        expected *= d
    if view.nbytes != expected:
        raise UsageError(f"noise stream {name!r} holds {view.nbytes} bytes, expected {expected} for {list(shape)}")
    return view


def draw(seed: int, streams: Sequence[Stream]) -> dict[str, Any]:
    """The recipe's tensors: {name: CPU float32 torch tensor}, drawn in order from one CPU generator.

    Example:
        >>> noise = draw(7, [Stream("video", (1, 4, 3, 4, 4)), Stream("audio", (1, 2, 5, 2))])
        >>> digest((n, t.shape, t) for n, t in noise.items())
    """
    import torch

    g = torch.Generator(device="cpu").manual_seed(int(seed))
    return {s.name: torch.randn(s.shape, generator=g, dtype=torch.float32) for s in streams}


def recipe_digest(seed: int, streams: Sequence[Stream]) -> str:
    """Draw the recipe's noise for ``seed`` and return its digest."""
    noise = draw(seed, streams)
    return digest((s.name, s.shape, noise[s.name]) for s in streams)


def describe(seed: int | None, streams: Sequence[Stream], noise_digest: str | None) -> dict[str, Any]:
    """The recipe as recorded in a trajectory: name, seed, streams in order, digest."""
    return {"recipe": RECIPE, "seed": seed, "streams": [{"name": s.name, "shape": list(s.shape)} for s in streams],
            "digest": noise_digest}


def streams_of(mapping: Mapping[str, Sequence[int]]) -> list[Stream]:
    """Streams from an ordered ``{name: shape}`` mapping."""
    return [Stream(n, tuple(int(d) for d in shape)) for n, shape in mapping.items()]


__all__ = ["RECIPE", "SEED_MAX", "MAX_DIMS", "DEFAULT_MAX_BYTES", "Stream", "parse_shape", "check_streams",
           "seed_refusal", "check_seed", "total_bytes", "check_size", "digest", "draw", "recipe_digest", "describe",
           "streams_of"]
