"""Renderers shared by the commands' displays, and the small formatting helpers they use.

A renderer takes a report (a dataclass the library built) and a rich Console;
it never reads the UDB or the clock.  Plain output (piped, no colour) must read
like the guide's displays, so renderers lay columns out themselves with
`columns` and print whole lines, which keeps 100,000-row displays fast.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from itertools import zip_longest
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported where a console is made: shrview -dm prints lines
    from rich.console import Console


def percent(fraction: float, digits: int = 1) -> str:
    """`fraction` (0..1) as a percentage string, e.g. 0.125 -> "12.5%"."""
    return f"{fraction * 100:.{digits}f}%"


def octal(value: int) -> str:
    """`value` in octal without a prefix, as the guide prints shflags (040000 -> "40000")."""
    return f"{value:o}"


def columns(
    header: Sequence[Sequence[str]], rows: Sequence[Sequence[str]], right: Sequence[bool]
) -> list[str]:
    """Lines of a table: `header` lines and `rows` padded into columns two spaces apart.

    `right[i]` right-aligns column i.  Trailing blanks are dropped from every line.
    """
    lines = [*header, *rows]
    if not lines:
        return []
    # Column-wise widths and one format string per line shape: a C-level str.format per
    # line instead of a padding call per cell (100,000-row displays).
    widths = [max(map(len, col)) for col in zip_longest(*lines, fillvalue="")]
    out = []
    formats: dict[int, str] = {}
    for line in lines:
        n = len(line)
        fmt = formats.get(n)
        if fmt is None:
            fmt = formats[n] = "  ".join(
                f"{{:{'>' if right[i] else '<'}{widths[i]}}}" for i in range(n)
            )
        out.append(fmt.format(*line).rstrip())
    return out


def plain_console(width: int = 200) -> tuple[Console, io.StringIO]:
    """A console writing plain text (no colour, no markup wrapping) into a buffer."""
    from rich.console import Console

    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None, highlight=False), buf
