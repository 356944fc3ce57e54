"""Recognise a FlashInfer folder given to ``ikdata import`` and stage it as an ikdata dataset.

Three shapes are read: a recorder folder (call folders with ``metadata.jsonl``), a trace
definitions folder (``*.json`` tagged ``fi_api:``), or a folder holding both (``dumps/``
and ``definitions/``, as tools/flashinfer_corpus.py writes). The staging dataset lives in
a temporary folder removed when the process exits; SRC is never written.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ikdata.core.dataset import NotADataset
from ikdata.flashinfer.dumps import is_dump_folder
from ikdata.flashinfer.staging import Staged, is_definition_folder, stage

if TYPE_CHECKING:
    from ikdata.importing.foreign import ForeignRead

LAYOUTS = ("FlashInfer flight-recorder call folders (<call>/metadata.jsonl)",
           "FlashInfer trace definitions (*.json tagged fi_api:)")


def detect(src: Path, definitions: Sequence[str] = ()) -> tuple[Path | None, Path | None] | None:
    """(calls folder, definitions folder) when SRC is a FlashInfer folder, else None (cheap: no torch)."""
    if not src.is_dir() or (src / "ikdata.json").exists() or (src / "blob").is_dir():
        return None
    calls = src if is_dump_folder(src) else (src / "dumps" if (src / "dumps").is_dir() and is_dump_folder(src / "dumps")
                                             else None)
    named = [Path(d) for d in definitions if is_definition_folder(Path(d))]
    defs = named[0] if named else (src if calls is None and is_definition_folder(src) else (
        src / "definitions" if (src / "definitions").is_dir() and is_definition_folder(src / "definitions") else None))
    if calls is None and defs is None:
        nested = _flashinfer_children(src)
        if nested:  # tools/flashinfer_corpus.py OUT: one FlashInfer folder per tensor format
            error = NotADataset(src)
            error.looked_for = "; ".join((error.looked_for, *LAYOUTS))
            error.args = (f"{src}: not a dataset, but it holds {len(nested)} FlashInfer folder(s) "
                          f"({', '.join(str(p) for p in nested)}); import each of them: "
                          f"'ikdata import {nested[0]} DEST'",)
            raise error
        return None
    return calls, defs


def _flashinfer_children(src: Path) -> list[Path]:
    """Sub-folders of SRC that are FlashInfer folders themselves (recorder output, with or beside definitions)."""
    try:
        children = sorted(p for p in src.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
    return [p for p in children[:64] if is_dump_folder(p) or ((p / "dumps").is_dir() and is_dump_folder(p / "dumps"))]


def stage_source(src: Path, found: tuple[Path | None, Path | None]) -> tuple[Path, Staged]:
    """Stage SRC into a temporary ikdata dataset (removed at exit).

    Raises:
        NotADataset: nothing in it could be read; the message names the layouts looked for
            and why each call or file was left out.
    """
    out = Path(tempfile.mkdtemp(prefix="ikdata-flashinfer-"))
    atexit.register(shutil.rmtree, out, True)
    staged = stage(found[0], found[1], out / "staged")
    excluded: dict[str, str] = {}
    for _ in range(3):  # an identical call is one workload with one receipt: a second pass finds its twin
        if not staged.definitions:
            break
        _judge(out / "staged")
        unjudged = {k: v for k, v in not_judged(out / "staged").items() if k not in excluded}
        if not unjudged:
            break
        excluded.update(unjudged)  # staged again without them: the rest import in this one command
        shutil.rmtree(out / "staged")
        staged = stage(found[0], found[1], out / "staged", exclude=excluded)
    if not staged.definitions:
        error = NotADataset(src)
        why = "; ".join(f"{where}: {reason}" for where, reason in staged.left_out[:5]) or "no call folder or definition"
        more = f" (and {len(staged.left_out) - 5} more)" if len(staged.left_out) > 5 else ""
        error.looked_for = "; ".join((error.looked_for, *LAYOUTS))  # one string, as NotADataset keeps it
        error.args = (f"{src}: nothing ikdata can read: looked for {error.looked_for}; every call or file was left "
                      f"out: {why}{more}",)
        raise error
    return out / "staged", staged


def not_judged(root: Path) -> dict[str, str]:
    """Call folder name -> why, for each staged sampling call its definition's pooled test could not judge
    (too few draws, or no position that can be judged, even with every call of the definition pooled): such a
    call is neither passed nor failed, so it is left out, named, and the other calls import."""
    import orjson

    report = root / "reports" / "replay.json"
    if not report.is_file():
        return {}
    unjudged = {}
    for case in orjson.loads(report.read_bytes()).get("cases") or ():
        judge = ((case.get("tolerance") or {}).get("samples") or {}).get("judge")
        if judge == "sampling" and case.get("status") == "skipped":
            reason = " ".join(str(case.get("reason") or "no draw could be judged").split())
            unjudged[case["uuid"]] = (f"not judged ({case.get('definition')}): {reason}; left out, since an import "
                                      "brings validated calls only")
    if not unjudged:
        return {}
    folders = {}
    receipts = root / "receipts.jsonl"
    for line in receipts.read_bytes().splitlines() if receipts.is_file() else ():
        record = orjson.loads(line) if line.strip() else {}
        if record.get("uuid") in unjudged and record.get("dump"):
            folders[str(record["dump"])] = unjudged[record["uuid"]]
    return folders


def importer(src: Path, definitions: Sequence[str] = ()) -> ForeignRead | None:
    """FlashInfer's reader for ``ikdata import`` (its declared ``importer``): None when SRC is no FlashInfer folder.

    A recorder folder or trace definitions folder is staged (:func:`stage_source`) and read with the staged
    definitions (trusted: named by the user, or the installed FlashInfer's), each call or file left out named
    with its dump folder; a flashinfer-bench Trace dataset is read as it is, each of its solution traces listed
    as never imported (:mod:`ikdata.flashinfer.bench_traces`).

    Raises:
        NotADataset: SRC is a FlashInfer folder of which nothing could be read, or holds several.
    """
    from ikdata.core.dataset import FLASHINFER, find_layout
    from ikdata.importing.foreign import ForeignRead

    found = detect(src, [str(d) for d in definitions])
    if found is not None:
        root, staged = stage_source(src, found)
        return ForeignRead(root, (str(root / "definitions"),), staged=True, left_out=_left_out(staged))
    if src.is_dir() and find_layout(src) == FLASHINFER:
        return ForeignRead(src, tuple(str(d) for d in definitions), traces=_traces)
    return None


def _left_out(staged: Staged) -> tuple:
    """Each call folder (or definition file) left out, named with the dump folder it is in: "<call> (<dump>): <why>"."""
    from ikdata.importing.foreign import LeftOut

    return tuple(LeftOut(Path(where).name, str(Path(where).parent), reason, where=where)
                 for where, reason in staged.left_out)


def _traces(ds: Any) -> list:
    """A flashinfer-bench dataset's solution traces, each as left out of the import with why."""
    from ikdata.flashinfer.bench_traces import traces
    from ikdata.importing.foreign import LeftOut

    return [LeftOut(t.uuid, t.definition, t.reason, where=t.where, code="trace") for t in traces(ds.root, ds)]


def _judge(root: Path) -> None:
    """Replay the staged calls with their (trusted) references, so import judges them like any capture."""
    from ikdata.core.dataset import Dataset
    from ikdata.replay.runner import replay

    replay(Dataset.open(root, definitions=[root / "definitions"]), device="cpu", reuse=False)


__all__ = ["LAYOUTS", "detect", "importer", "not_judged", "stage_source"]
