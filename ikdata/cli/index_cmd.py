"""``ikdata index``: rebuild the lookup index (derived data) of a dataset."""

from __future__ import annotations

from typing import Annotated

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import DatasetArg, JsonOpt, QuietOpt

INDEX_EXAMPLES = """
\b
Examples:
  ikdata index shared/gemm
  ikdata index shared/gemm --refresh --json
"""


@app.command(epilog=INDEX_EXAMPLES)
def index(path: DatasetArg, json_: JsonOpt = False,
          refresh: Annotated[bool, typer.Option("--refresh", help="Update it instead of rebuilding.")] = False,
          quiet: QuietOpt = False) -> None:
    """Rebuild the uuid index that show, lineage and stats use (it is also refreshed on every use).

    Exit 1 when the index's place holds a link, a special file or a database that is not an
    ikdata index (left untouched), or when a row file is refused by the path rule (not indexed).
    """
    import os
    import sqlite3

    from ikdata.core.dataset import Dataset
    from ikdata.core.errors import FileSystemError, IkdataError
    from ikdata.core.index import INDEX_FILE, open_index, record_files

    ds = Dataset.open(path)  # a folder holding no dataset is refused (NotADataset), and nothing is written
    try:
        opened, result = open_index(path, rebuild=not refresh, files=record_files(ds))
    except OSError as exc:  # the OS said no (read-only, full): a problem, exit 1, like every such refusal
        named = exc.filename if exc.filename and ".tmp-" not in os.fspath(exc.filename) else path / INDEX_FILE
        raise FileSystemError(exc, operation="write the index (lookups will scan the files)", filename=named) from exc
    except sqlite3.Error as exc:  # a full disk or a broken file system, as SQLite says it
        raise IkdataError(f"{path}: cannot write the index ({exc}); free some space or use a writable "
                          "folder; lookups will scan the files meanwhile") from exc
    with opened:
        counts = opened.counts()
        opened.blob_totals(ds.store)  # the stored blob sizes too, so the next stats reads no blob folder
    document = {"path": str(path), "rows": sum(counts.values()), "definitions": len(counts),
                "files_indexed": result.rebuilt + result.extended, "files_dropped": result.dropped}
    o = out.Output(json=json_, quiet=quiet)
    o.result(document, lambda: out.info(
        f"indexed {document['rows']} workloads of {document['definitions']} definitions "
        f"in {document['files_indexed']} files ({path})"))
    o.problems(ds.problems)
    o.exit(ds.problems)
