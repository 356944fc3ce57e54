"""JSON pointers in a JSON document's text: where each value starts, so a problem can name its line."""

from __future__ import annotations

import re
from typing import Any

import orjson


def escape(token: Any) -> str:
    """One JSON pointer reference token (RFC 6901: ``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return str(token).replace("~", "~0").replace("/", "~1")


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def pointer_lines(text: str) -> dict[str, int]:
    """JSON pointer -> 1-based line where that value starts, for a valid JSON document.

    Iterative (the document was parsed already, so its nesting is bounded by orjson's limit).
    """
    lines: dict[str, int] = {}
    stack: list[list[Any]] = []  # [is_object, pointer, current key or index]
    line, i, n = 1, 0, len(text)

    def start_value() -> None:
        lines.setdefault(f"{stack[-1][1]}/{escape(stack[-1][2])}" if stack else "", line)

    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == '"':
            match = _JSON_STRING.match(text, i)
            j = match.end() - 1 if match else n
            if stack and stack[-1][0] and stack[-1][2] is None:
                stack[-1][2] = orjson.loads(text[i:j + 1])
            else:
                start_value()
            i = j + 1
            continue
        elif ch in "{[":
            start_value()
            pointer = f"{stack[-1][1]}/{escape(stack[-1][2])}" if stack else ""
            stack.append([ch == "{", pointer, None if ch == "{" else 0])
        elif ch in "}]":
            if stack:
                stack.pop()
        elif ch == ",":
            if stack:
                stack[-1][2] = None if stack[-1][0] else stack[-1][2] + 1
        elif ch not in " \t\r:":
            start_value()
            while i + 1 < n and text[i + 1] not in ",]} \t\r\n":
                i += 1
        i += 1
    return lines


__all__ = ["escape", "pointer_lines"]
