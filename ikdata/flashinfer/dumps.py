"""Read FlashInfer's flight recorder folder (``FLASHINFER_LOGLEVEL=10``) without running any pickle.

Layout: ``DIR/<timestamp>_pid<P>_<func>_call<N>/{metadata.jsonl, inputs.safetensors|inputs.pt,
outputs.safetensors|outputs.pt}`` and ``DIR/session.jsonl``. ``.pt`` files are read only through
``torch.load(weights_only=True)``, which refuses any pickle that is not plain tensors and
containers; a refused file is reported with torch's reason and its call is left out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ikdata.flashinfer.convert import Refused

TENSOR_FILES = ("inputs.safetensors", "inputs.pt")


@dataclass
class Call:
    """One recorded call: its arguments by parameter name, its results, and where it came from."""

    folder: Path
    function: str
    module: str
    arguments: dict[str, Any]  # parameter name -> tensor or plain value
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
                "versions": {k: str(v) for k, v in (m.get("versions") or {}).items()},
                "dump": self.folder.name}


@dataclass(frozen=True)
class Skipped:
    folder: str
    reason: str


def is_dump_folder(path: Path) -> bool:
    """Whether ``path`` holds recorder call folders (or is one)."""
    if (path / "metadata.jsonl").is_file():
        return True
    return path.is_dir() and any((p / "metadata.jsonl").is_file() for p in path.iterdir() if p.is_dir())


def read_calls(root: Path) -> tuple[list[Call], list[Skipped]]:
    """Every completed call under ``root`` (in folder-name order: timestamp, pid, call number) and those skipped."""
    folders = [root] if (root / "metadata.jsonl").is_file() else sorted(
        p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / "metadata.jsonl").is_file())
    calls, skipped = [], []
    for folder in folders:
        try:
            calls.append(read_call(folder))
        except Refused as exc:
            skipped.append(Skipped(str(folder), str(exc)))
    return calls, skipped


def _skip(reason: str) -> Refused:
    return Refused(reason, "unreadable-call")


def read_call(folder: Path) -> Call:
    metadata = _last_record(folder / "metadata.jsonl")
    status = metadata.get("execution_status")
    if status != "completed":
        raise _skip(f"execution_status is {status!r}: the call has no recorded outputs (crashed, or a CUDA-graph "
                    "dump not flushed); expected 'completed'")
    fmt = metadata.get("tensor_format")
    suffix = {"safetensors": "safetensors", "torch": "pt"}.get(fmt)
    if suffix is None:
        raise _skip(f"tensor_format {fmt!r} is not 'safetensors' or 'torch'")
    inputs = _tensors(folder / f"inputs.{suffix}", metadata["tensor_info"].get("input_tensor_keys", []))
    outputs = _tensors(folder / f"outputs.{suffix}", metadata["tensor_info"].get("output_tensor_keys", []))
    params = signature_params(metadata.get("function_signature", ""))
    if params is None:
        raise _skip(f"function_signature {metadata.get('function_signature')!r} cannot be read")
    arguments: dict[str, Any] = {}
    values = {**{k: _plain(v) for k, v in (metadata.get("input_metadata") or {}).items()}, **inputs}
    for key, value in values.items():
        if key.startswith("arg_") and key[4:].isdigit():
            index = int(key[4:])
            if index >= len(params):
                raise _skip(f"{key} has no parameter in the signature {metadata.get('function_signature')}")
            arguments[params[index]] = value
        elif key.startswith("kwarg_"):
            arguments[key[6:]] = value
    result_meta = {k: _plain(v) for k, v in (metadata.get("output_metadata") or {}).items()}
    merged = {**result_meta, **outputs}
    if "result" in merged:
        results = [merged["result"]]
    else:
        results = [merged[k] for k in sorted((k for k in merged if k.startswith("result_")), key=lambda k: int(k[7:]))]
    return Call(folder, str(metadata.get("function_name", "")), str(metadata.get("module", "")), arguments,
                results, metadata)


def signature_params(signature: str) -> list[str] | None:
    """Parameter names of a recorded ``str(inspect.signature(f))`` such as ``(input, weight, eps=1e-06)``."""
    try:
        tree = ast.parse(f"def f{signature}: pass")
    except (SyntaxError, ValueError):
        return None
    args = tree.body[0].args  # type: ignore[attr-defined]
    return [a.arg for a in args.posonlyargs + args.args] + [a.arg for a in args.kwonlyargs]


def _last_record(path: Path) -> dict:
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    for line in reversed(lines):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn last line: the earlier record stands
        if isinstance(record, dict):
            return record
    raise _skip(f"{path}: no JSON record")


def _tensors(path: Path, keys: list[str]) -> dict[str, Any]:
    if not keys:
        return {}
    if not path.is_file() or path.is_symlink():
        raise _skip(f"{path.name} is missing (the metadata lists {keys})")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            loaded = load_file(str(path))
        except Exception as exc:  # noqa: BLE001  a damaged file is a skipped call
            raise _skip(f"{path.name}: not a readable safetensors file: {exc}") from exc
    else:
        loaded = load_pt(path)
    missing = [k for k in keys if k not in loaded]
    if missing:
        raise _skip(f"{path.name} lacks the tensors {missing}")
    return {k: loaded[k] for k in keys}


def load_pt(path: Path) -> dict:
    """A ``.pt`` dict of tensors through ``torch.load(weights_only=True)``: no pickle code runs.

    Raises:
        Refused: torch refused it (its reason), or it is not a dict of tensors.
    """
    import pickle

    import torch

    import warnings

    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of files torch.save wrote
            warnings.simplefilter("ignore")
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _skip(f"{path.name} refused: torch.load(weights_only=True) would not load it ({reason}); ikdata "
                    "never unpickles anything else") from exc
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise _skip(f"{path.name} is not a dict of tensors")
    return loaded


def _plain(value: Any) -> Any:
    """A recorded non-tensor value: plain JSON stays; a dtype record becomes its name; others stay records."""
    if isinstance(value, dict) and value.get("type") == "torch.dtype":
        return value.get("value")
    return value


__all__ = ["Call", "Skipped", "is_dump_folder", "load_pt", "read_call", "read_calls", "signature_params"]
