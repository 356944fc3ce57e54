"""Drawing the progress the library reports: a rich bar on a terminal, plain lines elsewhere.

The library reports progress through plain callables and never draws. A meter accepts the
events it sends:

- :class:`ikdata.core.progress.Progress` (``phase``, ``done``, ``total``): validate, import;
- :class:`ikdata.replay.runner.Progress` (``done``, ``total``, ``case``): replay;
- :class:`ikdata.remote.transfer.Progress` (``phase``, ``objects_done/total``, ``bytes_done/total``): push, pull.

When stderr is not a terminal (a CI log, a file), a line such as
``replay: 1200/5000 cases, 240/s`` is written every ``IKDATA_PROGRESS_INTERVAL`` seconds
(default 5; 0 writes one per event), and a last line when the work ends if any was written.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping

if TYPE_CHECKING:
    from rich.console import Console

INTERVAL_ENV = "IKDATA_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 5.0


@dataclass(frozen=True)
class Event:
    """One event from the library, in one shape: units done of total, optional bytes and a note."""

    phase: str
    done: int
    total: int | None
    bytes_done: int | None = None
    bytes_total: int | None = None
    note: str = ""


def normalize(event: Any) -> Event:
    """The library's progress events (see the module docstring) as one :class:`Event`."""
    if hasattr(event, "objects_done"):  # a transfer
        return Event(event.phase, event.objects_done, event.objects_total, event.bytes_done, event.bytes_total)
    case = getattr(event, "case", None)
    return Event(getattr(event, "phase", ""), event.done, event.total, note=_case_note(case))


def _case_note(case: Any) -> str:
    """The note of a replay event's case ("passed gemm"): a Case, or its JSON object as the report holds it."""
    if case is None:
        return ""
    if isinstance(case, Mapping):
        return f"{case.get('status')} {case.get('definition')}"
    from ikdata.core.cases import Case  # only replay's events carry a case

    return f"{case.status} {case.definition}" if isinstance(case, Case) else ""


def interval() -> float:
    """Seconds between progress lines when stderr is not a terminal (``IKDATA_PROGRESS_INTERVAL``)."""
    try:
        return max(0.0, float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL)))
    except ValueError:
        return DEFAULT_INTERVAL


@contextlib.contextmanager
def open_meter(label: str, *, unit: str, console: Console) -> Iterator["LineMeter | BarMeter"]:
    """A bar when ``console`` is a terminal, else a line meter; closed when the block ends."""
    meter: LineMeter | BarMeter = BarMeter(label, unit, console) if console.is_terminal else \
        LineMeter(label, unit, console, interval())
    try:
        yield meter
    finally:
        meter.close()


class LineMeter:
    """A line on stderr every ``every`` seconds (thread-safe: transfers report from worker threads)."""

    def __init__(self, label: str, unit: str, console: Console, every: float) -> None:
        self.label, self.unit, self.console, self.every = label, unit, console, every
        self.start = self.last_print = time.monotonic()
        self.last: Event | None = None
        self.printed = False
        self._lock = threading.Lock()

    def __call__(self, event: Any) -> None:
        found = normalize(event)
        with self._lock:
            self.last = found
            now = time.monotonic()
            if now - self.last_print >= self.every and (found.done or found.bytes_done):
                self.last_print = now
                self._print(found, now)

    def close(self) -> None:
        with self._lock:
            if self.printed and self.last is not None:
                self._print(self.last, time.monotonic(), final=True)

    def _print(self, e: Event, now: float, *, final: bool = False) -> None:
        elapsed = max(now - self.start, 1e-9)
        name = f"{self.label} {e.phase}" if e.phase and e.phase != self.label else self.label
        parts = [f"{e.done}/{e.total if e.total is not None else '?'} {self.unit}"]
        if e.bytes_total:
            parts.append(f"{human_bytes(e.bytes_done or 0)}/{human_bytes(e.bytes_total)}")
            parts.append(f"{human_bytes((e.bytes_done or 0) / elapsed)}/s")
        else:
            parts.append(f"{e.done / elapsed:.0f}/s" if e.done / elapsed >= 10 else f"{e.done / elapsed:.2g}/s")
        if final:
            parts.append(f"{elapsed:.1f} s")
        self.console.print(f"{name}: {', '.join(parts)}", markup=False, highlight=False, soft_wrap=True)
        self.printed = True


class BarMeter:
    """A transient rich bar per phase on a terminal."""

    def __init__(self, label: str, unit: str, console: Console) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.label, self.unit = label, unit
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn(unit), TextColumn("{task.fields[extra]}"), TimeRemainingColumn(),
                            console=console, transient=True)
        self.tasks: dict[str, Any] = {}
        self.bar.start()

    def __call__(self, event: Any) -> None:
        e = normalize(event)
        name = f"{self.label} {e.phase}" if e.phase and e.phase != self.label else self.label
        extra = f"{human_bytes(e.bytes_done or 0)}/{human_bytes(e.bytes_total)}" if e.bytes_total else e.note
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(name, total=e.total, extra=extra)
        self.bar.update(self.tasks[name], completed=e.done, total=e.total, extra=extra)

    def close(self) -> None:
        self.bar.stop()


def human_bytes(n: float) -> str:
    """``1.5 MiB``: sizes for people (binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
