"""``ikdata pack`` and ``ikdata unpack``: small blobs into packs (fewer files, fewer requests) and back."""

from __future__ import annotations

from typing import Annotated

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import DatasetArg, JsonOpt, QuietOpt

PACK_EXAMPLES = """
\b
Examples:
  ikdata pack shared/gemm
  ikdata pack shared/gemm --threshold 65536 --pack-bytes 134217728 --json
"""
UNPACK_EXAMPLES = """
\b
Examples:
  ikdata unpack shared/gemm   (before handing the folder to flashinfer-bench)
"""


@app.command(epilog=PACK_EXAMPLES)
def pack(path: DatasetArg,
         threshold: Annotated[int, typer.Option("--threshold", help="Pack loose blobs smaller than this many "
                                                "bytes.")] = 1 << 20,
         pack_bytes: Annotated[int, typer.Option("--pack-bytes", help="About this many bytes per pack.")] = 64 << 20,
         json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Move small loose blobs into packs (blob/packs/); rows keep naming them as before."""
    from ikdata.core.dataset import require_dataset
    from ikdata.ops.pack import pack_dataset

    require_dataset(path)  # a folder holding no dataset: one message, nothing written (issue 27)
    result = pack_dataset(path, threshold=threshold, pack_bytes=pack_bytes)
    o = out.Output(json=json_, quiet=quiet)
    if result.skipped:
        o.problems(result.skipped, label="left loose")
    o.result(result.to_dict(), lambda: out.info(
        f"{path}: packed {result.packed} blob(s), {out.human_bytes(result.bytes)}, into {len(result.packs)} pack(s); "
        f"removed {result.removed} loose copies"))
    o.exit(result.skipped)  # exit 1 when a blob was left loose, as every command with problems


@app.command(epilog=UNPACK_EXAMPLES)
def unpack(path: DatasetArg, json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Write every packed blob back as a loose file and remove the packs (flashinfer-bench reads only loose blobs)."""
    from ikdata.core.dataset import require_dataset
    from ikdata.ops.pack import unpack_dataset

    require_dataset(path)
    result = unpack_dataset(path)
    out.Output(json=json_, quiet=quiet).result(result.to_dict(), lambda: out.info(
        f"{path}: wrote {result.written} loose blob(s); removed {len(result.packs_removed)} pack(s)"))
