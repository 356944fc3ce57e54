"""Argument and option aliases shared by every command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

DatasetArg = Annotated[Path, typer.Argument(help="Dataset folder.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
DefinitionsOpt = Annotated[Optional[list[Path]], typer.Option(
    "--definitions", help="Extra folder of definitions (repeatable); definitions you name are trusted.")]
