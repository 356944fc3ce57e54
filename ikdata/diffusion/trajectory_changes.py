"""What two datasets' trajectories and model records differ in, for ``ikdata diff``.

Trajectories are named by their content id; a pipeline call only in A and one only in B of the same
pipeline are paired, and what differs between them (seed, noise digest, model, scheduler, steps,
request) is listed. Model records are compared by digest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ikdata.core.errors import ProblemsFound


@dataclass(frozen=True)
class TrajectoryChange:
    """One pipeline call's trajectory in A paired with one in B (None: only on one side), and what differs."""

    pipeline: str
    a: str | None
    b: str | None
    differs: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # field -> (A's value, B's value)

    def to_dict(self) -> dict:
        return {"pipeline": self.pipeline, "a": self.a, "b": self.b,
                "differs": {k: {"a": v[0], "b": v[1]} for k, v in sorted(self.differs.items())}}

    def line(self) -> str:
        """The change in words, for a person."""
        if self.a is None or self.b is None:
            where = "B only" if self.a is None else "A only"
            return f"trajectory {self.pipeline} {(self.b or self.a)[:12]}: {where}"
        differs = "; ".join(f"{k} {v[0]!r} -> {v[1]!r}" if k != "request" else "request changed"
                            for k, v in sorted(self.differs.items())) or "steps' tensors differ"
        return f"trajectory {self.pipeline} {self.a[:12]} -> {self.b[:12]}: {differs}"


@dataclass(frozen=True)
class TrajectoryDiff:
    """The trajectories and model records that turn dataset A into dataset B."""

    trajectories: tuple[TrajectoryChange, ...] = ()
    models_added: tuple[str, ...] = ()
    models_removed: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.trajectories or self.models_added or self.models_removed)

    def to_dict(self) -> dict:
        return {"trajectories": [t.to_dict() for t in self.trajectories],
                "models": {"added": list(self.models_added), "removed": list(self.models_removed)}}

    def lines(self) -> list[str]:
        """Each change in words, for a person."""
        found = [change.line() for change in self.trajectories]
        for label, digests in (("added", self.models_added), ("removed", self.models_removed)):
            found += [f"model {label}: {digest[:12]}" for digest in digests]
        return found


def _summary(record: dict) -> dict[str, Any]:
    """What a user asks first when two calls of one pipeline differ."""
    noise, model = record.get("noise") or {}, record.get("model") or {}
    request = {k: v for k, v in (record.get("request") or {}).items() if k not in ("seed", "generator")}
    return {"seed": noise.get("seed"), "noise": noise.get("digest"), "model": model.get("digest"),
            "scheduler": (record.get("scheduler") or {}).get("class"),
            "steps": (record.get("request") or {}).get("steps"), "request": request}


def compare(left: Any, right: Any) -> TrajectoryDiff:
    """The trajectory and model changes from dataset ``left`` to dataset ``right``.

    Raises:
        ProblemsFound: a trajectory line of either cannot be read.
    """
    from ikdata.diffusion import trajectories as traj_mod

    found = {}
    for side, ds in (("a", left), ("b", right)):
        read = traj_mod.read_all(ds.root)
        if read.problems:
            raise ProblemsFound(read.problems, f"{ds.root}: cannot compare, {len(read.problems)} trajectory "
                                f"line(s) cannot be read; run 'ikdata validate {ds.root}'")
        found[side] = {t.id: t.record for t in read.trajectories}
    only_a = [found["a"][i] for i in sorted(set(found["a"]) - set(found["b"]))]
    only_b = [found["b"][i] for i in sorted(set(found["b"]) - set(found["a"]))]
    changes = []
    for pipeline in sorted({r["pipeline"]["class"] for r in only_a + only_b}):
        side_a = [r for r in only_a if r["pipeline"]["class"] == pipeline]
        side_b = [r for r in only_b if r["pipeline"]["class"] == pipeline]
        for i in range(max(len(side_a), len(side_b))):
            a = side_a[i] if i < len(side_a) else None
            b = side_b[i] if i < len(side_b) else None
            differs = {}
            if a is not None and b is not None:
                sa, sb = _summary(a), _summary(b)
                differs = {k: (sa[k], sb[k]) for k in sa if sa[k] != sb[k]}
            changes.append(TrajectoryChange(pipeline, a and a["trajectory"], b and b["trajectory"], differs))
    models = {side: {(r.get("model") or {}).get("digest") for r in found[side].values()} - {None}
              for side in found}
    return TrajectoryDiff(tuple(changes), tuple(sorted(models["b"] - models["a"])),
                          tuple(sorted(models["a"] - models["b"])))


__all__ = ["TrajectoryChange", "TrajectoryDiff", "compare"]
