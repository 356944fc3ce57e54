"""How diffusion trajectories are judged: the attention pair of the floor, its k and eps, the reference
pipeline and clips of the decode check, the expected seed. Recorded in every trajectory case.

:func:`from_options` is the diffusion family's ``settings`` hook: the replay command's options to settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ikdata.core.errors import UsageError
from ikdata.diffusion import floor
from ikdata.diffusion import noise as noise_mod
from ikdata.diffusion import verdicts as rules


@dataclass(frozen=True)
class Settings:
    """How trajectories are judged; recorded in every case."""

    reference_attention: str = floor.DEFAULT_REFERENCE
    alt_attention: str | None = floor.DEFAULT_ALT  # None: no floor (degenerate, fallback tolerance)
    k: float = rules.DEFAULT_K
    eps: float = rules.DEFAULT_EPS
    pipeline: str | None = None  # "FILE.py:FUNC" or "module:FUNC": the reference pipeline (decode check)
    clips: Mapping[str, str] = field(default_factory=dict)  # trajectory id prefix ("" = any) -> clip file
    psnr_mean_db: float = rules.PSNR_MEAN_DB
    psnr_worst_db: float = rules.PSNR_WORST_DB
    audio_snr_db: float = rules.AUDIO_SNR_DB
    seed: int | None = None  # the seed the reference expects (default: the one the trajectory records)

    def check(self) -> "Settings":
        """Raises UsageError on an unknown attention name or a negative bound."""
        try:
            floor.check_name(self.reference_attention)
            if self.alt_attention is not None:
                floor.check_name(self.alt_attention)
        except ValueError as exc:
            raise UsageError(f"--attention: {exc}") from None
        if self.alt_attention == self.reference_attention:
            raise UsageError(f"--floor-attention {self.alt_attention}: the floor needs another implementation than "
                             "the reference's")
        if self.k < 0 or self.eps < 0:
            raise UsageError("--floor-k and --floor-eps must be >= 0")
        if self.seed is not None:
            noise_mod.check_seed(self.seed, option="--seed")
        return self

    def clip_for(self, trajectory_id: str) -> str | None:
        hits = [p for prefix, p in self.clips.items() if prefix and trajectory_id.startswith(prefix)]
        return hits[0] if hits else self.clips.get("")


def from_options(options: Mapping[str, Any]) -> Settings:
    """The settings the replay command's options name, by their parameter names: ``pipeline``, ``clip``
    (``[TRAJECTORY=]FILE`` items), ``attention``, ``floor_attention`` (``"none"``: no floor), ``floor_k``,
    ``floor_eps``, ``seed``; an option left out or None keeps its default.

    Raises:
        UsageError: an unknown attention name, a negative bound, a seed out of range.
    """
    defaults = Settings()
    named: dict[str, str] = {}
    for item in options.get("clip") or ():
        prefix, sep, file = item.partition("=")
        named[prefix if sep else ""] = file if sep else item
    alt = options.get("floor_attention") or defaults.alt_attention
    k, eps = options.get("floor_k"), options.get("floor_eps")
    return Settings(reference_attention=options.get("attention") or defaults.reference_attention,
                    alt_attention=None if alt == "none" else alt, k=defaults.k if k is None else k,
                    eps=defaults.eps if eps is None else eps, pipeline=options.get("pipeline"), clips=named,
                    seed=options.get("seed")).check()


__all__ = ["Settings", "from_options"]
