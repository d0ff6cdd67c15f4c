"""shrdist's interactive editor: a full-screen Textual application on one resource group.

One line per member with its shares (editable) and the resulting group and machine
shares, recomputed as you type through fairshare.admin.shrdist.plan; u writes (directly, or
through the daemon's socket when the caller reads the UDB through it), q quits.  The
command (fairshare.cli.shrdist) only builds it with `make_app` and runs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.widgets import Footer, Input, Label, Static

from fairshare.admin.shrdist import Caller, GroupView, plan, preview, redistribute
from fairshare.display import percent
from udb.errors import UdbError
from udb.remote import Reader, call
from udb.session import read_session, write_session

#: What the interactive editor calls to write: edited member -> shares, returns the
#: group re-read after the write and the warnings.
Apply = Callable[[dict[str, int]], tuple[GroupView, list[str]]]


class SharesInput(Input):
    """A shares field: takes digits only, so u and q reach the editor's bindings."""

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return character is not None and character.isascii() and character.isdigit()


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
            if not (text.isascii() and text.isdigit()) or len(text) > 10:
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
            self.query_one(f"#group-{i}", Label).update(percent(m.group_share, 2))
            self.query_one(f"#machine-{i}", Label).update(percent(m.m_share, 2))
        self.query_one("#title", Static).update(
            f"Resource group {d.group}: machine share {percent(d.m_share, 2)}, {d.total} shares "
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
