"""The status of a replay case: the one place its four values are spelled.

A :class:`Status` is a ``str`` (``StrEnum``), so records keep writing and reading plain JSON strings
and a status compares equal to its text; code names the member, never the literal.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """What replay decided for one case."""

    PASSED = "passed"    # judged, within its tolerance or its statistical test
    FAILED = "failed"    # judged, and the engine's output is wrong
    ERROR = "error"      # could not be judged: the reference raised, a blob is missing or corrupt
    SKIPPED = "skipped"  # not judged, with the reason (no expected outputs, awaiting a group, unverified)

    def __repr__(self) -> str:  # messages quote a status as the text a record holds
        return repr(self.value)

    @classmethod
    def parse(cls, value: object) -> "Status | None":
        """The status a record's text names, or None when it names none."""
        try:
            return cls(value)  # type: ignore[arg-type]
        except ValueError:
            return None


JUDGED = (Status.PASSED, Status.FAILED)  # the verdicts a later run may reuse

__all__ = ["JUDGED", "Status"]
