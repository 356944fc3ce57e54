"""Writing packs: a pack and then its index (the publication), and rebuilding indexes from packs.

Apart from :mod:`ikdata.core.packs` (formats and reading, which the store uses) because writing
goes through the store's atomic writes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

import orjson

from ikdata.core.packs import (
    INDEX_FORMAT,
    INDEX_SUFFIX,
    PACK_DIR,
    PACK_SUFFIX,
    PackedBlob,
    PackError,
    PackItem,
    check_pack,
    encode_pack,
    index_from_pack,
    index_name,
    load_packs,
    pack_name,
    read_index,
    read_loose,
)
from ikdata.core.digest import parts_digest
from ikdata.core.paths import PathResolver
from ikdata.core.store import write_atomic


def write_pack(root: str | os.PathLike, items: Iterable[PackItem]) -> tuple[str, str]:
    """Write a pack and then its index (the publication), each atomically and durably.

    Returns:
        (pack path, index path), dataset-relative.
    """
    from ikdata.core.faults import checkpoint

    root = Path(root)
    head, ordered, tensors = encode_pack(items)
    digest = parts_digest([head] + [item.data for item in ordered])  # a pack is named by its bytes
    size = len(head) + sum(memoryview(i.data).nbytes for i in ordered)
    write_atomic(root / pack_name(digest), [head] + [i.data for i in ordered])
    checkpoint("pack-written")
    document = {"format": INDEX_FORMAT, "pack": digest + PACK_SUFFIX, "bytes": size, "tensors": tensors}
    write_atomic(root / index_name(digest), [orjson.dumps(document) + b"\n"])
    checkpoint("pack-published")
    return pack_name(digest), index_name(digest)


def _regular(path: Path) -> bool:
    """Whether ``path`` itself (never a link's target) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def repair_packs(root: str | os.PathLike) -> tuple[str, ...]:
    """Rebuild the derived pack indexes from the packs themselves (``ikdata repair``; the caller holds
    the exclusive lock). An index that is unreadable, names another pack, or disagrees with its
    pack's header is rewritten from the header; an unpublished pack that holds the only copy of a
    tensor is published once every tensor in it verifies (under the name its bytes hash to). A
    missing or unreadable pack is left for ``validate`` to report (its content is not derived:
    restore it). Nothing behind a link is read or written (DESIGN.md contract 3): a packs folder, a
    pack or an index that is a link is left for ``validate`` to name. Returns the indexes written.
    """
    root = Path(root)
    folder = root / PACK_DIR
    if PathResolver(root).refusal(PACK_DIR) is not None or os.path.islink(folder) or not folder.is_dir():
        return ()
    written = []
    names = sorted(os.listdir(folder))
    for name in names:
        if not name.endswith(INDEX_SUFFIX) or name.startswith(".tmp-"):
            continue
        rel = f"{PACK_DIR}/{name}"
        pack = folder / (name[:-len(INDEX_SUFFIX)] + PACK_SUFFIX)
        if not _regular(pack) or os.path.islink(root / rel):
            continue
        try:
            blobs = read_index(root, rel)
            fine = not check_pack(root, rel, blobs, deep=False).problems
        except PackError:
            fine = False
        if fine:
            continue
        try:
            document = index_from_pack(pack)
        except PackError:
            continue
        write_atomic(root / rel, [orjson.dumps(document) + b"\n"])
        written.append(rel)
    published = load_packs(root)
    for orphan in published.orphans:
        if not _regular(root / orphan):
            continue
        try:
            document = index_from_pack(root / orphan)
        except PackError:
            continue
        sole = [d for d in document["tensors"] if d not in published.blobs and read_loose(root, d)[0] is None]
        if not sole:
            continue
        blobs = [PackedBlob(d, orphan, "", t["dtype"], tuple(t["shape"]), t["offset"], t["length"])
                 for d, t in document["tensors"].items()]
        check = check_pack(root, "", blobs, deep=True)
        if len(check.verified) != len(blobs):
            continue  # a damaged tensor: not published; validate --deep names the rows that lack it
        pack = orphan
        if any(p.code == "pack-name-mismatch" for p in check.problems):
            pack = _rename_to_content(root, orphan)
            if pack is None:
                continue
            document = index_from_pack(root / pack)
        rel = pack[:-len(PACK_SUFFIX)] + INDEX_SUFFIX
        write_atomic(root / rel, [orjson.dumps(document) + b"\n"])
        written.append(rel)
        if pack != orphan:
            (root / orphan).unlink(missing_ok=True)
    return tuple(written)


def _rename_to_content(root: Path, pack: str) -> str | None:
    """Give an unpublished pack the name its bytes hash to (a hard link first, so a kill leaves both);
    None when that name is taken by another file."""
    with open(root / pack, "rb") as stream:
        digest = parts_digest(iter(lambda: stream.read(1 << 20), b""))
    target = pack_name(digest)
    if os.path.lexists(root / target):
        return target if _regular(root / target) and os.path.samefile(root / target, root / pack) else None
    os.link(root / pack, root / target)
    return target


__all__ = ["repair_packs", "write_pack"]
