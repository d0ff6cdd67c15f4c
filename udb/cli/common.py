"""What every command of the suite shares: the --udb option and the error contract.

A command is a click command wrapped by `command`: any `UdbError` becomes one
line on stderr (``PROG: message``) and exit status 2, never a traceback.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence

import click
import click.shell_completion
from sqlalchemy.exc import DBAPIError

from udb import __version__
from udb.errors import UdbError
from udb.session import database_problem, last_opened

udb_option = click.option(
    "--udb",
    "udb",
    metavar="PATH|URL",
    envvar="UDB_URL",
    show_envvar=True,
    help="The UDB: a SQLite file or a PostgreSQL URL "
    "(default ~/.local/share/fairshare/udb.sqlite; udbgen creates it).",
)


def version_option(func):
    """-V/--version on every command: the suite's version, the same for all of them.
    (One click.version_option per command: it keeps the first name it printed.)"""
    return click.version_option(
        __version__, "-V", "--version", message="%(prog)s (fairshare) %(version)s"
    )(func)


def complete_values(values: dict[str, str], *, separator: str | None = None):
    """A click ``shell_complete`` callback offering `values` (value -> what it means) that
    start with what was typed; with `separator` (``,`` for -F's flag names), the part
    after the last one is completed and the parts before it are kept."""

    def complete(ctx, param, incomplete: str) -> list[click.shell_completion.CompletionItem]:
        head, tail = "", incomplete
        if separator is not None and separator in incomplete:
            cut = incomplete.rindex(separator) + 1
            head, tail = incomplete[:cut], incomplete[cut:]
        return [
            click.shell_completion.CompletionItem(head + value, help=meaning or None)
            for value, meaning in values.items()
            if value.startswith(tail)
        ]

    return complete


def echo_lines(lines: Sequence[str]) -> None:
    """Print `lines` on standard output in one write (nothing for none): a click.echo a
    line cost 0.6 s of a 100,000-line listing."""
    if lines:
        click.echo("\n".join(lines))


class FiniteFloat(click.FloatRange):
    """A click number type: a finite float within a range (FloatRange alone lets NaN by)."""

    name = "number"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number in {self._describe_range()}.", param, ctx)
        return rv


#: The most history rows --last may ask for (shradmin and shrdist --history).
MAX_LAST = 1_000_000

last_option = click.option(
    "--last",
    type=click.IntRange(min=1, max=MAX_LAST),
    metavar="N",
    help=f"With --history: the last N changes (1 to {MAX_LAST:,}).",
)


def fail(message: str, code: int = 2) -> None:
    """Print `PROG: message` on stderr and exit with `code`."""
    prog = click.get_current_context(silent=True)
    name = prog.info_name if prog else "fairshare"
    click.echo(f"{name}: {message}", err=True)
    sys.exit(code)


def handle_errors(func):
    """Decorator for a click callback: turn UdbError into one line and exit 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except UdbError as err:
            fail(str(err), err.exit_code)
        except DBAPIError as err:  # a UDB damaged where open_udb's checks did not look
            fail(f"{last_opened() or 'the UDB'}: database error: {database_problem(err)}")
        except BrokenPipeError:  # `udbsee -a | head`
            sys.stderr.close()
            sys.exit(0)

    return wrapper
