"""Output in one place: human tables through rich, or one JSON document with --json."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table

from ikdata.core.problems import Problem

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(document: Any) -> None:
    """Print one JSON document on stdout."""
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*(str(c) for c in row))
    console.print(t)


def problems(found: Sequence[Problem]) -> None:
    for p in found:
        console.print(f"[red]✗[/red] {p}", markup=True)


def info(message: str) -> None:
    console.print(message, markup=False)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
