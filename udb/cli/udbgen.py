"""udbgen: create, update and delete UDB entries from directives; analyse the share setup."""

from __future__ import annotations

import sys

import click

from udb import directives as udbdir
from udb.check import check_stored, configured_maxlevels, load_entry_columns
from udb.cli.common import echo_lines, handle_errors, udb_option
from udb.cli.progress import status, track
from udb.errors import OptionError, UdbError
from udb.jsonout import echo_json
from udb.passwd import passwd_directives, read_passwd
from udb.rules import MAX_ID, MAX_SHARES
from udb.session import (
    created,
    discard_created,
    display_name,
    open_udb,
    read_session,
    resolve_url,
)


def _read(path: str) -> tuple[str, str]:
    """(text, source name) of a directive file, ``-`` being stdin."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as err:
        raise OptionError(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise OptionError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


@click.command("udbgen", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, metavar="[FILE|-]...")
@click.option(
    "-c",
    "commands",
    multiple=True,
    metavar="DIRECTIVES",
    help="Directives given on the command line (repeatable).",
)
@click.option(
    "-p",
    "--test",
    is_flag=True,
    help="Test mode: check everything, print what would change, write nothing.",
)
@click.option(
    "-r",
    "--replace",
    is_flag=True,
    help="Start from an empty UDB: every entry and account not re-created is removed.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --replace: allow an input that would delete every group and user.",
)
@click.option(
    "-a", "--analyze", is_flag=True, help="Report share-setup problems instead of changing the UDB."
)
@click.option(
    "-R",
    "--by-resgrp",
    "mode",
    flag_value="user",
    default=True,
    help="With -a: analyse by resgrp (Share by User, the default).",
)
@click.option(
    "-A",
    "--by-acids",
    "mode",
    flag_value="account",
    help="With -a: analyse by acids (Share by Account).",
)
@click.option(
    "-G",
    "--maxlevels",
    type=click.IntRange(2, 64),
    default=None,
    metavar="LEVELS",
    help="With -a: levels allowed, root included (default: shradmin -G, else 4).",
)
@click.option(
    "--passwd",
    "passwd_file",
    metavar="FILE",
    help="Create entries for the accounts in FILE (passwd format) not in the UDB.",
)
@click.option(
    "--resgrp", metavar="GROUP", help="With --passwd: their resource group (uid or name)."
)
@click.option(
    "--shares",
    type=click.IntRange(0, MAX_SHARES),
    default=100,
    show_default=True,
    help="With --passwd: their shares.",
)
@click.option(
    "--min-uid",
    type=click.IntRange(0, MAX_ID),
    default=0,
    show_default=True,
    help="With --passwd: skip accounts with a smaller uid.",
)
@click.option(
    "--max-uid",
    type=click.IntRange(0, MAX_ID),
    default=None,
    help="With --passwd: skip accounts with a larger uid.",
)
@click.option("-v", "--verbose", is_flag=True, help="Say what was changed.")
@click.option("--json", "as_json", is_flag=True, help="With -a or -p: print JSON.")
@udb_option
@handle_errors
def main(files, commands, test, replace, force, analyze, mode, maxlevels, passwd_file, resgrp,
         shares, min_uid, max_uid, verbose, as_json, udb):  # fmt: skip
    """Create, update and delete UDB entries from udbgen DIRECTIVES.

    Directives come from FILEs ("-" is standard input) and -c options, in
    that order, and are applied all or nothing in one transaction:

    \b
      create:NAME:field:value:...:   a new entry (uid required)
      update:NAME:field:value:...:   change fields of an entry
      delete:NAME:                   remove an entry
      acid:NAME:NUMBER:              register an account
      delacid:NAME:                  remove an account from the registry

    Fields: uid gids acids resgrp shares shflags shusage shcharge shextime
    cpuquota cpuquotaused nice halflife passwd comment (see udbgen(8));
    acids and shflags also take = + - (set, add, remove).  Any error
    prints FILE:LINE:COL: message, exits 2 and leaves the UDB unchanged.

    With -a, report share-setup problems instead (-R by resgrp, -A by acids);
    exit 1 when any is an error.
    """
    if analyze:
        if files or commands or passwd_file or test or replace:
            raise OptionError("-a analyses the UDB; it takes no directives, -p, -r or --passwd")
        sys.exit(_analyze(open_udb(udb), mode, maxlevels, as_json))
    if maxlevels is not None:
        raise OptionError("-G only goes with -a")
    if resgrp is not None and not passwd_file:
        raise OptionError("--resgrp only goes with --passwd")
    if passwd_file and resgrp is None:
        raise OptionError("--passwd needs --resgrp GROUP (the group the new entries go in)")
    if not files and not commands and not passwd_file:
        raise OptionError("no directives: give a FILE, - for stdin, -c DIRECTIVES or --passwd")

    parsed: list[udbdir.Directive] = []
    for path in files:
        text, source = _read(path)
        with status(f"udbgen: reading {source}"):
            parsed += udbdir.parse(text, source)
    for text in commands:
        parsed += udbdir.parse(text, "-c")
    # Only once the input parses: bad input creates no UDB.  udbgen alone creates one.
    engine = open_udb(udb, create=not test)
    try:
        if passwd_file:
            parsed += _passwd(
                engine, passwd_file, resgrp, shares, min_uid, max_uid, verbose, replace
            )
        # The bar follows the directives as they are checked; writing them follows.
        todo = (
            track(parsed, "udbgen: applying", total=len(parsed)) if len(parsed) > 1000 else parsed
        )
        changes = udbdir.run(engine, todo, test=test, replace=replace, force=force)
    except UdbError:
        discard_created(engine)  # a refused run leaves no new UDB behind
        raise
    if created(engine):
        click.echo(f"udbgen: created a new UDB at {display_name(resolve_url(udb))}", err=True)
    _warn(changes.warnings)
    if test:
        if as_json:
            echo_json(changes.as_json(), indent=True)
        else:
            echo_lines(list(changes.as_directives()))
            click.echo(f"udbgen: test mode, nothing written: {changes.summary()}", err=True)
    elif verbose:
        click.echo(f"udbgen: {display_name(resolve_url(udb))}: {changes.summary()}", err=True)


#: The most warnings printed one per line; the rest are counted.
_MAX_WARNINGS = 10


def _warn(warnings: list[str]) -> None:
    for w in warnings[:_MAX_WARNINGS]:
        click.echo(f"udbgen: warning: {w}", err=True)
    if len(warnings) > _MAX_WARNINGS:
        click.echo(f"udbgen: warning: {len(warnings) - _MAX_WARNINGS} more like these", err=True)


def _passwd(engine, path, resgrp, shares, min_uid, max_uid, verbose, replace):
    text, source = _read(path)
    users = read_passwd(text, source)
    names: set[str] = set()
    uids: set[int] = set()
    if not replace:
        with read_session(engine) as s:
            taken = load_entry_columns(s)
        names, uids = set(taken.name), set(taken.uid)
    imported = passwd_directives(
        users, source, resgrp=resgrp, shares=shares, existing_names=names,
        existing_uids=uids, min_uid=min_uid, max_uid=max_uid,
    )  # fmt: skip
    if verbose:
        for name, reason in imported.skipped:
            click.echo(f"udbgen: {source}: skipping {name}: {reason}", err=True)
    return imported.directives


def _analyze(engine, mode: str, maxlevels: int | None, as_json: bool) -> int:
    with read_session(engine) as s:
        levels = maxlevels if maxlevels is not None else configured_maxlevels(s)
        problems = check_stored(s, mode, levels)
    if as_json:
        echo_json(
            [
                {
                    "severity": p.severity,
                    "name": p.name,
                    "uid": p.uid,
                    "code": p.code,
                    "message": p.message,
                    "detail": p.detail,
                }
                for p in problems
            ],
            indent=True,
        )
    else:
        for p in problems:
            uid = "-" if p.uid is None else str(p.uid)
            detail = f" ({p.detail})" if p.detail else ""
            click.echo(f"{p.severity}\t{p.name}\t{uid}\t{p.code}\t{p.message}{detail}")
        errors = sum(p.severity == "error" for p in problems)
        click.echo(
            f"udbgen: {len(problems) - errors} warnings, {errors} errors "
            f"(by {'resgrp' if mode == 'user' else 'acids'}, {levels} levels)",
            err=True,
        )
    return 1 if any(p.severity == "error" for p in problems) else 0


if __name__ == "__main__":
    main()
