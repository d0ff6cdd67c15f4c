"""What every command of the suite shares: the --udb option and the error contract.

A command is a click command of class `Command` whose callback is wrapped by
`handle_errors`: any `UdbError`, and any usage error click finds in the command line,
becomes one line on stderr (``PROG: message``) and exit status 2, never a traceback
nor click's four lines.
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


class OneLineUsageError(click.UsageError):
    """A usage error shown as the suite's one line, ``PROG: message``, exit status 2."""

    def show(self, file=None) -> None:
        name = self.ctx.info_name if self.ctx and self.ctx.info_name else "fairshare"
        message = " ".join(self.format_message().split())
        click.echo(f"{name}: {message} (see {name} --help)", file=file, err=file is None)


class Command(click.Command):
    """click's command with the suite's error contract for its command line: a usage
    error (an unknown option, a bad value, a missing argument) is one line, exit 2."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as err:
            one = OneLineUsageError(err.message, err.ctx)
            if isinstance(err, click.BadParameter) and err.ctx is not None:
                one.message = err.format_message()  # names the option, as click says it
            raise one from None


#: The settings of every command: -h as well as --help.
HELP = {"help_option_names": ["-h", "--help"]}


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
        except (TypeError, ValueError) as err:
            # A value of the wrong type where the schema promises another (an INTEGER
            # column holding text): SQLite keeps what a damaged record says.  Without a
            # UDB open it is not the UDB's doing: the traceback is for a bug report.
            if not last_opened():
                raise
            fail(
                f"{last_opened()}: damaged UDB? a stored value cannot be used "
                f"({type(err).__name__}: {' '.join(str(err).split())[:200]}); nothing written"
            )
        except BrokenPipeError:  # `udbsee -a | head`
            sys.stderr.close()
            sys.exit(0)

    return wrapper
