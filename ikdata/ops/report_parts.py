"""What the report page (:mod:`ikdata.ops.report_html`) and the families' figures share: the located checks of
a report's values, escaping for HTML and plotly text, log axes that draw exact zeros as zeros, and the typed
section a family's ``figures`` hook returns.

A report is data from a dataset, so every value reaches the page through :func:`escape` (HTML text and
attributes) or :func:`label` (plotly's text) and is type-checked by :class:`Checks` before it is formatted.
Torch-free; plotly is imported only to draw (:func:`plotly`). This module imports no family: the families'
figure modules import it.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Union

from ikdata.core.errors import UsageError
from ikdata.core.problems import Problem

NOT_A_NUMBER = "not a number"


def plotly() -> Any:
    """``plotly.graph_objects``.

    Raises:
        UsageError: plotly is not installed (the ``report`` extra).
    """
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise UsageError("drawing a report needs plotly: pip install 'ikdata[report]' (or pip install plotly)") from None
    return go


# Control characters (C0 but tab, newline and carriage return; DEL; C1): a terminal that shows the page's
# bytes (cat, less -r, a pager) would act on ESC, BEL or CSI; on the page they are shown as \xNN instead.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character as the visible ``\\xNN`` (a value from a report is data)."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def escape(value: Any) -> str:
    """A record value as HTML text or a quoted attribute value: always escaped, control characters made
    visible (:func:`visible`)."""
    return html.escape(visible(str(value)), quote=True)


def label(value: Any) -> str:
    """A record value inside plotly text (titles, trace names, annotations): plotly reads a little HTML there
    and decodes ``&lt;`` ``&gt;`` ``&amp;``, so escaping those shows the value as itself; control characters
    are made visible (:func:`visible`)."""
    return html.escape(visible(str(value)), quote=False)


def slug(value: Any) -> str:
    """An id fragment from a record value: letters, digits and '-' only (never the raw value)."""
    return re.sub(r"[^A-Za-z0-9-]", "", str(value))[:12]


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reason_text(case: Mapping[str, Any]) -> str:
    """A case's reason (or error) for the page's tables, at most 300 characters; "-" without one."""
    reason = case.get("reason") or case.get("error")
    text = reason if isinstance(reason, str) else "-"
    return text if len(text) <= 300 else text[:300] + "…"


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def axes(fig: Any, **layout: Any) -> Any:
    """Lay a figure out: every axis in scientific notation (plotly's default SI prefixes read ``1p``, ``10n``)."""
    fig.update_layout(**layout)
    fig.update_xaxes(exponentformat="e", showexponent="all")
    fig.update_yaxes(exponentformat="e", showexponent="all")
    return fig


@dataclass
class Checks:
    """The values of one report that were not what the page expected, each a located :class:`Problem`."""

    path: str = "report"
    problems: list[Problem] = field(default_factory=list)

    def wrong(self, pointer: str, expected: str, value: Any) -> None:
        self.problems.append(Problem(self.path, f"expected {expected}, found {_shown(value)}", pointer=pointer,
                                     code="report-value"))

    def number(self, value: Any, pointer: str) -> float | None:
        """``value`` as a float; None when absent or (a problem) not a number."""
        if value is None:
            return None
        if is_number(value):
            try:
                return float(value)
            except OverflowError:  # an integer too large for a float
                return math.inf if value > 0 else -math.inf
        self.wrong(pointer, "a number", value)
        return None

    def integer(self, value: Any, pointer: str) -> int | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if value is not None:
            self.wrong(pointer, "an integer", value)
        return None

    def mapping(self, value: Any, pointer: str) -> Mapping[str, Any]:
        if isinstance(value, Mapping):
            return value
        if value is not None:
            self.wrong(pointer, "an object", value)
        return {}

    def items(self, value: Any, pointer: str) -> list[Any]:
        if isinstance(value, list):
            return value
        if value is not None:
            self.wrong(pointer, "a list", value)
        return []

    def text(self, value: Any, pointer: str) -> str | None:
        if isinstance(value, str):
            return value
        if value is not None:
            self.wrong(pointer, "a string", value)
        return None

    def fmt(self, value: Any, pointer: str, spec: str, *, missing: str = "-") -> str:
        """``value`` formatted with ``spec``; ``missing`` when absent, "not a number" (a problem) when not one."""
        if value is None:
            return missing
        number = self.number(value, pointer)
        return NOT_A_NUMBER if number is None else format(number, spec)


def log_values(values: Iterable[tuple[Any, str]], checks: Checks) -> tuple[list[float | None], list[str]]:
    """(value, pointer) pairs as y values for a log axis and their hover text."""
    shown, text = [], []
    for raw, pointer in values:
        v = checks.number(raw, pointer)
        if v is None:
            shown.append(None)
            text.append("none" if raw is None else NOT_A_NUMBER)
        elif math.isnan(v):
            shown.append(None)
            text.append("none")
        elif v == 0:
            shown.append(0.0)  # placed by zeros_on_log_axis once every trace of the figure is known
            text.append("0 (exact)")
        elif math.isinf(v):
            shown.append(None)
            text.append("inf")
        else:
            shown.append(v)
            text.append(f"{v:.3g}")
    return shown, text


def zeros_on_log_axis(fig: Any, axis: str = "y") -> Any:
    """Exact zeros of a log axis (``axis``: "x" or "y") drawn as zeros: on a tick labelled "0" one decade below the
    smallest non-zero value, the other ticks powers of ten; a figure of zeros alone gets a linear axis."""
    values = [v for trace in fig.data for v in (getattr(trace, axis) or ()) if isinstance(v, (int, float))
              and math.isfinite(v)]
    if not any(v == 0 for v in values):
        return fig
    positive = [v for v in values if v > 0]
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    if not positive:
        return update(type="linear")
    low = math.floor(math.log10(min(positive))) - 1
    high = math.ceil(math.log10(max(positive)))
    zero = 10.0 ** low
    for trace in fig.data:
        found = getattr(trace, axis)
        if found is not None:
            trace.update({axis: [zero if isinstance(v, (int, float)) and v == 0 else v for v in found]})
    step = max(1, (high - low) // 12)  # at most about a dozen ticks
    powers = list(range(low + step, high + 1, step))
    return update(tickmode="array", tickvals=[zero] + [10.0 ** k for k in powers],
                  ticktext=["0"] + [_power(k) for k in powers])


def _power(k: int) -> str:
    """10**k as plotly's scientific tick labels write it: 1e-5, 0.1, 1, 10, 100, 1e+3."""
    return {-1: "0.1", 0: "1", 1: "10", 2: "100"}.get(k, f"1e{k:+d}" if k > 0 else f"1e{k}")


# -- what a family's figures hook returns ---------------------------------------------------------------------

Part = Union[str, Any]  # an HTML piece (every record value in it escaped), or a plotly figure the page draws


@dataclass(frozen=True)
class CaseView:
    """How the page's tables show one case a family drew.

    Attributes:
        definition: the definition as the tables name it (``LTX2Pipeline`` for ``trajectory:LTX2Pipeline``).
        what: what the case measured, or why it failed; None: the page's own words (the operators' worst
            max_error_ratio, else :func:`reason_text`).
        anchor: the id of the section that draws it, or None (no chart).
    """

    definition: str
    what: str | None = None
    anchor: str | None = None


@dataclass
class FamilySection:
    """A family's part of the report page: its HTML pieces and figures in page order, and the cases it drew
    (by their index in the report's cases), which the operators' default section then leaves out."""

    parts: list[Part] = field(default_factory=list)
    cases: dict[int, CaseView] = field(default_factory=dict)


__all__ = ["NOT_A_NUMBER", "CaseView", "Checks", "FamilySection", "Part", "axes", "escape", "is_number", "label",
           "log_values", "plotly", "reason_text", "slug", "visible",
           "zeros_on_log_axis"]
