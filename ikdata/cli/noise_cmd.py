"""``ikdata noise``: print the digest of the noise recipe for a seed and shapes (and save the tensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._declared import FeatureCommand
from ikdata.cli._options import JsonOpt, QuietOpt

NOISE_EXAMPLES = """
\b
Examples:
  ikdata noise 42 --shape video=1,128,3,4,6 --shape audio=1,8,25,16
  ikdata noise 42 --shape video=1,4,3,16,16 --save noise.safetensors --json

Seeds run from 0 to 2**64-1; at most 8 dimensions a stream, 4GiB in all unless --max-bytes says more.
"""


@app.command("noise", epilog=NOISE_EXAMPLES, cls=FeatureCommand)  # offered while a feature declares it
def noise_command(
        seed: Annotated[int, typer.Argument(help="The seed of the CPU generator.", show_default=False)],
        shape: Annotated[list[str], typer.Option(
            "--shape", help="NAME=D0,D1,... for each stream, in the order they are drawn (video first).")],
        save: Annotated[Optional[Path], typer.Option(
            "--save", help="Also write the tensors to this safetensors file (keys: stream names).")] = None,
        max_bytes: Annotated[Optional[str], typer.Option(
            "--max-bytes", help="Draw at most this much noise, e.g. 16GiB (default 4GiB).", show_default=False)] = None,
        json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Draw the initial noise of recipe cpu-randn-float32/1 and print its digest, so another engine can prove
    it started from the same noise."""
    from ikdata.capture.config import parse_size
    from ikdata.diffusion import noise
    from ikdata.core.errors import UsageError

    noise.check_seed(seed)
    streams = [noise.parse_shape(s) for s in shape]
    noise.check_streams(streams)
    try:
        cap = parse_size(max_bytes) if max_bytes is not None else noise.DEFAULT_MAX_BYTES
    except UsageError as exc:
        raise UsageError(f"--max-bytes: {exc}") from None
    noise.check_size(streams, cap)  # before anything is allocated
    tensors = noise.draw(seed, streams)
    found = noise.digest((s.name, s.shape, tensors[s.name]) for s in streams)
    if save is not None:
        _save(save, tensors, found)
    document = noise.describe(seed, streams, found)
    if save is not None:
        document["saved"] = str(save)
    o = out.Output(json=json_, quiet=quiet)
    if not o.human:
        o.result(document)
        return
    out.info(f"recipe {noise.RECIPE}  seed {seed}")
    for s in streams:
        out.info(f"  {s.name}: {list(s.shape)}")
    out.info(f"digest {found}")
    if save is not None:
        out.info(f"saved to {save}")


def _save(path: Path, tensors: dict, found: str) -> None:
    from safetensors.torch import save

    from ikdata.diffusion import noise
    from ikdata.core.store import write_atomic

    data = save(tensors, metadata={"recipe": noise.RECIPE, "digest": found})
    write_atomic(path, [data])
