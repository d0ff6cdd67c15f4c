"""shrinfo: a user's fair-share profile, in the manner of Kay-Lauder's Figure 7
(see man/shrinfo.1).  -v adds the scheduler's settings, as the guide's shrinfo -v."""

from __future__ import annotations

import os
import time
from datetime import datetime

import click
import orjson
from sqlalchemy import select

from fairshare.accounts import default_acid
from fairshare.admin import load_effective_consts, schedules
from fairshare.consts import GLOBALUSAGE, load_consts
from fairshare.display.settings import settings_json, settings_lines
from fairshare.display.shrinfo import (
    active_profile,
    entry_profile,
    every_leaf,
    figure7_json,
    figure7_lines,
    profile_json,
    profile_lines,
)
from fairshare.display.shrview import (
    load_published,
    local_time,
    snapshot_json,
    stale_message,
    view_lnodes,
)
from fairshare.lnode import aged_usage
from fairshare.store import published_hosts, read_site
from fairshare.tree import TREE_COLUMNS, build_tree
from udb.cli.common import FiniteFloat, handle_errors, udb_option
from udb.errors import NotFound, OptionError
from udb.models import MAX_EPOCH, SHF_ACCOUNT, SHF_GROUP, Entry
from udb.remote import Reader, socket_option
from udb.session import read_session


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
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
    with read_session(engine) as s:
        base = load_consts(s)
        rows = schedules(s)
        consts, in_force = load_effective_consts(s, datetime.fromtimestamp(now))
    snap = None
    if host is not None or published_hosts(engine):
        snap = load_published(engine, host, now, consts)
        if not snap.running:
            click.echo(stale_message(snap, local_time, "shrinfo"), err=True)
    if every:
        _show_every(engine, snap, verbose, as_json, (base, rows, in_force))
        return
    mode = snap.mode if snap is not None else consts.mode
    notes = []
    with read_session(engine) as s:
        entry = _entry(s, user)
        if mode == "account" and not entry.shflags & (SHF_ACCOUNT | SHF_GROUP):
            account = _default_account(s, entry)
            notes.append(f"{entry.name} is charged to its default account {account.name}")
            entry = account
        tree = build_tree(s.execute(select(*TREE_COLUMNS)).all(), mode)
    lnodes = view_lnodes(snap.lnodes, lambda uid: uid == os.getuid()) if snap else []
    if any(v.name == entry.name and v.parent >= 0 for v in lnodes):
        profile = active_profile(lnodes, entry.name, consts.halflife)
    else:
        node = tree.find(entry.name)
        if node is None:
            raise NotFound(f"{entry.name}: the entry is not in the share tree (see shrtree -e)")
        static = tree.m_shares(None)
        profile = entry_profile(
            name=entry.name,
            uid=entry.uid,
            kind=tree.kind(node).label,
            shares=float(entry.shares),
            static_m_share=float(static[node]),
            aged_usage=aged_usage(entry.shusage, entry.shextime, now, consts),
            groups=[(tree.names[a], float(static[a])) for a in reversed(tree.ancestors(node)[:-1])],
            halflife=consts.halflife,
        )
    site = site_note(engine, entry.name, snap, profile, consts, now)
    leaves = [v for v in lnodes if not v.is_group]
    active = (len(leaves), int(tree.leaf_mask.sum()), sum(v.kind == "group" for v in lnodes))
    who = "accounts" if mode == "account" else "users"
    if as_json:
        doc = {
            **snapshot_json(snap),
            "notes": notes,
            "user": profile_json(profile),
            "site": site[1] if site else None,
        }
        if verbose:
            doc["settings"] = settings_json(base, rows, in_force)
            doc["active"] = {"ids": active[0], "total_ids": active[1], "groups": active[2]}
        click.echo(orjson.dumps(doc))
        return
    if verbose:
        for line in settings_lines(base, rows, in_force):
            click.echo(line)
        click.echo(f"Active {who} = {active[0]}/{active[1]}, active groups = {active[2]}.")
        click.echo()
    for line in notes + profile_lines(profile) + ([site[0]] if site else []):
        click.echo(line)


def _show_every(engine, snap, verbose: bool, as_json: bool, settings: tuple) -> None:
    """shrinfo -a: Figure 7 over the published table's active leaves (-v: settings first)."""
    if snap is None:
        raise NotFound("no lnode table has been published in this UDB: is shrdaemon running?")
    lnodes = view_lnodes(snap.lnodes, lambda uid: uid == os.getuid())
    leaves = every_leaf(lnodes)
    with read_session(engine) as s:
        total = int(build_tree(s.execute(select(*TREE_COLUMNS)).all(), snap.mode).leaf_mask.sum())
    active = (len(leaves), total, sum(v.kind == "group" for v in lnodes))
    if as_json:
        doc = {
            **snapshot_json(snap),
            "users": figure7_json(leaves),
        }
        if verbose:
            doc["settings"] = settings_json(*settings)
            doc["active"] = {"ids": active[0], "total_ids": active[1], "groups": active[2]}
        click.echo(orjson.dumps(doc))
        return
    if verbose:
        for line in settings_lines(*settings):
            click.echo(line)
        who = "accounts" if snap.mode == "account" else "users"
        click.echo(f"Active {who} = {active[0]}/{active[1]}, active groups = {active[2]}.")
        click.echo()
    for line in figure7_lines(leaves):
        click.echo(line)


def site_note(engine, name: str, snap, profile, consts, now: float) -> tuple[str, dict] | None:
    """With GLOBALUSAGE, when `name` also runs on other hosts: the line saying that its
    usage there lowers its share here, and the same as JSON (site-wide usage, CPUs per
    host); None otherwise."""
    if snap is None or not consts.flags & GLOBALUSAGE:
        return None
    _hosts, lnodes = read_site(engine, now, consts.halflife)
    me = next((v for v in lnodes if v.name == name and v.kind not in ("root", "group")), None)
    if me is None:
        return None
    elsewhere = {h: c for h, c in me.cpus.items() if h != snap.host}
    if not elsewhere:
        return None
    here = me.cpus.get(snap.host, 0.0)
    there = ", ".join(f"{h} {c:.2f}" for h, c in sorted(elsewhere.items()))
    low = profile.e_share is not None and profile.e_share < profile.m_share
    line = (
        f"  GLOBALUSAGE: it also runs on other hosts (CPUs: {there}; {here:.2f} here on "
        f"{snap.host}); its site-wide usage {me.usage:.4g} counts here"
        + (", which is why its E-share is below its Share" if low else "")
    )
    doc = {"usage": me.usage, "cpus": me.cpus, "low_because_of_other_hosts": low}
    return line, doc


def _entry(session, name: str | None) -> Entry:
    """The UDB entry called `name`, or the caller's (by uid)."""
    if name is None:
        uid = os.getuid()
        entry = session.scalar(select(Entry).where(Entry.uid == uid))
        if entry is None:
            raise NotFound(f"no UDB entry has your uid {uid}; give a USER")
        return entry
    entry = session.scalar(select(Entry).where(Entry.name == name))
    if entry is None:
        raise NotFound(f"{name}: no such UDB entry")
    return entry


def _default_account(session, entry: Entry) -> Entry:
    """The shareholder entry of `entry`'s default account (the first of its acids)."""
    acid = default_acid(entry.acids)
    if acid is None:
        raise NotFound(f"{entry.name}: no account (acids is empty) in Share by Account mode")
    account = session.scalar(select(Entry).where(Entry.uid == acid))
    if account is None or not account.shflags & SHF_ACCOUNT:
        raise NotFound(f"{entry.name}: its default account {acid} has no shareholder entry")
    return account


if __name__ == "__main__":
    main()
