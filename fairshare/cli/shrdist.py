"""shrdist: redistribute shares inside one resource group on a running system
(guide 4.4.7 and 4.4.8): interactive (a full-screen editor), batch (-b) or test (-p)."""

from __future__ import annotations

import sys
import time

import click
from rich.console import Console

from fairshare.admin.shrdist import (
    auth_path,
    current_caller,
    distribution_from_json,
    distribution_json,
    history,
    parse_assignments,
    preview,
    redistribute,
)
from fairshare.core.dist import Distribution
from fairshare.display.dist import change_json, change_lines, render_distribution
from udb.cli.common import HELP, Command, handle_errors, last_option, udb_option, version_option
from udb.cli.progress import status
from udb.errors import OptionError
from udb.jsonout import echo_json
from udb.remote import Reader, call, reach, socket_option
from udb.session import open_udb, read_session, write_session


@click.command(cls=Command, context_settings=HELP)
@version_option
@udb_option
@socket_option
@click.option("-g", "--group", metavar="GROUP", help="The resource group ('/' = the top).")
@click.option(
    "-b",
    "--batch",
    "batch",
    multiple=True,
    metavar="NAME=SHARES[,...]",
    help="Batch mode: set these members' shares, all or nothing (repeatable).",
)
@click.option("-p", "--test", "test", is_flag=True, help="Test mode: print, write nothing.")
@click.option(
    "--auth",
    metavar="PATH",
    envvar="SHRDIST_AUTH",
    show_envvar=True,
    help="The authorisation file (default /etc/shrdist.auth).",
)
@click.option("--history", "show_history", is_flag=True, help="List the recorded changes.")
@last_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the display.")
@handle_errors
def main(udb, socket_, group, batch, test, auth, show_history, last, as_json):
    """Redistribute shares inside one resource group, on a running system.

    With no -b or -p, a full-screen editor lists the group's members with their
    shares and the resulting group and machine shares, recomputed as you type:
    u writes the edited shares, q quits (without u nothing is written).
    -b NAME=SHARES[,NAME=SHARES...] sets several members at once, all or nothing;
    -p prints the result and writes nothing.  Without -g, the first group the
    auth file lists for you is used (root: '/', the top of the tree, unless
    listed).  Root may change any group; anyone else only the groups the auth
    file lists for them and the groups beneath.  Every change is recorded
    (--history) and a running shrdaemon applies it at its next cycle.  A user
    who may not write the UDB sends the change to shrdaemon over its socket,
    which checks it against its own auth file and records it under the user's
    login.
    """
    via = reach(udb, socket_)
    auth_file = auth_path(auth)
    if show_history:
        if batch or test:
            raise OptionError("--history takes no -b or -p")
        with read_session(Reader(udb, socket_).engine) as s:
            rows = history(s, group, last)
        if as_json:
            echo_json(change_json(rows), indent=True)
        else:
            for line in change_lines(rows):
                click.echo(line)
        return
    caller = current_caller()
    assignments = parse_assignments(batch)
    if not via.direct and (batch or test):
        reply = call(via.socket, "shrdist", group=group, shares=assignments, test=test)
        _warn(reply["warnings"])
        d = distribution_from_json(reply["distribution"])
        title = "Updated" if not test else "Test mode, nothing written"
        _show(d, written=not test, as_json=as_json, title=title)
        return
    engine = open_udb(udb) if (batch or test) else None
    if batch and not test:
        with status("shrdist: redistributing"), write_session(engine) as s:
            d, warnings = redistribute(
                s, caller, group, assignments, auth=auth_file, now=time.time()
            )
        _warn(warnings)
        _show(d, written=True, as_json=as_json, title="Updated")
        return
    if test:
        with read_session(engine) as s:
            _v, d, warnings = preview(s, caller, group, assignments, auth=auth_file)
        _warn(warnings)
        _show(d, written=False, as_json=as_json, title="Test mode, nothing written")
        return
    if as_json:
        raise OptionError("--json goes with -b or -p (the editor is interactive)")
    if sys.stdin is None or not sys.stdin.isatty():
        raise OptionError("the editor needs a terminal: use -b NAME=SHARES or -p")
    from fairshare.tui.shrdist import make_app  # Textual loads only for the editor

    app = make_app(Reader(udb, socket_), caller, group, auth_file)
    app.run()


def _warn(warnings: list[str]) -> None:
    for w in warnings:
        click.echo(f"shrdist: warning: {w}", err=True)


def _show(d: Distribution, *, written: bool, as_json: bool, title: str) -> None:
    if as_json:
        echo_json(distribution_json(d, written), indent=True)
    else:
        render_distribution(Console(highlight=False), d, title)


if __name__ == "__main__":
    main()
