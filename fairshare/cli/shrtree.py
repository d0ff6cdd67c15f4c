"""shrtree: display and verify the fair-share hierarchy defined in the UDB (guide 4.4.11.3)."""

from __future__ import annotations

import contextlib
import gc
import sys
import time

import click

from fairshare.display.shrtree import display_lines, parsable_lines, render_problems, report_json
from fairshare.report.sharetree import TreeReport, load_tree_report
from udb.cli.common import (
    HELP,
    Command,
    FiniteFloat,
    echo_lines,
    handle_errors,
    udb_option,
    version_option,
)
from udb.errors import OptionError
from udb.jsonout import echo_json
from udb.remote import socket_option
from udb.rules import MAX_EPOCH


@click.command(cls=Command, context_settings=HELP)
@version_option
@udb_option
@socket_option
@click.option(
    "-l", "--long", "long_", is_flag=True, help="Show users (or accounts with -A), not only groups."
)
@click.option(
    "-e",
    "--errors",
    "errors_only",
    is_flag=True,
    help="List only the entries with warnings or errors, with their descriptions.",
)
@click.option(
    "-A",
    "--by-account",
    is_flag=True,
    help="Analyse in Share by Account mode (accounts under groups) instead of by UID (resgrp).",
)
@click.option("--node", metavar="NAME", help="Show only the subtree under the entry NAME.")
@click.option(
    "--now",
    type=FiniteFloat(0, MAX_EPOCH),
    metavar="EPOCH",
    help="Age usage to this time, in seconds since the epoch, 0 to 1e11 (default: now).",
)
@click.option(
    "-r",
    "--repeat",
    type=click.IntRange(min=1, max=1_000_000),
    metavar="N",
    help="Repeat mode: N displays, one per share cycle (shradmin -R), separated by form feeds.",
)
@click.option(
    "-c",
    "--continuous",
    is_flag=True,
    help="Continuous mode: a full-screen display refreshed every share cycle; keys l (users), "
    "e (problems), / (a subtree), p pause, + - the interval, ? help, q quit.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the display.")
@click.option(
    "-P",
    "--parsable",
    is_flag=True,
    help="Print one line a node, fields separated by |, under Slurm sshare's names "
    "(RawShares, NormShares, EffectvUsage, FairShare) where the meaning is the same.",
)
@handle_errors
def main(
    udb, socket_, long_, errors_only, by_account, node, now, repeat, continuous, as_json, parsable
):
    """Display the share tree (fair-share hierarchy) in the UDB and report its problems.

    Each row shows a node's level, name, ID, static System Share (its machine
    share if every user were logged on), Group Share (its shares among its
    siblings'), System Usage (its fraction of all decayed usage), Status (G, U,
    A or I and the problem codes) and shflags in octal.  The codes are listed in
    shrtree(8).  Exit status: 0 when no errors were found (warnings allowed), 1
    when there are errors, 2 for bad input.
    """
    # One short run allocates ~10 objects per entry and frees them at exit; the cyclic
    # collector would only rescan them over and over (a third of the time at 100,000 users).
    gc.disable()

    def load(node: str | None) -> TreeReport:
        return load_tree_report(
            udb,
            socket_,
            now=time.time() if now is None else now,
            mode="account" if by_account else "user",
            node=node,
        )

    if as_json and parsable:
        raise OptionError("--json and -P: give one of them")
    if continuous:
        if repeat or as_json or parsable:
            raise OptionError("-c (continuous) goes with neither -r, --json nor -P")
        from fairshare.tui.monitor import Monitor, require_terminal
        from fairshare.tui.views import ShrtreeView

        require_terminal("shrtree -c")
        gc.enable()  # runs on
        report = load(node)  # a bad --node or UDB: one line, before the screen is taken
        with contextlib.suppress(KeyboardInterrupt):
            Monitor(ShrtreeView(load, long_, errors_only, node), report.delta).run()
        return
    for i in range(repeat or 1):
        if i:
            time.sleep(report.delta)  # the guide's pace (4.4.11): the share cycle
            click.echo("\f", nl=False)
        report = load(node)
        show(report, long_, errors_only, as_json, parsable)
    sys.exit(1 if report.errors else 0)


def show(
    report: TreeReport, long_: bool, errors_only: bool, as_json: bool, parsable: bool = False
) -> None:
    """Print one display of `report`: JSON, -P's lines, the -e listing or the tree."""
    if as_json:
        echo_json(report_json(report, long_, errors_only))
    elif parsable:
        echo_lines(parsable_lines(report, long_, errors_only))
    elif errors_only:
        from rich.console import Console  # -e colours its lines; the other outputs are plain

        render_problems(report, Console(highlight=False, soft_wrap=True), long_)
    else:
        echo_lines(display_lines(report, long_))


if __name__ == "__main__":
    main()
