"""User errors.  The command layer prints one line and exits 2 for any of them."""

from __future__ import annotations


class UdbError(Exception):
    """Base class of every error caused by bad input (never a bug)."""

    exit_code = 2


class DirectiveError(UdbError):
    """A udbgen directive that cannot be parsed or applied.

    `str()` gives ``SOURCE:LINE:COL: message`` with LINE and COL counted from 1.
    """

    def __init__(self, source: str, line: int, col: int, message: str):
        self.source, self.line, self.col, self.message = source, line, col, message
        super().__init__(f"{source}:{line}:{col}: {message}")


class OptionError(UdbError):
    """A command-line option value that makes no sense."""


class NotFound(UdbError):
    """A named entry, group or account that the UDB does not hold."""
