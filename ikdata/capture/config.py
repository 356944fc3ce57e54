"""The capture configuration: parsed and checked once, then passed to every child process in one env var.

``ikdata capture`` builds a :class:`CaptureConfig`, checks it (:func:`check_config`)
before the command starts, and exports it as JSON in ``IKDATA_CAPTURE``. Every
Python process that starts with that variable set (the boot hook reads it)
captures with the same settings.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ikdata.core.errors import UsageError

ENV = "IKDATA_CAPTURE"
STRICT_ENV = "IKDATA_CAPTURE_STRICT"
DEFAULT_QUEUE_BYTES = 256 << 20
DEFAULT_WEIGHT_CACHE_MIN_BYTES = 64 << 10  # ikdata.capture.weights.DEFAULT_MIN_BYTES

_STREAM = re.compile(r"video|audio|image|stream[0-9]{1,4}")  # the names capture/trajectory.py gives streams
_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9,
          "T": 10**12, "TB": 10**12, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from a size such as ``64MB``, ``1GiB``, ``1.5G`` or ``4096``.

    Raises:
        UsageError: the text is not a size.

    Example:
        >>> parse_size("64MB"), parse_size("1GiB")
        (64000000, 1073741824)
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else None
    if not match or unit not in _UNITS:
        raise UsageError(f"bad size {text!r}; expected a number with an optional unit such as 64MB, 512KiB or 1GiB")
    return int(float(match.group(1)) * _UNITS[unit])


def parse_steps(text: str) -> tuple[int, ...]:
    """Step indices from ``0,4,7`` or ``0-3,8``.

    Raises:
        UsageError: the text is not a list of steps.
    """
    steps: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)
        if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            raise UsageError(f"bad --steps {text!r}; expected step numbers and ranges such as 0,4,7 or 0-3,8")
        low = int(match.group(1))
        steps.update(range(low, int(match.group(2) or low) + 1))
    return tuple(sorted(steps))


def check_only(config: "CaptureConfig", user: Any) -> None:
    """Refuse ``--only`` names that match no template, op_type, user definition (``user``: name -> Definition)
    or template instance. Checked by ``ikdata capture`` before the command starts, without importing torch.

    Raises:
        UsageError: naming the unknown names and what is known.
    """
    from ikdata.core.templates import load_templates, match_instance

    templates = load_templates()
    known = set(templates) | set(user) | {t.definition.op_type for t in templates.values()}
    known |= {d.op_type for d in user.values()}
    unknown = [n for n in config.only if n not in known and match_instance(n) is None]
    if unknown:
        raise UsageError(f"--only: unknown name(s) {', '.join(unknown)}; expected an op type "
                         f"({', '.join(sorted({t.definition.op_type for t in templates.values()}))}), "
                         f"a template (e.g. {', '.join(sorted(templates)[:3])}), an instance such as "
                         "dense_gemm_bf16_nt_n4096_k4096, or a definition from --definitions")


@dataclass(frozen=True)
class CaptureConfig:
    """What to capture, where, and how much.

    Attributes:
        into: the dataset folder captures are written to.
        definitions: extra definition folders (exact definitions, matched by name).
        only: definition, template or op_type names to capture (empty: all).
        steps: the steps to capture (None: the default selection, :mod:`ikdata.capture.selection`).
        per_step: keep each distinct call once per step (every step looked at), not once per run.
        step_module: class name of the top-level module whose forward calls count steps
            (None: any outermost module call counts).
        max_per_definition: at most this many workloads per definition, over all processes.
        max_bytes: stop capturing once this many bytes were copied out of the engine.
        state_dir: a folder shared by the run's processes for selection and budgets.
        request_file: a JSON file naming the current request, replaced atomically by a driver.
        strict: raise on a failing hook instead of logging it (tests).
        adapters: module paths of user adapters, each with ``install(api)``.
        provenance: engine, model, model_revision... added to every receipt.
        queue_bytes: bytes of copied tensors waiting for the writer before the engine waits.
        weight_cache_min_bytes: weights at least this large are copied once and then reused while
            unchanged (checked off the engine thread); smaller ones are copied at every capture.
        streams: diffusion latent streams whose steps trajectories record (empty: all), e.g. ("video",).
    """

    into: str
    definitions: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    steps: tuple[int, ...] | None = None
    per_step: bool = False
    step_module: str | None = None
    max_per_definition: int | None = None
    max_bytes: int | None = None
    state_dir: str | None = None
    request_file: str | None = None
    strict: bool = False
    adapters: tuple[str, ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict)
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    weight_cache_min_bytes: int = DEFAULT_WEIGHT_CACHE_MIN_BYTES
    streams: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [name for name in self.streams if not isinstance(name, str) or not _STREAM.fullmatch(name)]
        if unknown:
            raise UsageError(f"--streams: unknown stream {unknown[0]!r}; expected names trajectories give their latent "
                             "streams: video, audio, image or streamN (N a number), e.g. --streams video,audio")

    def to_env(self) -> str:
        """The JSON for ``IKDATA_CAPTURE``."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CaptureConfig:
        """Parse ``IKDATA_CAPTURE``: a JSON object, or just a dataset path.

        Raises:
            UsageError: the JSON is malformed or has unknown keys.
        """
        text = text.strip()
        if not text.startswith("{"):
            return cls(into=text)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{ENV} is not valid JSON ({exc}); expected a dataset path or a JSON object") from exc
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown or "into" not in data:
            raise UsageError(f"{ENV} has unknown keys {sorted(unknown)} or lacks 'into'; "
                             f"expected keys among {sorted(cls.__dataclass_fields__)}")
        for key in ("definitions", "only", "adapters", "streams"):
            data[key] = tuple(data.get(key) or ())
        if data.get("steps") is not None:
            data["steps"] = tuple(data["steps"])
        return cls(**data)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> CaptureConfig | None:
        """The configuration of this process, or None when capture is off."""
        environ = os.environ if environ is None else environ
        text = environ.get(ENV)
        if not text:
            return None
        config = cls.from_json(text)
        if environ.get(STRICT_ENV, "") not in ("", "0"):
            config = replace(config, strict=True)
        return config


__all__ = ["CaptureConfig", "ENV", "check_only", "STRICT_ENV", "parse_size", "parse_steps"]
