"""Which steps of a request capture's default selection looks at: the first few, then every power of two.

A long run pays for log2(steps) steps, and a shape that first appears late is still seen. Its own module, so the
step tracker (:mod:`ikdata.capture.context`) and the selection (:mod:`ikdata.capture.selection`) both read it
without importing each other.
"""

from __future__ import annotations

LOOKED_AT_FIRST = 4  # the default looks at a request's first steps, then at every power of two


def spread(index: int, first: int) -> bool:
    """The bounded spread every default of capture takes: the first ``first`` indices, then every power of two, so
    N steps (calls, surveys) cost about log2(N).

    Example:
        >>> [i for i in range(20) if spread(i, 2)]
        [0, 1, 2, 4, 8, 16]
    """
    return index < first or index & (index - 1) == 0


def looks_at(index: int) -> bool:
    """Whether the default selection looks at step ``index`` of a request: 0-3, then 4, 8, 16, 32, ...

    Example:
        >>> [i for i in range(40) if looks_at(i)]
        [0, 1, 2, 3, 4, 8, 16, 32]
    """
    return spread(index, LOOKED_AT_FIRST)


def looked_at(steps: int) -> int:
    """How many of steps ``0..steps-1`` the default looks at."""
    return steps if steps <= LOOKED_AT_FIRST else 2 + (steps - 1).bit_length()  # 0-3, then 4, 8, ... below steps


__all__ = ["LOOKED_AT_FIRST", "looked_at", "looks_at", "spread"]
