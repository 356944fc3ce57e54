"""Writing packs: a pack and then its index (the publication), and rebuilding indexes from packs.

Apart from :mod:`ikdata.core.packs` (formats and reading, which the store uses) because writing
goes through the store's atomic writes.
"""

from __future__ import annotations

import hashlib
import os
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
)
from ikdata.core.store import blob_path, write_atomic


def write_pack(root: str | os.PathLike, items: Iterable[PackItem]) -> tuple[str, str]:
    """Write a pack and then its index (the publication), each atomically and durably.

    Returns:
        (pack path, index path), dataset-relative.
    """
    from ikdata.core.faults import checkpoint

    root = Path(root)
    head, ordered, tensors = encode_pack(items)
    h = hashlib.sha256(head)
    for item in ordered:
        h.update(item.data)
    digest = h.hexdigest()
    size = len(head) + sum(memoryview(i.data).nbytes for i in ordered)
    write_atomic(root / pack_name(digest), [head] + [i.data for i in ordered])
    checkpoint("pack-written")
    document = {"format": INDEX_FORMAT, "pack": digest + PACK_SUFFIX, "bytes": size, "tensors": tensors}
    write_atomic(root / index_name(digest), [orjson.dumps(document) + b"\n"])
    checkpoint("pack-published")
    return pack_name(digest), index_name(digest)


def repair_packs(root: str | os.PathLike) -> tuple[str, ...]:
    """Rebuild the derived pack indexes from the packs themselves (``ikdata repair``; the caller holds
    the exclusive lock). An index that is unreadable, names another pack, or disagrees with its
    pack's header is rewritten from the header; an unpublished pack that holds the only copy of a
    tensor is published once every tensor in it verifies. A missing or unreadable pack is left for
    ``validate`` to report (its content is not derived: restore it). Returns the indexes written.
    """
    root = Path(root)
    folder = root / PACK_DIR
    if not folder.is_dir():
        return ()
    written = []
    names = sorted(os.listdir(folder))
    for name in names:
        if not name.endswith(INDEX_SUFFIX) or name.startswith(".tmp-"):
            continue
        rel = f"{PACK_DIR}/{name}"
        pack = folder / (name[:-len(INDEX_SUFFIX)] + PACK_SUFFIX)
        if not pack.is_file():
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
        try:
            document = index_from_pack(root / orphan)
        except PackError:
            continue
        sole = [d for d in document["tensors"] if d not in published.blobs and not (root / blob_path(d)).is_file()]
        if not sole:
            continue
        blobs = [PackedBlob(d, orphan, "", t["dtype"], tuple(t["shape"]), t["offset"], t["length"])
                 for d, t in document["tensors"].items()]
        if check_pack(root, "", blobs, deep=True).problems:
            continue
        rel = orphan[:-len(PACK_SUFFIX)] + INDEX_SUFFIX
        write_atomic(root / rel, [orjson.dumps(document) + b"\n"])
        written.append(rel)
    return tuple(written)


__all__ = ["repair_packs", "write_pack"]
