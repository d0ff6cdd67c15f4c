"""Progress for long-running commands: rich's progress bars on a terminal, nothing else.

The bars go to standard error and vanish when done (transient), so they never mix
with a command's output; when standard error is not a terminal (a pipe, a file, a
test, cron) these helpers do nothing at all.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def on_terminal() -> bool:
    """True when standard error is a terminal (where progress is shown)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _console():
    from rich.console import Console

    return Console(stderr=True)


def track(
    items: Iterable[T], description: str, total: int | None = None, show: bool | None = None
) -> Iterator[T]:
    """`items`, with a progress bar of `description` advancing by one per item when
    `show` (default: standard error is a terminal)."""
    if not (on_terminal() if show is None else show):
        yield from items
        return
    from rich.progress import track as rich_track

    yield from rich_track(
        items, description=description, total=total, console=_console(), transient=True
    )


@contextlib.contextmanager
def status(description: str, show: bool | None = None) -> Iterator[None]:
    """A spinner saying `description` while the block runs (a step of unknown length)."""
    if not (on_terminal() if show is None else show):
        yield
        return
    with _console().status(description):
        yield
