"""shrsync: synchronise the UDB with the running shrdaemon's lnodes (guide 4.7)."""

from __future__ import annotations

import socket
import time

import click

from fairshare.admin.shrdist import current_caller
from fairshare.admin.shrsync import Done, submit, wait
from fairshare.daemon.sync import QUOTA, UPDATE
from udb.cli.common import HELP, Command, FiniteFloat, handle_errors, udb_option, version_option
from udb.errors import OptionError
from udb.jsonout import echo_json
from udb.remote import call, reach, socket_option
from udb.session import open_udb

#: Without --timeout, wait this many of the daemon's cycles (plus a margin) for an answer.
WAIT_CYCLES = 3
MARGIN = 2.0


@click.command(cls=Command, context_settings=HELP)
@version_option
@udb_option
@socket_option
@click.option(
    "-u", "--update", "do_update", is_flag=True, help="Bring the UDB up to date from the lnodes."
)
@click.option(
    "-q", "--quota", "do_quota", is_flag=True, help="Push cpuquotaused from the UDB to the lnodes."
)
@click.option(
    "--host",
    metavar="HOST",
    help="The daemon's host name (default: this host; 'simulator' for shrdaemon --simulate).",
)
@click.option(
    "--timeout",
    type=FiniteFloat(0, 86400),
    metavar="SECONDS",
    help="How long to wait for the daemon, 0 to 86400 (default: 3 of its cycles + 2 s).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what the daemon did as JSON.")
@handle_errors
def main(udb, socket_, do_update, do_quota, host, timeout, as_json):
    """Synchronise the UDB and the running shrdaemon.

    -u writes every active lnode's usage, charges and CPU time to the UDB now
    (shusage, shextime, shcharge, cpuquotaused), without waiting for the user to
    leave.  -q makes every active lnode take its entry's cpuquotaused as its new
    CPU-quota base.  To clear the quota of an active user:
    shrsync -u; udbgen -c 'update:USER:cpuquotaused:0:'; shrsync -q.
    With both, -u is done first.  shrsync waits for the daemon to answer and
    exits 2 if no running daemon does.  When you may not write the UDB, the
    request goes to shrdaemon over its socket, which serves it for root only.
    """
    if not (do_update or do_quota):
        raise OptionError("give -u (update the UDB), -q (push quotas) or both")
    via = reach(udb, socket_)
    host = host or socket.gethostname()
    who = current_caller().who
    done = []
    for wanted, kind in ((do_update, UPDATE), (do_quota, QUOTA)):
        if not wanted:
            continue
        if not via.direct:
            wait_s = timeout if timeout is not None else 60.0
            d = call(via.socket, "shrsync", kind=kind, timeout=timeout, wait=wait_s + MARGIN)
            done.append(Done(**d["done"]))
            continue
        engine = open_udb(via.url)
        rid, delta = submit(engine, host, kind, who, time.time())
        limit = timeout if timeout is not None else WAIT_CYCLES * delta + MARGIN
        done.append(wait(engine, rid, limit))
    if as_json:
        echo_json(done, indent=True)  # each Done as the object of its fields (shrsync(8))
        return
    for d in done:
        what = "UDB updated from" if d.kind == UPDATE else "quota base re-read by"
        click.echo(f"shrsync: {what} {d.lnodes} active lnode(s) of {d.host}")


if __name__ == "__main__":
    main()
