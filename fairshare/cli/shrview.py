"""shrview: display the fair-share scheduler's state from the lnode table the daemon
publishes (guide 4.4.11.1); see man/shrview.1.

Line mode (default) waits for the next published cycle and prints one display;
-r N prints N, one per cycle, separated by form feeds; -c runs the full-screen monitor
(fairshare.tui.monitor) until q or Ctrl-C.  Without a running daemon it says so on
stderr and shows the last published state without waiting.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import time

import click

from fairshare.display.shrview import (
    DISPLAYS,
    SORTS,
    check_select,
    display_json,
    display_lines,
    header_lines,
    local_time,
    parsable_lines,
    parse_select,
    parse_sort,
    stale_message,
)
from fairshare.display.site import site_json, site_lines
from fairshare.report.lnodes import ViewRequest
from fairshare.report.published import Source, caller_own, load_site, tree_leaves
from udb.cli.common import (
    HELP,
    Command,
    FiniteFloat,
    complete_values,
    echo_lines,
    handle_errors,
    udb_option,
    version_option,
)
from udb.errors import OptionError
from udb.jsonout import echo_json
from udb.remote import Reader, socket_option
from udb.rules import MAX_EPOCH

#: How long line and repeat modes wait for the next cycle, in deltas.
WAIT_DELTAS = 1.5

_DISPLAY_WORDS = {name.split()[0]: name for name in DISPLAYS.values()}


def parse_display(value: str) -> str:
    """The display name from a -d letter (m a s n l g) or word (monitor, adjgroup, ...)."""
    name = DISPLAYS.get(value) or _DISPLAY_WORDS.get(value)
    if name is None:
        raise OptionError(
            f"-d {value}: expected m (monitor), a (adjgroup), s (statistics), n (nice), "
            "l (limshare) or g (graph)"
        )
    return name


@click.command(cls=Command, context_settings=HELP)
@version_option
@udb_option
@socket_option
@click.option(
    "-d",
    "--display",
    default="m",
    show_default=True,
    metavar="D",
    shell_complete=complete_values(DISPLAYS),
    help="m monitor, a adjgroup, s statistics, n nice tables, l limshare, g graph "
    "(Kay-Lauder Figure 6); the guide's -dm works.",
)
@click.option(
    "-s",
    "--select",
    "select_",
    default="all",
    show_default=True,
    metavar="S",
    help="all (a), only groups (o, groups), only users (u, users), or an lnode NAME: its subtree.",
)
@click.option(
    "-o",
    "--sort",
    default="tree",
    show_default=True,
    metavar="KEY",
    shell_complete=complete_values({k: "" for k in SORTS if len(k) > 1}),
    help="Order siblings by tree (name), id, name, usage, rate or eshr (numbers "
    "descending); indentation keeps the tree.  First letters work (-oi).",
)
@click.option(
    "-r",
    "--repeat",
    type=click.IntRange(min=1, max=1_000_000),
    metavar="N",
    help="Repeat mode: N displays (1 to 1,000,000), one per cycle, separated by form feeds.",
)
@click.option(
    "-c",
    "--continuous",
    is_flag=True,
    help="Continuous mode: a full-screen display refreshed every cycle; keys m a s n l g "
    "switch the display, o the sort, / selects, p pauses, + - the interval, ? help, q quits.",
)
@click.option("--host", metavar="NAME", help="Show the table this host's daemon published.")
@click.option(
    "--site",
    is_flag=True,
    help="Show the whole site: every lnode's usage summed over all the hosts that share "
    "the UDB, its CPUs there, and the hosts it runs on.",
)
@click.option(
    "--now",
    type=FiniteFloat(0, MAX_EPOCH),
    metavar="EPOCH",
    help="Take this as the current time (epoch s, 0 to 1e11) for the age of the table.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one document per line).")
@click.option(
    "-P",
    "--parsable",
    is_flag=True,
    help="Print the display's lnodes one a line, fields separated by |, under the --json "
    "keys (for scripts; the tabular displays m, a, l, g).",
)
@handle_errors
def main(
    udb, socket_, display, select_, sort, repeat, continuous, host, site, now, as_json, parsable
):
    """Display the fair-share scheduler's state: the lnode table the daemon publishes
    every cycle, as the guide's monitor (-dm), adjgroup (-da), statistics (-ds), nice
    (-dn) and limshare (-dl) displays, or the Kay-Lauder group bars (-dg).  Names are
    indented by level; * marks your own lnode.  Without a running daemon it says so on
    stderr and shows the last published state.  Exit status 0, or 2 for bad input or
    when nothing was published."""
    if site:
        if host or repeat or continuous or parsable:
            raise OptionError("--site shows every host: it goes with neither --host, -r, -c nor -P")
        show_site(Reader(udb, socket_).engine, now, as_json)
        return
    req = ViewRequest(display=parse_display(display), select=parse_select(select_))
    req.sort = parse_sort(sort)
    if continuous and (repeat or as_json or parsable):
        raise OptionError("-c (continuous) goes with neither -r, --json nor -P")
    if parsable and (as_json or site or req.display in ("nice tables", "statistics")):
        raise OptionError(
            "-P prints the tabular displays (m, a, l, g): not with --json, --site, -dn or -ds"
        )
    if continuous:  # runs on: the collector its script turned off comes back (cli.start)
        from fairshare.tui.monitor import require_terminal

        # Without one it would draw for ever where nobody sees it, and no q could stop it.
        require_terminal("shrview -c")
        gc.enable()
    else:
        # A display is built and printed, then the process ends: the cyclic garbage
        # collector would only rescan 100,000 rows' objects again and again (a third of
        # -dm's time at that size).
        gc.disable()
    source = Source(Reader(udb, socket_), host, now)
    snap = source.take()
    engine = source.engine
    req.own = caller_own(engine, snap.mode)
    if req.display == "statistics":
        req.total_ids = tree_leaves(engine, snap.mode)
    if continuous:  # the Textual monitor: keys switch display, sort, select, pause, ...
        from fairshare.tui.monitor import Monitor
        from fairshare.tui.views import ShrviewView

        check_select(snap, req)
        with contextlib.suppress(KeyboardInterrupt):
            Monitor(ShrviewView(source, req), snap.delta).run()
        return
    warned = False
    for i in range(repeat or 1):
        if i:
            snap = source.take()
        if snap.running and source.wait_for_cycle(snap.cycle, WAIT_DELTAS * snap.delta):
            snap = source.take()
        if as_json:
            show = functools.partial(echo_json, display_json(snap, req))
        elif parsable:
            show = functools.partial(echo_lines, parsable_lines(display_json(snap, req)))
        else:
            # The heading goes out at once, so a pager shows something while the
            # table of a large site is built (a bad -s is found before it).
            check_select(snap, req)
            head = header_lines(snap, req, local_time) + [""]
            click.echo(("\f" if i else "") + "\n".join(head))
            sys.stdout.flush()
            rest = "\n".join([*display_lines(snap, req, local_time)[len(head) :], ""])
            show = functools.partial(click.echo, rest, nl=False)  # adding a newline copies
        if not snap.running and not warned:  # after the display is built: bad -s first
            click.echo(stale_message(snap, local_time), err=True)
            warned = True
        show()
    # Not a return: the exception keeps this frame and the display's 100,000 rows alive
    # to the end, which its script reaches without freeing them (udb.cli.start).
    sys.exit(0)


def show_site(engine, now: float | None, as_json: bool) -> None:
    """Print the site display (fairshare.display.site) of the UDB behind `engine`."""
    now = time.time() if now is None else now
    hosts, lnodes = load_site(engine, now)
    if as_json:
        echo_json(site_json(hosts, lnodes, now))
    else:
        echo_lines(site_lines(hosts, lnodes, now))


if __name__ == "__main__":
    main()
