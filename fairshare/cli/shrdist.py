"""shrdist: redistribute shares inside one resource group on a running system
(guide 4.4.7 and 4.4.8): interactive (a full-screen editor), batch (-b) or test (-p)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime

import click
from rich.console import Console
from rich.table import Table
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.widgets import Footer, Input, Label, Static

from fairshare.dist import (
    Caller,
    Distribution,
    GroupView,
    auth_path,
    current_caller,
    distribution_from_json,
    distribution_json,
    history,
    parse_assignments,
    plan,
    preview,
    redistribute,
)
from udb.cli.common import handle_errors, last_option, udb_option
from udb.cli.progress import status
from udb.errors import OptionError, UdbError
from udb.jsonout import echo_json
from udb.remote import Reader, call, reach, socket_option
from udb.session import open_udb, read_session, write_session

#: What the interactive editor calls to write: edited member -> shares, returns the
#: group re-read after the write and the warnings.
Apply = Callable[[dict[str, int]], tuple[GroupView, list[str]]]


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.2f}%"


def render_distribution(console: Console, d: Distribution, title: str) -> None:
    """The group's members with old and new shares, group share and machine share."""
    t = Table(
        title=f"{title} (machine share of {d.group}: {_pct(d.m_share)})", title_justify="left"
    )
    for col, justify in (
        ("Member", "left"),
        ("Kind", "left"),
        ("Old", "right"),
        ("Shares", "right"),
        ("Group share", "right"),
        ("Machine share", "right"),
    ):
        t.add_column(col, justify=justify)
    for m in d.members:
        mark = "*" if m.changed else ""
        t.add_row(
            m.name,
            m.kind,
            str(m.old),
            f"{m.shares}{mark}",
            _pct(m.group_share),
            _pct(m.m_share),
        )
    t.add_section()
    t.add_row("total", "", str(sum(m.old for m in d.members)), str(d.total), "100.00%", "")
    console.print(t)


# -- the interactive editor ---------------------------------------------------------------


class SharesInput(Input):
    """A shares field: takes digits only, so u and q reach the editor's bindings."""

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return character is not None and character.isdigit()


class ShrdistApp(App):
    """The full-screen editor: one line per member with its shares (editable) and the
    resulting group and machine shares, recomputed as you type; u writes, q quits."""

    CSS = """
    #members { grid-size: 5; grid-columns: 1fr 10 14 14 16; grid-rows: 3; height: auto; }
    #members Label { padding: 1 1; }
    .head { text-style: bold; }
    #status { height: 3; padding: 1 1; }
    """
    BINDINGS = [
        Binding("u", "update", "Update the UDB", priority=True),
        Binding("q", "quit", "Quit", priority=True),
    ]

    def __init__(self, view: GroupView, apply: Apply) -> None:
        super().__init__()
        self.view = view
        self.apply = apply
        self.updates = 0  # how many times u wrote something

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        with Vertical():
            with Grid(id="members"):
                for head in ("Member", "Kind", "Shares", "Group share", "Machine share"):
                    yield Label(head, classes="head")
                for i, name in enumerate(self.view.member_names()):
                    node = self.view.tree.node(name)
                    yield Label(name)
                    yield Label(self.view.tree.kind(node).label)
                    yield SharesInput(
                        str(int(self.view.tree.shares[node])),
                        restrict=r"[0-9]*",
                        max_length=10,
                        id=f"shares-{i}",
                    )
                    yield Label(id=f"group-{i}")
                    yield Label(id=f"machine-{i}")
            yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"shrdist {self.view.group}"
        self.recompute()

    def edited(self) -> dict[str, int] | None:
        """The members whose shares were edited (None if a field is not a number)."""
        out = {}
        for i, name in enumerate(self.view.member_names()):
            text = self.query_one(f"#shares-{i}", Input).value
            if not text.isdigit():
                return None
            value = int(text)
            if value != int(self.view.tree.shares[self.view.tree.node(name)]):
                out[name] = value
        return out

    def recompute(self) -> None:
        edited = self.edited()
        if edited is None:
            self.status("every member needs a whole number of shares")
            return
        d = plan(self.view, edited)
        for i, m in enumerate(d.members):
            self.query_one(f"#group-{i}", Label).update(_pct(m.group_share))
            self.query_one(f"#machine-{i}", Label).update(_pct(m.m_share))
        self.query_one("#title", Static).update(
            f"Resource group {d.group}: machine share {_pct(d.m_share)}, {d.total} shares "
            f"in all; {len(edited)} member(s) edited.  u: update, q: quit"
        )

    def status(self, text: str) -> None:
        self.query_one("#status", Static).update(text)

    def on_input_changed(self, _event: Input.Changed) -> None:
        self.recompute()

    def action_update(self) -> None:
        edited = self.edited()
        if edited is None:
            self.status("not written: every member needs a whole number of shares")
            return
        if not edited:
            self.status("nothing to update")
            return
        try:
            self.view, warnings = self.apply(edited)
        except UdbError as err:
            self.status(f"not written: {err}")
            return
        self.updates += 1
        for i, name in enumerate(self.view.member_names()):
            node = self.view.tree.node(name)
            self.query_one(f"#shares-{i}", Input).value = str(int(self.view.tree.shares[node]))
        self.recompute()
        self.status("; ".join([f"updated {len(edited)} member(s)", *warnings]))

    async def action_quit(self) -> None:
        self.exit(self.updates)


def make_app(reader: Reader, caller: Caller, group: str | None, auth) -> ShrdistApp:
    """The interactive editor on `group` of the UDB `reader` reads, for `caller`; its
    changes are written directly, or sent to the daemon when the reader goes through it."""
    with read_session(reader.engine) as s:
        view, _d, _w = preview(s, caller, group, {}, auth=auth)

    def apply(edited: dict[str, int]) -> tuple[GroupView, list[str]]:
        if reader.through_daemon:
            reply = call(reader.via.socket, "shrdist", group=view.group, shares=edited)
            warnings = reply["warnings"]
        else:
            with write_session(reader.engine) as s:
                _d, warnings = redistribute(
                    s, caller, view.group, edited, auth=auth, now=time.time()
                )
        with read_session(reader.refresh()) as s:
            fresh, _d, _w = preview(s, caller, view.group, {}, auth=auth)
        return fresh, warnings

    return ShrdistApp(view, apply)


# -- the command ---------------------------------------------------------------------------


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
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
            echo_json([_change_json(r) for r in rows], indent=True)
        else:
            for r in rows:
                when = datetime.fromtimestamp(r.time).strftime("%Y-%m-%d %H:%M:%S")
                click.echo(f"{when}  {r.who}  {r.grp}  {r.member}  {r.old} -> {r.new}")
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


def _change_json(r) -> dict:
    return {
        "time": r.time,
        "who": r.who,
        "group": r.grp,
        "member": r.member,
        "old": r.old,
        "new": r.new,
    }


if __name__ == "__main__":
    main()
