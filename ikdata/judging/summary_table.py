"""A table in replay's end summary, as a family's ``summary`` hook hands it to the command line (torch-free).

A family's summary is a list of lines and :class:`SummaryTable` blocks; the command line draws a table
for the terminal (columns cut, never wrapped) and prints each note whole under it. ``covers`` names the
definitions whose cases the table lists, so the per-definition operator tables leave them out; ``noun``
what one row is ("trajectories"), so a command can count them (``ikdata report``'s summary). A table without
rows is counted, not drawn.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SummaryTable:
    """One titled table of strings, the notes printed under it, the definitions whose cases it lists, and what
    one row is."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()
    covers: frozenset[str] = frozenset()
    noun: str = ""


__all__ = ["SummaryTable"]
