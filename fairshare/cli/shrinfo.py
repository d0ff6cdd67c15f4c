"""shrinfo: a user's fair-share profile, in the manner of Kay-Lauder's Figure 7
(see man/shrinfo.1).  -v adds the scheduler's settings, as the guide's shrinfo -v."""

from __future__ import annotations

import time

import click

from fairshare.display.settings import settings_json, settings_lines
from fairshare.display.shrinfo import (
    figure7_json,
    figure7_lines,
    profile_json,
    profile_lines,
    site_note,
)
from fairshare.display.shrview import local_time, snapshot_json, stale_message
from fairshare.report.info import (
    Info,
    active_counts,
    load_info,
    load_profile,
    own_lnodes,
    site_usage,
)
from fairshare.report.profile import every_leaf
from fairshare.report.published import share_tree
from udb.cli.common import (
    HELP,
    Command,
    FiniteFloat,
    echo_lines,
    handle_errors,
    udb_option,
    version_option,
)
from udb.errors import NotFound, OptionError
from udb.jsonout import echo_json
from udb.remote import Reader, socket_option
from udb.rules import MAX_EPOCH


@click.command(cls=Command, context_settings=HELP)
@version_option
@udb_option
@socket_option
@click.argument("user", required=False)
@click.option("-v", "--verbose", is_flag=True, help="Also show the scheduler's settings.")
@click.option(
    "-a",
    "--all",
    "every",
    is_flag=True,
    help="List every active user (account) as Kay-Lauder's Figure 7 does, highest usage "
    "first, instead of one profile.",
)
@click.option("--host", metavar="NAME", help="Use the lnode table this host's daemon published.")
@click.option(
    "--now",
    type=FiniteFloat(0, MAX_EPOCH),
    metavar="EPOCH",
    help="Take this as the current time (epoch s, 0 to 1e11).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the display.")
@handle_errors
def main(udb, socket_, user, verbose, every, host, now, as_json):
    """Show USER's fair-share profile (default: yours): shares, machine share (Share),
    effective share (E-share) and decayed usage, the groups above it with theirs, the
    group that limits it, and how long it would have to stay idle for its usage to
    decay to its fair level.  A user without processes is shown with its static
    share and stored usage.  With -a, one such first line for every active user.
    Exit status 0, or 2 for bad input."""
    if every and user is not None:
        raise OptionError(f"-a lists every user: give no USER (got {user!r})")
    now = time.time() if now is None else now
    engine = Reader(udb, socket_).engine
    info = load_info(engine, host, now)
    if info.snap is not None and not info.snap.running:
        click.echo(stale_message(info.snap, local_time, "shrinfo"), err=True)
    if every:
        _show_every(engine, info, verbose, as_json)
        return
    profile, notes, tree, lnodes = load_profile(engine, info, user, now)
    me = site_usage(engine, profile.name, info, now)
    site = site_note(me, info.snap, profile) if me is not None else None
    active = active_counts(lnodes, tree)
    mode = info.snap.mode if info.snap is not None else info.consts.mode
    if as_json:
        doc = {
            **snapshot_json(info.snap),
            "notes": notes,
            "user": profile_json(profile),
            "site": site[1] if site else None,
        }
        _print_json(doc, info, active, verbose)
        return
    _print_settings(info, active, mode, verbose)
    for line in notes + profile_lines(profile) + ([site[0]] if site else []):
        click.echo(line)


def _show_every(engine, info: Info, verbose: bool, as_json: bool) -> None:
    """shrinfo -a: Figure 7 over the published table's active leaves (-v: settings first)."""
    snap = info.snap
    if snap is None:
        raise NotFound("no lnode table has been published in this UDB: is shrdaemon running?")
    lnodes = own_lnodes(snap)
    leaves = every_leaf(lnodes)
    active = active_counts(lnodes, share_tree(engine, snap.mode))
    if as_json:
        _print_json({**snapshot_json(snap), "users": figure7_json(leaves)}, info, active, verbose)
        return
    _print_settings(info, active, snap.mode, verbose)
    echo_lines(figure7_lines(leaves))


def _print_json(doc: dict, info: Info, active: tuple, verbose: bool) -> None:
    if verbose:
        doc["settings"] = settings_json(*info.settings)
        doc["active"] = {"ids": active[0], "total_ids": active[1], "groups": active[2]}
    echo_json(doc)


def _print_settings(info: Info, active: tuple, mode: str, verbose: bool) -> None:
    if not verbose:
        return
    for line in settings_lines(*info.settings):
        click.echo(line)
    who = "accounts" if mode == "account" else "users"
    click.echo(f"Active {who} = {active[0]}/{active[1]}, active groups = {active[2]}.")
    click.echo()


if __name__ == "__main__":
    main()
