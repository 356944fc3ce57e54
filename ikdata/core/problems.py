"""Problem: one finding of a check, with file, line, JSON pointer and what was expected."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a dataset, located precisely enough to fix by hand.

    Attributes:
        path: the file, relative to the dataset root where possible.
        message: what is wrong and what was expected.
        line: the 1-based line in a JSONL file, if any.
        pointer: the JSON pointer inside the record, if any ("/workload/inputs/A").
        code: a stable short name for the kind of problem ("schema", "torn-line", ...).
    """

    path: str
    message: str
    line: int | None = None
    pointer: str | None = None
    code: str = "problem"

    def __str__(self) -> str:
        where = self.path + (f":{self.line}" if self.line is not None else "")
        pointer = f" {self.pointer}" if self.pointer else ""
        return f"{where}:{pointer} {self.message}"

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}
