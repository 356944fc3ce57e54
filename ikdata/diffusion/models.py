"""A denoiser's weights as content: a digest per tensor, one digest over them, and resolving them again.

The model digest is sha256 over the canonical JSON of ``{tensor name: tensor digest}`` (the store's
tensor digest of each state-dict entry), so it does not depend on file layout, shard boundaries or
key order. A small model is stored in the dataset (its tensors are blobs, deduplicated like any
other); a large one is recorded by repo id, revision and digests, and :func:`resolve_folder` finds
its tensors again in a folder the user names (or a Hugging Face cache snapshot), refusing any tensor
whose digest differs. Torch-free: files are rehashed from their bytes.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import orjson

from ikdata.core import schema
from ikdata.core.digest import canonical_json, record_digest
from ikdata.core.errors import RecordError, StoreError
from ikdata.core.paths import PathResolver, UnsafePath
from ikdata.core.store import blob_path, rehash_file, write_atomic

MODELS_DIR = "models"
DEFAULT_STORE_LIMIT = 256 << 20  # models up to this many bytes are stored in the dataset
MAX_RECORD_BYTES = 64 << 20  # a model record names tensors; a billion-weight model's is a few MB


def model_digest(tensor_digests: Mapping[str, str]) -> str:
    """The model digest: sha256 of the canonical JSON of {tensor name: tensor digest}."""
    return record_digest(dict(tensor_digests))


def model_relpath(digest: str) -> str:
    """Where a model record lives in a dataset."""
    return f"{MODELS_DIR}/{digest}.json"


@dataclass(frozen=True)
class ModelRecord:
    """A model record (schemas/model.schema.json) and where it was read from."""

    record: Mapping[str, Any]
    source: str = ""

    @property
    def digest(self) -> str:
        return self.record["digest"]

    @property
    def stored(self) -> bool:
        return bool(self.record["stored"])

    def blob_paths(self) -> dict[str, str]:
        """Tensor name -> dataset-relative blob path (meaningful when the model is stored)."""
        return {name: blob_path(t["digest"]) for name, t in self.record["tensors"].items()}


def write_record(root: str | os.PathLike, record: Mapping[str, Any]) -> str:
    """Write ``models/<digest>.json`` once (content-named, so an existing file is the same); return its path.

    Raises:
        RecordError: the record breaks its schema or its digest does not match its tensors.
    """
    relative = model_relpath(record["digest"])
    problems = schema.check("model", dict(record), path=relative)
    if problems:
        raise RecordError("; ".join(f"{p.pointer} {p.message}" for p in problems), path=relative)
    if model_digest({n: t["digest"] for n, t in record["tensors"].items()}) != record["digest"]:
        raise RecordError("digest does not match the tensors' digests", path=relative, pointer="/digest")
    path = Path(root) / relative
    if not path.exists():
        write_atomic(path, [canonical_json(dict(record)) + b"\n"])
    return relative


def record_refusal(relative: object, paths: PathResolver) -> UnsafePath | None:
    """Why a trajectory's ``model.record`` may not be read, or None: the path rule (relative, inside, no
    link out, no FIFO or device) and a model record's place, ``models/<name>.json``."""
    refusal = paths.refusal(relative)
    if refusal is not None:
        return refusal
    assert isinstance(relative, str)
    if not (relative.startswith(MODELS_DIR + "/") and relative.endswith(".json")) or relative.count("/") != 1:
        return UnsafePath(relative, f"model record path {relative!r} is not a model record; expected "
                          f"{MODELS_DIR}/<digest>.json")
    return None


def read_record(root: str | os.PathLike, relative: object, *, paths: PathResolver | None = None,
                where: str | None = None, line: int | None = None, pointer: str | None = None,
                validate: bool = True) -> ModelRecord:
    """Read and schema-check one model record, named by a record (a trajectory's ``model.record``).

    The path obeys the path rule (:func:`record_refusal`) and is opened only as a regular file of at
    most :data:`MAX_RECORD_BYTES`, so a record cannot make ikdata read outside the dataset or without end.
    ``where``/``line``/``pointer`` locate a refused path in the record that named it; ``validate=False``
    skips the schema (gc keeps what a malformed record names; the record may then be any JSON value).

    Raises:
        UnsafePath: the path breaks the rule (located when ``where`` is given).
        RecordError: missing, too large, malformed, or breaking its schema.
    """
    resolver = paths if paths is not None else PathResolver(root)
    refusal = record_refusal(relative, resolver)
    if refusal is not None:
        raise refusal.at(where, line, pointer) if where else refusal
    assert isinstance(relative, str)
    try:  # non-blocking, and the type checked on the descriptor: a FIFO or device put there since never blocks
        fd = os.open(resolver.root / relative, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError as exc:
        raise RecordError("model record not found", path=relative) from exc
    except OSError as exc:
        raise RecordError(f"cannot read the model record: {exc.strerror or exc}", path=relative) from exc
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise RecordError("the model record is not a regular file; expected a JSON file", path=relative)
        size = found.st_size
        if size > MAX_RECORD_BYTES:
            raise RecordError(f"model record is {size:,} bytes; expected at most {MAX_RECORD_BYTES:,} (it lists "
                              "tensors by name and digest)", path=relative)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"model record holds more than {MAX_RECORD_BYTES:,} bytes", path=relative)
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON: {exc}", path=relative) from exc
    problems = schema.check("model", record, path=relative) if validate else []
    if problems:
        raise RecordError("; ".join(f"{p.pointer} {p.message}" for p in problems), path=relative)
    return ModelRecord(record, relative)


def resolve_folder(record: ModelRecord, folder: str | os.PathLike) -> dict[str, tuple[str, str]]:
    """Find every tensor of a (large) model in the safetensors files under ``folder``, checked by digest.

    Returns tensor name -> (file path, key in that file). The folder is a local checkout or a Hugging
    Face cache snapshot (``.../snapshots/<commit>``; ``subfolder`` of the record is looked in first).

    Raises:
        StoreError: a tensor is missing, or its digest differs from the record's (the weights are not
            the ones captured): names the tensor and the file.
    """
    root = Path(folder)
    sub = record.record.get("subfolder")
    search = [root / sub, root] if sub else [root]
    found: dict[str, tuple[str, str, str]] = {}
    for base in search:
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.safetensors")):
            check = rehash_file(path)
            if check.error:
                continue
            for entry, digest in zip(check.entries, check.digests):
                found.setdefault(entry.key, (str(path), entry.key, digest))
        if found:
            break
    resolved: dict[str, tuple[str, str]] = {}
    for name, tensor in record.record["tensors"].items():
        hit = found.get(name)
        if hit is None:
            raise StoreError(f"{folder}: model {record.digest[:12]} needs tensor {name!r}, which no safetensors "
                             "file there holds; name the folder of the captured model", digest=tensor["digest"])
        if hit[2] != tensor["digest"]:
            raise StoreError(f"{hit[0]}: tensor {name!r} has digest {hit[2]}, the captured model's is "
                             f"{tensor['digest']}: these are other weights; refusing them",
                             digest=tensor["digest"], path=hit[0])
        resolved[name] = (hit[0], hit[1])
    return resolved


MAX_CONFIG_BYTES = 1 << 20  # a model config is a few KB of settings
MAX_BUFFER_ELEMENTS = 1 << 24  # buffers a config may build beyond the weights' elements (rope tables, position ids)


def model_class(name: object) -> type:
    """The Diffusers model class a model record names: a ``ModelMixin`` subclass that diffusers exports, never
    anything else a name could reach (``AutoModel``, a pipeline, a function).

    Raises:
        RecordError: any other name.
    """
    import diffusers

    found = getattr(diffusers, name, None) if isinstance(name, str) and name.isidentifier() else None
    base = getattr(diffusers, "ModelMixin", None)
    if not (isinstance(found, type) and base is not None and issubclass(found, base) and found is not base
            and getattr(found, "__module__", "").startswith("diffusers.")):
        raise RecordError(f"model class {name!r} is not a model class diffusers exports (a ModelMixin subclass); "
                          "replay builds no other class a record names", pointer="/class")
    return found


def _counted_build(cls: type, config: dict, *, most_tensors: int, most_elements: int, where: str) -> Any:
    """``cls.from_config(config)`` on the meta device (no memory behind any weight), stopped with a
    :class:`RecordError` (about ``where``) as soon as it registers more tensors or elements than
    ``most_tensors`` / ``most_elements``."""

    def too_large(why: str) -> RecordError:
        return RecordError(f"config does not describe the record's weights: {why}; refused before building it",
                           path=where, pointer="/config")

    import torch
    from torch.nn.modules import module as torch_module

    seen = [0, 0, 0, 0]

    def parameter(_module: Any, _name: str, tensor: Any) -> None:
        if tensor is None:
            return
        seen[0] += 1
        seen[1] += int(tensor.numel())
        if seen[0] > most_tensors or seen[1] > most_elements:
            raise too_large(f"it builds more weights than the record's {most_tensors} tensors of "
                            f"{most_elements:,} elements")

    def buffer(_module: Any, _name: str, tensor: Any) -> None:  # buffers a state dict leaves out are allowed, within
        seen[2] += 1
        seen[3] += int(tensor.numel()) if tensor is not None else 0
        if seen[2] > 2 * most_tensors + 64 or seen[3] > most_elements + MAX_BUFFER_ELEMENTS:
            raise too_large(f"it builds {seen[2]} buffers of {seen[3]:,} elements beside the record's "
                            f"{most_tensors} tensors of {most_elements:,} elements")

    handles = [torch_module.register_module_parameter_registration_hook(parameter),
               torch_module.register_module_buffer_registration_hook(buffer)]
    try:
        with torch.device("meta"):
            return cls.from_config(config)
    finally:
        for handle in handles:
            handle.remove()


PEFT_PARTS = (".lora_A.", ".lora_B.", ".base_layer.", ".lora_magnitude_vector.", ".lora_embedding_A.",
              ".lora_embedding_B.")  # the names PEFT gives an adapter's tensors in a model's state dict


IP_ADAPTER_PARTS = (".to_k_ip.", ".to_v_ip.", "encoder_hid_proj.image_projection_layers.")  # IP-Adapter's tensors


def check_buildable(record: ModelRecord, state: Mapping[str, Any]) -> type:
    """Check, before anything is allocated for it, that a model record can be built from its weights: its class
    is a Diffusers model (:func:`model_class`), each weight's shape is the record's, and its config builds
    exactly those tensors (built on the meta device, stopped once it registers more than the weights hold).
    A record whose config asks for more (``block_out_channels [1024, 2048]`` beside a tiny UNet's weights)
    is refused with the first differences, never built for real. Returns the class.

    Raises:
        RecordError: naming the record, the JSON pointer and what was expected.
    """
    import json

    where = record.source or "model record"
    cls = model_class(record.record.get("class"))
    tensors = record.record["tensors"]
    config = record.record.get("config")
    if not isinstance(config, dict):
        raise RecordError("config must be an object (the model's Diffusers config)", path=where, pointer="/config")
    if len(json.dumps(config, default=str)) > MAX_CONFIG_BYTES:
        raise RecordError(f"config holds more than {MAX_CONFIG_BYTES:,} bytes of JSON; a model's config is a few "
                          "KB of settings", path=where, pointer="/config")
    if set(state) != set(tensors):
        missing, extra = sorted(set(tensors) - set(state)), sorted(set(state) - set(tensors))
        raise RecordError(f"the weights loaded are not the record's tensors (missing {missing[:3]}, extra "
                          f"{extra[:3]})", path=where, pointer="/tensors")
    for name, tensor in tensors.items():
        held = [int(d) for d in getattr(state[name], "shape", ())]
        if held != list(tensor["shape"]):
            raise RecordError(f"tensor {name!r} is {held} in its blob, the record says {tensor['shape']}",
                              path=where, pointer=f"/tensors/{name}/shape")
    adapters = sorted(n for n in tensors if any(part in n for part in PEFT_PARTS))
    if adapters:  # diffusers' LoRA loaded and not fused: PEFT layers replay does not rebuild (yet)
        raise RecordError(f"the denoiser was captured with LoRA adapters loaded and not fused ({len(adapters)} "
                          f"adapter tensor(s), e.g. {adapters[0]!r}): replay does not rebuild PEFT layers, so its "
                          "denoiser steps are not judged; fuse the adapters before the call (pipe.fuse_lora()) to "
                          "have them judged", path=where, pointer="/tensors")
    ip = sorted(n for n in tensors if any(part in n for part in IP_ADAPTER_PARTS))
    if ip:  # an IP-Adapter loaded into the denoiser: attention processors replay does not rebuild (yet)
        raise RecordError(f"the denoiser was captured with an IP-Adapter loaded ({len(ip)} tensor(s) of its image "
                          f"projection and attention, e.g. {ip[0]!r}): replay does not rebuild IP-Adapter attention "
                          "processors, so its denoiser steps are not judged (the projection's calls are counted "
                          "in the trajectory's unjudged)", path=where, pointer="/tensors")
    elements = sum(math.prod(t["shape"]) for t in tensors.values())
    from ikdata.core.digest import from_finite_json

    try:
        meta = _counted_build(cls, from_finite_json(dict(config)), most_tensors=len(tensors),
                              most_elements=elements, where=where)
    except RecordError:
        raise
    except Exception as exc:  # noqa: BLE001 - diffusers refusing the config: the record is wrong, say so
        raise RecordError(f"config cannot build {record.record['class']}: {type(exc).__name__}: {exc}", path=where,
                          pointer="/config") from None
    built = {name: [int(d) for d in t.shape] for name, t in meta.state_dict().items()}
    wrong = [f"{name}: the config builds {built.get(name)}, the weights are {t['shape']}" for name, t in tensors.items()
             if built.get(name) != list(t["shape"])]
    wrong += [f"{name}: the config builds it, the record has no such tensor" for name in built if name not in tensors]
    if wrong:
        raise RecordError(f"config does not describe the record's weights ({len(wrong)} difference(s): "
                          f"{'; '.join(wrong[:3])}); refused before building it", path=where, pointer="/config")
    return cls


def hf_cache_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The Hugging Face cache snapshot folder of ``repo_id`` at ``revision`` (offline), or None."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001  not installed, not cached, not a valid id
        return None


__all__ = ["MODELS_DIR", "DEFAULT_STORE_LIMIT", "MAX_RECORD_BYTES", "ModelRecord", "model_digest", "model_relpath",
           "write_record", "record_refusal", "read_record", "resolve_folder", "hf_cache_snapshot", "model_class",
           "check_buildable", "MAX_CONFIG_BYTES"]
