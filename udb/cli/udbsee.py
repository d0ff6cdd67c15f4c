"""udbsee: show UDB entries as udbgen directives (the default) or as JSON."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import click

from udb import listing
from udb.cli.common import HELP, Command, echo_lines, handle_errors, udb_option, version_option
from udb.errors import NotFound, OptionError
from udb.fields import FIELDS
from udb.image import shown_fields
from udb.jsonout import echo_json
from udb.models import Entry
from udb.remote import Reader, socket_option
from udb.session import read_session


@click.command("udbsee", cls=Command, context_settings=HELP)
@version_option
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option(
    "-a",
    "--all",
    "show_all",
    is_flag=True,
    help="Every entry, after the account registry (as acid directives).",
)
@click.option(
    "-f",
    "--fields",
    "field_list",
    metavar="[VERB,]FIELD,...",
    help="Only these fields; a leading create or update sets the directive verb.",
)
@click.option("--accounts", is_flag=True, help="Only the account registry.")
@click.option(
    "--sacctmgr",
    is_flag=True,
    help="The share tree as a Slurm `sacctmgr dump` file (groups as accounts, Fairshare "
    "their shares), which udbgen --sacctmgr reads back.",
)
@click.option(
    "--cluster",
    default=None,
    metavar="NAME",
    help="With --sacctmgr: the Cluster line's name (default this host's name).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of directives.")
@udb_option
@socket_option
@handle_errors
def main(names, show_all, field_list, accounts, sacctmgr, cluster, as_json, udb,
         socket_):  # fmt: skip
    """Show UDB entries as udbgen directives.

    With no NAME and no -a, show the entry whose uid is the caller's.  The
    output of "udbsee -a" loaded by "udbgen -" into an empty UDB reproduces
    the UDB (password hashes are never shown, so they are not carried over).
    Nobody but root sees a password field; users who read the UDB through
    shrdaemon see no CPU quota, quota used or comment of other users' entries.
    """
    verb, fields = "create", None
    if field_list is not None:
        field_list, names = listing.join_field_list(field_list, names)
        try:
            verb, fields = listing.parse_field_list(field_list)
        except ValueError as err:
            raise OptionError(f"-f: {err}") from None
    if show_all and names:
        raise OptionError("give NAMEs or -a, not both")
    if cluster is not None and not sacctmgr:
        raise OptionError("--cluster only goes with --sacctmgr")
    if sacctmgr:
        if names or show_all or field_list or accounts or as_json:
            raise OptionError(
                "--sacctmgr shows the whole tree: no NAME, -a, -f, --accounts, --json"
            )
        return _sacctmgr(Reader(udb, socket_), cluster or socket.gethostname())
    reader = Reader(udb, socket_)
    with read_session(reader.engine) as s:
        registry = listing.select_accounts(s) if (show_all or accounts) else []
        if accounts and not show_all and not names:
            entries: list[Entry] = []
        elif show_all:
            entries = listing.select_entries(s)
        elif names:
            entries = listing.select_entries(s, list(names))
        else:
            entries = listing.entries_with_uid(s, os.getuid())
            if not entries:
                raise NotFound(f"no entry has your uid {os.getuid()}; give a NAME or -a")
        shown = fields_for(reader, fields)
        if as_json:
            if accounts and not show_all and not names:
                out: list[dict] = [{"name": n, "acid": a} for n, a in registry]
            else:
                out = [listing.entry_record(e, shown(e)) for e in entries]
            echo_json(out, indent=True)
            return
        lines = [listing.format_account(name, acid) for name, acid in registry]
        echo_lines(lines + [listing.format_entry(e, shown(e), verb) for e in entries])


def _sacctmgr(reader: Reader, cluster: str) -> None:
    from udb.slurm import TreeEntry, tree_dump

    with read_session(reader.engine) as s:
        entries = [
            TreeEntry(e.name, e.uid, e.resgrp, e.shares, e.shflags, e.comment or "")
            for e in listing.select_entries(s)
        ]
    click.echo(tree_dump(entries, cluster), nl=False)


def fields_for(reader: Reader, fields: list[str] | None) -> Callable[[Entry], list[str] | None]:
    """The fields to show of an entry: `fields` (None: all), less the password for
    anyone but root, and for a caller reading through the daemon (who cannot read the
    UDB itself) only those udb.image left in (`shown_fields`: the private ones of the
    caller's own user entry, not of a group or account that has the caller's uid)."""
    if reader.viewer == 0:
        return lambda _e: fields
    mine = [f for f in (fields or FIELDS) if f != "passwd"]
    if not reader.through_daemon:
        return lambda _e: mine
    return lambda e: shown_fields(mine, reader.viewer, e.uid, e.shflags)


if __name__ == "__main__":
    main()
