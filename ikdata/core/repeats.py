"""One rule for a workload uuid seen twice, for every reader (validate, replay, import, repair).

A uuid is derived from a workload's definition, inputs and provenance (contract 2), so two receipts
for one uuid are two captures of the same call. Their outputs decide what that means:

- the same expected outputs: one workload, captured twice. Nothing is wrong; readers keep the first
  receipt, and the writer does not write the second (:class:`ikdata.core.writer.DatasetWriter`).
- different expected outputs: the engine gave two answers to one input (nondeterminism, or a seeded
  sampler that ignores its seed). That is a finding: validate reports it, replay fails the case,
  import refuses it, each naming both receipts; ``ikdata repair`` sets the later receipts aside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, MutableMapping

from ikdata.core.digest import canonical_json
from ikdata.core.problems import Problem

CODE = "nondeterministic"  # the Problem code of every finding


def outputs_key(expected_output: Mapping[str, Any]) -> bytes:
    """What makes two receipts' outputs the same: their expected-output descriptors, canonically."""
    return canonical_json({name: _descriptor(value) for name, value in expected_output.items()})


def _descriptor(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


@dataclass
class Repeat:
    """A uuid whose receipts name different outputs: where each was read, first one first."""

    uuid: str
    places: list[tuple[str, int | None]] = field(default_factory=list)

    @property
    def message(self) -> str:
        where = " and ".join(f"{path}:{line}" for path, line in self.places[:3])
        more = f" (and {len(self.places) - 3} more)" if len(self.places) > 3 else ""
        return (f"workload {self.uuid} has receipts with different expected outputs ({where}{more}): the engine "
                "gave two answers to one input (nondeterministic; a sampler given the same raw logits, settings "
                "and seed: seed ignored); 'ikdata repair' sets the later receipts aside")

    def problem(self) -> Problem:
        path, line = self.places[-1]
        return Problem(path, self.message, line, "/expected_output", CODE)


class Repeats:
    """Receipts met one by one: which are repeats of the same capture, and which uuids disagree."""

    def __init__(self, first: MutableMapping[str, tuple[bytes, str, int | None]] | None = None) -> None:
        # uuid -> the first receipt's (outputs key, path, line); a reader of 10M receipts passes one on disk
        self._first = {} if first is None else first
        self.found: dict[str, Repeat] = {}

    def see(self, uuid: str, expected_output: Mapping[str, Any], path: str, line: int | None) -> bool:
        """Note one receipt; True when it is the first of its uuid (the one readers keep)."""
        return self.see_key(uuid, outputs_key(expected_output), path, line)

    def see_key(self, uuid: str, key: bytes, path: str, line: int | None) -> bool:
        """:meth:`see` given the outputs' key already made (by one key function for every receipt met)."""
        first = self._first.get(uuid)
        if first is None:
            self._first[uuid] = (key, path, line)
            return True
        if first[0] != key:
            repeat = self.found.setdefault(uuid, Repeat(uuid, [(first[1], first[2])]))
            repeat.places.append((path, line))
        return False

    def problems(self) -> list[Problem]:
        return [repeat.problem() for repeat in self.found.values()]


def first_receipts(receipts: Iterable[Any]) -> tuple[dict[str, Any], Repeats]:
    """The receipt readers keep for each uuid (the first), and the repeats met
    (receipts are :class:`ikdata.core.records.Receipt`, with source and line)."""
    seen, kept = Repeats(), {}
    for receipt in receipts:
        if seen.see(receipt.uuid, receipt.expected_output, receipt.source, receipt.line):
            kept[receipt.uuid] = receipt
    return kept, seen


__all__ = ["CODE", "Repeat", "Repeats", "first_receipts", "outputs_key"]
