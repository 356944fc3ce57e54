"""``ikdata index``: rebuild the lookup index (derived data) of a dataset."""

from __future__ import annotations

from typing import Annotated

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import DatasetArg, JsonOpt, QuietOpt


@app.command()
def index(path: DatasetArg, json_: JsonOpt = False,
          refresh: Annotated[bool, typer.Option("--refresh", help="Update it instead of rebuilding.")] = False,
          quiet: QuietOpt = False) -> None:
    """Rebuild the uuid index that show and lineage use (it is also refreshed on every use)."""
    from ikdata.core.errors import UsageError
    from ikdata.core.index import open_index

    if not (path / "workloads").is_dir():
        raise UsageError(f"{path}: not an ikdata dataset (no workloads/ folder)")
    try:
        opened, result = open_index(path, rebuild=not refresh)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the index ({exc.strerror}); lookups will scan the files") from exc
    with opened:
        counts = opened.counts()
    document = {"path": str(path), "rows": sum(counts.values()), "definitions": len(counts),
                "files_indexed": result.rebuilt + result.extended, "files_dropped": result.dropped}
    out.Output(json=json_, quiet=quiet).result(document, lambda: out.info(
        f"indexed {document['rows']} workloads of {document['definitions']} definitions "
        f"in {document['files_indexed']} files ({path})"))
