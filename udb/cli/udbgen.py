"""udbgen: create, update and delete UDB entries from directives; analyse the share setup."""

from __future__ import annotations

import stat
import sys

import click

from udb import directives as udbdir
from udb import slurm
from udb.check import check_stored, configured_maxlevels, load_entry_columns
from udb.cli.common import HELP, Command, echo_lines, handle_errors, udb_option, version_option
from udb.cli.progress import status, track
from udb.errors import OptionError, UdbError
from udb.jsonout import echo_json
from udb.passwd import GroupMap, passwd_directives, read_nss, read_passwd
from udb.rules import MAX_ID, MAX_SHARES
from udb.session import (
    created,
    discard_created,
    display_name,
    open_udb,
    read_session,
    resolve_url,
    sqlite_file,
)
from udb.skeleton import DEFAULT_GROUP, group_directive, missing_skeleton


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


@click.command("udbgen", cls=Command, context_settings=HELP)
@version_option
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
    "--init",
    is_flag=True,
    help="Add the system entries a UDB needs (System, Users, Idle, unknown, root) where "
    "missing; creates the UDB if there is none.",
)
@click.option(
    "--create",
    "create_",
    is_flag=True,
    help="Create the UDB if there is none (udbgen creates one at a path named by --udb or "
    "UDB_URL only with --init or --create).",
)
@click.option(
    "--passwd",
    "passwd_file",
    metavar="FILE",
    help="Create entries for the accounts in FILE (passwd format, - for stdin) not in the UDB.",
)
@click.option(
    "--nss",
    is_flag=True,
    help="Create entries for the accounts the name service lists (getent passwd: LDAP, "
    "SSSD) not in the UDB.",
)
@click.option(
    "--resgrp",
    metavar="GROUP",
    help=f"With --passwd/--nss: their resource group, uid or name (default {DEFAULT_GROUP}; "
    "a name not in the UDB is created as a group).",
)
@click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="UNIXGROUP=RESGRP",
    help="With --passwd/--nss: members of UNIXGROUP go in RESGRP instead (repeatable; the "
    "first that matches wins).",
)
@click.option(
    "--shares",
    type=click.IntRange(0, MAX_SHARES),
    default=100,
    show_default=True,
    help="With --passwd/--nss: their shares.",
)
@click.option(
    "--min-uid",
    type=click.IntRange(0, MAX_ID),
    default=1000,
    show_default=True,
    help="With --passwd/--nss: skip accounts with a smaller uid (system accounts).",
)
@click.option(
    "--max-uid",
    type=click.IntRange(0, MAX_ID),
    default=None,
    help="With --passwd/--nss: skip accounts with a larger uid.",
)
@click.option(
    "--sacctmgr",
    "sacctmgr_file",
    metavar="FILE",
    help="Apply a Slurm `sacctmgr dump` file (- for stdin): accounts become resource "
    "groups, users entries under them, Fairshare their shares.",
)
@click.option("-v", "--verbose", is_flag=True, help="Say what was changed.")
@click.option("--json", "as_json", is_flag=True, help="With -a or -p: print JSON.")
@udb_option
@handle_errors
def main(files, commands, test, replace, force, analyze, mode, maxlevels, init, create_,
         passwd_file, nss, resgrp, maps, shares, min_uid, max_uid, sacctmgr_file, verbose,
         as_json, udb):  # fmt: skip
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
        if files or commands or passwd_file or nss or test or replace or init:
            raise OptionError(
                "-a analyses the UDB; it takes no directives, -p, -r, --init, --passwd or --nss"
            )
        sys.exit(_analyze(open_udb(udb), mode, maxlevels, as_json))
    if maxlevels is not None:
        raise OptionError("-G only goes with -a")
    if passwd_file and nss:
        raise OptionError("--passwd and --nss: give one of them")
    importing = passwd_file is not None or nss
    if (resgrp is not None or maps) and not importing:
        raise OptionError("--resgrp and --map only go with --passwd or --nss")
    if not files and not commands and not importing and not init and not sacctmgr_file:
        raise OptionError(
            "no directives: give a FILE, - for stdin, -c DIRECTIVES, --passwd, --nss, "
            "--sacctmgr or --init"
        )
    rules = [_map_rule(m) for m in maps]

    parsed: list[udbdir.Directive] = []
    for path in files:
        text, source = _read(path)
        with status(f"udbgen: reading {source}"):
            parsed += udbdir.parse(text, source)
    for text in commands:
        parsed += udbdir.parse(text, "-c")
    # Only once the input parses: bad input creates no UDB.  udbgen alone creates one.
    engine = open_udb(udb, create=_may_create(udb, test, init or create_))
    try:
        first = _system_entries(engine, parsed, replace, init, importing)
        if importing:
            users, source = _accounts(nss, passwd_file)
            parsed += _imported(
                engine, first, users, source, resgrp or DEFAULT_GROUP, GroupMap(rules),
                shares, min_uid, max_uid, verbose, replace,
            )  # fmt: skip
        parsed = first + parsed
        if sacctmgr_file:
            parsed += _from_slurm(engine, sacctmgr_file, parsed, replace)
        # The bar follows the directives as they are checked; writing them follows.
        todo = (
            track(parsed, "udbgen: applying", total=len(parsed)) if len(parsed) > 1000 else parsed
        )
        changes = udbdir.run(engine, todo, test=test, replace=replace, force=force)
    except UdbError:
        discard_created(engine)  # a refused run leaves no new UDB behind
        raise
    _report(changes, display_name(resolve_url(udb)), created(engine), test, as_json, verbose)


def _report(changes, name: str, made: bool, test: bool, as_json: bool, verbose: bool) -> None:
    """What a run that went through says: the UDB it made, its warnings, and in test
    mode the directives it would apply (-v: the summary)."""
    if made:
        click.echo(f"udbgen: created a new UDB at {name}", err=True)
    _warn(changes.warnings)
    if test:
        if as_json:
            echo_json(changes.as_json(), indent=True)
        else:
            echo_lines(list(changes.as_directives()))
            click.echo(f"udbgen: test mode, nothing written: {changes.summary()}", err=True)
    elif verbose:
        click.echo(f"udbgen: {name}: {changes.summary()}", err=True)


def _accounts(nss: bool, passwd_file: str | None):
    """(the accounts to import, their source's name): the name service's or a file's."""
    if nss:
        return read_nss(), "nss"
    text, source = _read(passwd_file)
    return read_passwd(text, source), source


def _from_slurm(engine, path: str, parsed, replace: bool):
    """The directives of a sacctmgr dump (udb.slurm), after the run's others."""
    text, source = _read(path)
    existing: dict[str, int] = {}
    if not replace:
        with read_session(engine) as s:
            taken = load_entry_columns(s)
        existing = dict(zip(taken.name, taken.uid, strict=True))
    created = {
        d.name: v for d in parsed if d.verb == "create" for f, v, _ in d.fields if f == "uid"
    }
    names = {**existing, **created}
    return slurm.dump_directives(slurm.read_dump(text, source), source, names, set(names.values()))


#: The most warnings printed one per line; the rest are counted.
_MAX_WARNINGS = 10


def _warn(warnings: list[str]) -> None:
    for w in warnings[:_MAX_WARNINGS]:
        click.echo(f"udbgen: warning: {w}", err=True)
    if len(warnings) > _MAX_WARNINGS:
        click.echo(f"udbgen: warning: {len(warnings) - _MAX_WARNINGS} more like these", err=True)


def _map_rule(text: str) -> tuple[str, str]:
    unix, sep, resgrp = text.partition("=")
    if not sep or not unix or not resgrp:
        raise OptionError(f"--map {text}: expected UNIXGROUP=RESGRP")
    return unix, resgrp


def _may_create(udb: str | None, test: bool, asked: bool) -> bool:
    """Whether this run may create the UDB, refusing (one line, exit 2) a missing SQLite
    UDB it may not create: in test mode; at a path named by --udb or UDB_URL without
    --init or --create (a mistyped path makes no UDB); in a directory that does not exist
    (only the default path's directories are made)."""
    url = resolve_url(udb)
    path = sqlite_file(url)
    if path is None:
        return not test  # a server's database exists already; its schema is laid
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    if st is not None and (st.st_size > 0 or not stat.S_ISREG(st.st_mode)):
        return False  # open_udb says what is wrong with a path that is not a UDB
    if test:
        raise OptionError(f"no UDB at {path}: test mode (-p) does not create one")
    if udb is None:
        return True  # the default path (no --udb, no UDB_URL): nothing was mistyped
    if not asked:
        raise OptionError(
            f"no UDB at {path}; udbgen --init creates one with the system entries "
            "(--create: an empty one)"
        )
    if not path.parent.is_dir():
        raise OptionError(f"no directory {path.parent} for the UDB; udbgen does not make one")
    return True


def _taken(engine, replace: bool, parsed) -> tuple[set[str], set[int]]:
    """The names and uids the UDB's entries and the run's create directives hold."""
    names: set[str] = set()
    uids: set[int] = set()
    if not replace:
        with read_session(engine) as s:
            taken = load_entry_columns(s)
        names, uids = set(taken.name), set(taken.uid)
    for d in parsed:
        if d.verb == "create":
            names.add(d.name)
            uids.update(v for f, v, _ in d.fields if f == "uid")
    return names, uids


def _system_entries(engine, parsed, replace: bool, init: bool, importing: bool):
    """The skeleton's missing entries (udb.skeleton): with --init, or for an import into
    a UDB with no entries, so that what it leaves passes udbgen -a."""
    names, uids = _taken(engine, replace, [])
    if not init and not (importing and not names):
        return []
    more_names, more_uids = _taken(engine, True, parsed)
    return missing_skeleton(names | more_names, uids | more_uids)


def _imported(engine, first, users, source, resgrp, groups, shares, min_uid, max_uid,
              verbose, replace):  # fmt: skip
    """The create directives of an import (--passwd, --nss), after a group for each
    resource group it names that neither the UDB nor the run holds."""
    names, uids = _taken(engine, replace, first)
    imported = passwd_directives(
        users, source, resgrp=resgrp, shares=shares, existing_names=names,
        existing_uids=uids, min_uid=min_uid, max_uid=max_uid, groups=groups,
    )  # fmt: skip
    if verbose:
        for name, reason in imported.skipped:
            click.echo(f"udbgen: {source}: skipping {name}: {reason}", err=True)
    wanted = [resgrp, *(r for _, r in groups.rules)]
    new_groups = []
    for name in dict.fromkeys(wanted):
        if not name.isdigit() and name not in names:
            new_groups.append(group_directive(name, uids, source))
            names.add(name)
            uids.add(dict((f, v) for f, v, _ in new_groups[-1].fields)["uid"])
    return new_groups + imported.directives


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
