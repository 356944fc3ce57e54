"""Times as people read them: a Unix time as ISO 8601 in UTC, for every output that shows one."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def iso_time(at: Any) -> str:
    """A Unix time as ISO 8601 in UTC (``2026-12-02T01:38:14.151Z``); anything else as it is.

    Example:
        >>> iso_time(0), iso_time(1.5), iso_time("?")
        ('1970-01-01T00:00:00Z', '1970-01-01T00:00:01.500Z', '?')
    """
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        return str(at)
    try:
        moment = datetime.fromtimestamp(at, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(at)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    millis = moment.microsecond // 1000
    return text + (f".{millis:03d}Z" if millis else "Z")


__all__ = ["iso_time"]
