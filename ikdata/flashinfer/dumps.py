"""Read FlashInfer's flight recorder folder (``FLASHINFER_LOGLEVEL=10``) as untrusted input, running no pickle.

Layout: ``DIR/<timestamp>_pid<P>_<func>_call<N>/{metadata.jsonl, inputs.safetensors|inputs.pt,
outputs.safetensors|outputs.pt}`` and ``DIR/session.jsonl``. Every file read passes the
dataset's path rule (:mod:`ikdata.core.paths`) with DIR as the root: a link out of the dump
or a FIFO is refused, never followed. A call's last record is checked against
``schemas/flashinfer-call.schema.json`` before any field is used. ``.pt`` files are read only
through ``torch.load(weights_only=True)``, which refuses any pickle that is not plain tensors
and containers. A call that fails any of this is left out with its folder, file, line and
field named (:class:`Skipped`); the other calls are read.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ikdata.core import schema
from ikdata.core.errors import IkdataError
from ikdata.core.paths import PathResolver, open_regular
from ikdata.flashinfer.convert import Refused

TENSOR_FILES = ("inputs.safetensors", "inputs.pt")
SCHEMA = "flashinfer-call"
MAX_METADATA_BYTES = 64 << 20  # a recorder's metadata.jsonl is a few KiB; anything near this is not one
_NESTED = re.compile(r"__(?:key_|value_)?[0-9]+$")
_CALL_FOLDER = re.compile(r"_pid[0-9]+_.+_call[0-9]+$")  # <timestamp>_pid<P>_<func>_call<N>


@dataclass
class Call:
    """One recorded call: its arguments by parameter name, its results, and where it came from."""

    folder: Path
    function: str
    module: str
    arguments: dict[str, Any]  # parameter name -> tensor, plain value, or list/tuple of them
    results: list[Any]  # result or result_i, in order (tensors or plain values)
    metadata: dict = field(repr=False, default_factory=dict)

    @property
    def fi_api(self) -> str:
        return f"{self.module}.{self.function}" if self.module and self.module != "<unknown>" else self.function

    def provenance(self) -> dict:
        m = self.metadata
        return {"engine": "flashinfer", "operation": self.fi_api, "origin": "flashinfer-recorder",
                "process_id": m.get("process_id"), "call_sequence": m.get("call_sequence"),
                "timestamp": m.get("timestamp"), "graph_capture": bool(m.get("graph_capture")),
                "versions": dict(m.get("versions") or {}), "dump": self.folder.name}


@dataclass(frozen=True)
class Skipped:
    """A call folder (or a file in the dump) left out, and why (file, line and field named)."""

    folder: str
    reason: str


def is_dump_folder(path: Path) -> bool:
    """Whether ``path`` holds recorder call folders (or is one)."""
    if os.path.lexists(path / "metadata.jsonl"):
        return True
    try:
        return path.is_dir() and any(os.path.lexists(p / "metadata.jsonl") for p in path.iterdir() if p.is_dir())
    except OSError:
        return False


def read_calls(root: Path) -> tuple[list[Call], list[Skipped]]:
    """Every completed call under ``root`` (in folder-name order: timestamp, pid, call number) and those left out.

    ``root`` is the dump folder (or one call folder): nothing outside it is read.
    """
    paths = PathResolver(root)
    if os.path.lexists(root / "metadata.jsonl"):
        folders = [(root, "")]
    else:
        folders = [(p, p.name + "/") for p in sorted(root.iterdir()) if os.path.lexists(p / "metadata.jsonl")]
    calls, skipped = [], []
    if not folders[:1] or folders[0][0] != root:
        skipped += [Skipped(str(p), "a call folder without metadata.jsonl: the recorder did not finish writing it")
                    for p in sorted(root.iterdir()) if p.is_dir() and not os.path.lexists(p / "metadata.jsonl")
                    and any(os.path.lexists(p / n) for n in TENSOR_FILES)]
        skipped += [Skipped(str(p), "an empty call folder: the recorder failed to dump this call (its log says why; "
                                    "safetensors, for one, refuses two arguments that share memory)")
                    for p in sorted(root.iterdir()) if p.is_dir() and not p.is_symlink() and _CALL_FOLDER.search(p.name)
                    and not any(p.iterdir())]
    for folder, prefix in folders:
        try:
            if folder.is_symlink():
                raise _skip(f"{folder.name} is a link (to {os.readlink(folder)}); a call folder must be a "
                            "folder inside the dump")
            calls.append(read_call(folder, paths=paths, prefix=prefix))
        except Refused as exc:
            skipped.append(Skipped(str(folder), exc.reason))
    return calls, skipped


def _skip(reason: str) -> Refused:
    return Refused(reason, "unreadable-call")


def read_call(folder: Path, *, paths: PathResolver | None = None, prefix: str = "") -> Call:
    """One call folder as a :class:`Call`.

    Args:
        folder: the call folder.
        paths: the dump's path rule (default: the call folder is the root).
        prefix: the call folder relative to that root (``"<call>/"``), for the rule.

    Raises:
        Refused: a file is missing, unsafe or unreadable, or the record breaks the schema; the
            reason names the file, line and field.
    """
    paths = paths or PathResolver(folder)
    line, metadata = _last_record(folder / "metadata.jsonl", paths, prefix + "metadata.jsonl")
    where = f"metadata.jsonl:{line}"
    status = metadata.get("execution_status") if isinstance(metadata, dict) else None
    if not isinstance(status, str) or status == "completed":  # a call that never completed: that says it all
        found = schema.check(SCHEMA, metadata, path="metadata.jsonl", line=line)
        if found:
            raise _skip("; ".join(f"{where}: {p.pointer} {p.message}" for p in found[:5]))
    if status != "completed":
        raise _skip(f"{where}: /execution_status is {status!r}: the call has no recorded outputs (crashed, or a "
                    "CUDA-graph dump not flushed); expected 'completed'")
    suffix = {"safetensors": "safetensors", "torch": "pt"}[metadata["tensor_format"]]
    info = metadata["tensor_info"]
    inputs = _tensors(folder, f"inputs.{suffix}", info.get("input_tensor_keys") or [], paths, prefix)
    outputs = _tensors(folder, f"outputs.{suffix}", info.get("output_tensor_keys") or [], paths, prefix)
    signature = metadata["function_signature"]
    params = signature_params(signature)
    if params is None:
        raise _skip(f"{where}: /function_signature {signature[:200]!r} cannot be read as a Python signature")
    arguments: dict[str, Any] = {}
    recorded = {**(metadata.get("input_metadata") or {}), **{k: v for k, v in inputs.items() if not _NESTED.search(k)}}
    for key, value in recorded.items():
        if key.startswith("arg_"):
            index = int(key[4:])  # the schema allows ASCII digits only
            if index >= len(params):
                raise _skip(f"{where}: /input_metadata/{key} has no parameter in the signature {signature[:200]}")
            name = params[index]
        else:
            name = key[6:]
        if name in arguments:
            raise _skip(f"{where}: parameter {name!r} is recorded twice ({key} and another)")
        arguments[name] = _rebuild(value, inputs, f"{where}: /input_metadata/{key}")
    result_meta = metadata.get("output_metadata") or {}
    merged = {**result_meta, **{k: v for k, v in outputs.items() if not _NESTED.search(k)}}
    if "result" in merged:
        results = [_rebuild(merged["result"], outputs, f"{where}: /output_metadata/result")]
    else:
        keys = sorted((k for k in merged if k.startswith("result_")), key=lambda k: int(k[7:]))
        results = [_rebuild(merged[k], outputs, f"{where}: /output_metadata/{k}") for k in keys]
    return Call(folder, metadata["function_name"], str(metadata.get("module") or ""), arguments, results, metadata)


def signature_params(signature: str) -> list[str] | None:
    """Parameter names of a recorded ``str(inspect.signature(f))`` such as ``(input, weight, eps=1e-06)``.

    Defaults whose repr is not Python (``<SfLayout.layout_128x4: 0>``, ``<function f at 0x...>``)
    are read as ``None``: only the names matter here. None: not a signature.
    """
    if not isinstance(signature, str) or len(signature) > 100_000:
        return None
    for text in (signature, _without_reprs(signature)):
        try:
            tree = ast.parse(f"def f{text}: pass")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        function = tree.body[0] if len(tree.body) == 1 else None
        if not isinstance(function, ast.FunctionDef):
            return None
        args = function.args
        return [a.arg for a in args.posonlyargs + args.args] + [a.arg for a in args.kwonlyargs]
    return None


def _without_reprs(signature: str) -> str:
    """``signature`` with each ``<...>`` default repr (after ``=``) replaced by ``None``."""
    out, i = [], 0
    while i < len(signature):
        j = signature.find("=", i)
        if j < 0:
            break
        k = j + 1
        while k < len(signature) and signature[k] == " ":
            k += 1
        if k < len(signature) and signature[k] == "<":
            depth, end = 0, k
            while end < len(signature):
                depth += {"<": 1, ">": -1}.get(signature[end], 0)
                end += 1
                if depth == 0:
                    break
            out.append(signature[i:k] + "None")
            i = end
        else:
            out.append(signature[i:k])
            i = k
    out.append(signature[i:])
    return "".join(out)


def _last_record(path: Path, paths: PathResolver, relative: str) -> tuple[int, Any]:
    """(line, record) of the last whole JSON line of a call's metadata.jsonl (a torn last line: the one before)."""
    refusal = paths.refusal(relative)
    if refusal is not None:
        raise _skip(refusal.reason)
    try:
        fd = open_regular(path)
    except (OSError, IkdataError) as exc:
        raise _skip(f"metadata.jsonl cannot be read: {exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_METADATA_BYTES + 1)
    if len(data) > MAX_METADATA_BYTES:
        raise _skip(f"metadata.jsonl is larger than {MAX_METADATA_BYTES >> 20} MiB; a recorder's is a few KiB")
    lines = data.splitlines()
    for number in range(len(lines), 0, -1):
        line = lines[number - 1]
        if not line.strip():
            continue
        try:
            return number, orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn last line: the earlier record stands
    raise _skip("metadata.jsonl: no JSON record")


def _tensors(folder: Path, name: str, keys: list[str], paths: PathResolver, prefix: str) -> dict[str, Any]:
    if not keys:
        return {}
    path = folder / name
    refusal = paths.refusal(prefix + name)
    if refusal is not None:
        raise _skip(refusal.reason)
    if not path.is_file():
        raise _skip(f"{name} is missing (metadata.jsonl lists {keys[:8]})")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            loaded = load_file(str(path))
        except Exception as exc:  # noqa: BLE001  a damaged file is a skipped call
            raise _skip(f"{name}: not a readable safetensors file: {exc}") from exc
    else:
        loaded = load_pt(path)
    missing = [k for k in keys if k not in loaded]
    if missing:
        raise _skip(f"{name} lacks the tensors {missing[:8]} that metadata.jsonl lists")
    return {k: loaded[k] for k in keys}


def load_pt(path: Path) -> dict:
    """A ``.pt`` dict of tensors through ``torch.load(weights_only=True)``: no pickle code runs.

    Raises:
        Refused: torch refused it (its reason), or it is not a dict of tensors.
    """
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of files torch.save wrote
            warnings.simplefilter("ignore")
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _skip(f"{path.name} refused: torch.load(weights_only=True) would not load it ({reason}); ikdata "
                    "never unpickles anything else") from exc
    if not isinstance(loaded, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                               for k, v in loaded.items()):
        raise _skip(f"{path.name} is not a dict of tensors")
    return loaded


def _rebuild(value: Any, tensors: dict[str, Any], where: str, depth: int = 0) -> Any:
    """A recorded value as the call passed it: a dtype record becomes its name, a tensor record its tensor,
    a list or tuple record (not truncated) a list or tuple; other records stay as recorded."""
    if not isinstance(value, dict) or depth > 8:
        return value
    kind = value.get("type")
    if kind == "torch.dtype":
        return value.get("value")
    if kind == "torch.Tensor" and "tensor_key" in value:
        key = value["tensor_key"]
        if not isinstance(key, str) or key not in tensors:
            raise _skip(f"{where}: tensor_key {key!r} names no tensor in the call's tensor file")
        return tensors[key]
    items = value.get("items")
    if kind in ("list", "tuple") and isinstance(items, list) and value.get("truncated") is False:
        rebuilt = [_rebuild(item, tensors, f"{where}/items/{i}", depth + 1) for i, item in enumerate(items)]
        return rebuilt if kind == "list" else tuple(rebuilt)
    return value


__all__ = ["Call", "SCHEMA", "Skipped", "is_dump_folder", "load_pt", "read_call", "read_calls", "signature_params"]
