"""shrgrid: a site's part in a grid: its name, mounted VO policies, peer sites."""

from __future__ import annotations

import sys
import time

import click

from fairshare.admin.shrgrid import Change, configure, fetch_now, status
from udb.cli.common import HELP, Command, handle_errors, udb_option, version_option
from udb.errors import OptionError
from udb.jsonout import echo_json
from udb.session import display_name, open_udb


@click.command(cls=Command, context_settings=HELP)
@version_option
@udb_option
@click.option("--site", metavar="NAME", help="Name this site (what its usage records carry).")
@click.option("--mount", metavar="ENTRY", help="Mount a VO's policy at the local group ENTRY.")
@click.option("--from", "source", metavar="URL", help="With --mount or --peer: the UDB's URL.")
@click.option("--policy", metavar="NAME", help="With --mount: the VO's group (default: ENTRY).")
@click.option("--unmount", metavar="ENTRY", help="Unmount the policy at ENTRY.")
@click.option("--peer", metavar="SITE", help="Pull SITE's usage records from --from URL.")
@click.option("--unpeer", metavar="SITE", help="Stop pulling SITE's records.")
@click.option("--fetch", is_flag=True, help="Fetch every mount and pull every peer now.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@handle_errors
def main(udb, site, mount, source, policy, unmount, peer, unpeer, fetch, as_json):
    """Set up this site's part in a grid, fetch now, or show the grid's status.

    Mounted policies are copied into the UDB (read-only there) and usage records are
    pulled from the peers' UDBs over read-only connections; shrdaemon does both every
    --grid-interval seconds.  With no option: where each mount comes from, when it was
    last fetched and the peers' progress.
    """
    if (mount or peer) and not source:
        raise OptionError("--mount and --peer need --from URL")
    if source and not (mount or peer):
        raise OptionError("--from goes with --mount or --peer")
    if mount and peer:
        raise OptionError("--mount and --peer: give one of them a run")
    engine = open_udb(udb)
    change = Change(
        site=site,
        mount=(mount, source, policy or mount) if mount else None,
        unmount=unmount,
        peer=(peer, source) if peer else None,
        unpeer=unpeer,
    )
    if change != Change():
        for line in configure(engine, change):
            click.echo(line)
    if fetch:
        lines, ok = fetch_now(engine, time.time())
        for line in lines:
            click.echo(line)
        if not ok:
            sys.exit(1)
    if change == Change() and not fetch:
        show(status(engine), as_json)


def show(doc: dict, as_json: bool) -> None:
    """The status, as JSON or a few lines."""
    if as_json:
        echo_json(doc, indent=True)
        return
    click.echo(f"site: {doc['site'] or '(not named: shrgrid --site NAME)'}")
    for m in doc["mounts"]:
        fetched = _when(m["fetched"]) if m["fetched"] else "never"
        click.echo(
            f"mount {m['name']}: {m['policy']} from {display_name(m['source'])}, fetched {fetched}"
        )
        if m["error"]:
            tried = _when(m["tried"])
            click.echo(f"  last try {tried} failed, last good version kept: {m['error']}")
    for p in doc["peers"]:
        pulled = _when(p["pulled"]) if p["pulled"] else "never"
        click.echo(
            f"peer {p['site']}: {display_name(p['source'])}, record {p['applied']} applied, "
            f"pulled {pulled}"
        )
        if p["error"]:
            click.echo(f"  last try {_when(p['tried'])} failed: {p['error']}")


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


if __name__ == "__main__":
    main()
