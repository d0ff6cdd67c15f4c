"""shrprio: users (accounts) ordered by their flat fair-share priority, for scripts and
batch schedulers (seed 001's fairshare priority factor callout; man/shrprio.1)."""

from __future__ import annotations

import socket

import click

from fairshare.report.published import pick_host
from fairshare.store.priority import Priorities, published_priorities
from fairshare.store.site import published_hosts
from udb.cli.common import HELP, Command, echo_lines, handle_errors, udb_option, version_option
from udb.errors import NotFound
from udb.jsonout import echo_json
from udb.remote import NoDaemon, Reader, call, reach, socket_option


@click.command("shrprio", cls=Command, context_settings=HELP)
@version_option
@udb_option
@socket_option
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--host", metavar="NAME", help="Use the lnode table this host's daemon published.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@handle_errors
def main(udb, socket_, names, host, as_json):
    """List the active users (accounts) by their flat fair-share priority, highest first:
    the one farthest behind its targets, to run first.  Each has its target-deviation
    tuple (its entries' target share minus actual share, root to leaf, in percentage
    points) and the base-200 number made from it (Elmroth and Gardfjall's section 4).
    NAME... lists only those.  Exit status 0, or 2 for bad input."""
    doc = _priorities(udb, socket_, host)
    if names:
        wanted = set(names)
        missing = sorted(wanted - {p["name"] for p in doc["lnodes"]})
        if missing:
            raise NotFound(f"{', '.join(missing)}: no such active lnode on host {doc['host']}")
        doc["lnodes"] = [p for p in doc["lnodes"] if p["name"] in wanted]
    if as_json:
        echo_json(doc, indent=True)
        return
    echo_lines(priority_lines(doc))


def _priorities(udb, socket_, host) -> dict:
    """The `priority` document: computed from the UDB when the caller may change it, else
    asked of the daemon, else from the UDB read-only (as every display falls back)."""
    if not reach(udb, socket_).direct:
        try:
            return call(reach(udb, socket_).socket, "priority", host=host)
        except NoDaemon:
            pass
    engine = Reader(udb, socket_).engine
    name = pick_host(published_hosts(engine), host, socket.gethostname())
    return published_priorities(engine, name).as_json()


def priority_lines(doc: dict) -> list[str]:
    """The plain display: a header, then one line per lnode, highest priority first."""
    lines = [
        f"host {doc['host']}, cycle {doc['cycle']}, depth {doc['depth']} (base {doc['base']})",
        f"{'Rank':>4}  {'Name':<16} {'Kind':<8} {'Priority':>20}  Deviations (pp, root to leaf)",
    ]
    for rank, p in enumerate(doc["lnodes"], 1):
        devs = " ".join(f"{d:+.1f}" for d in p["deviations"])
        lines.append(f"{rank:>4}  {p['name']:<16} {p['kind']:<8} {p['priority']:>20}  {devs}")
    return lines


__all__ = ["main", "priority_lines", "Priorities"]
