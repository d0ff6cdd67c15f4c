"""What the continuous monitors (`fairshare.tui.monitor`) show: shrview's displays of the
published lnode table, and shrtree's share tree.

Each view renders with the same display code as the line modes (fairshare.display) and
turns the monitor's keys into the same requests the options make (-d, -o, -s; -l, -e,
--node), so a frame is exactly what the line mode would print.
"""

from __future__ import annotations

from collections.abc import Callable

from fairshare.display.shrtree import display_lines as tree_display_lines
from fairshare.display.shrtree import header_lines, problem_lines
from fairshare.display.shrview import (
    DISPLAYS,
    SORTS,
    check_select,
    display_lines,
    local_time,
    parse_select,
    stale_message,
)
from fairshare.report.lnodes import ViewRequest
from fairshare.report.published import Snapshot, Source, tree_leaves
from fairshare.report.sharetree import TreeReport
from fairshare.tui.monitor import ViewKey
from udb.errors import UdbError

#: shrview's -o keys in the order o steps through them.
SORT_ORDER = tuple(dict.fromkeys(SORTS.values()))


class ShrviewView:
    """shrview's displays: m a s n l g switch the display, o the sort order, / selects."""

    keys = (
        *(ViewKey(letter, f"the {name} display (-d{letter})") for letter, name in DISPLAYS.items()),
        ViewKey("o", f"next sort order ({', '.join(SORT_ORDER)})"),
    )
    prompt = "all, groups, users, or an lnode's NAME (its subtree); Esc cancels"

    def __init__(self, source: Source, req: ViewRequest) -> None:
        self.source = source
        self.req = req
        self.snap: Snapshot | None = None

    def frame(self, width: int, height: int) -> list[str]:
        """The display of the table published now (the stale line first when no daemon
        runs), as shrview prints it."""
        snap = self.snap = self.source.take()
        if self.req.display == "statistics" and not self.req.total_ids:
            self.req.total_ids = tree_leaves(self.source.engine, snap.mode)
        check_select(snap, self.req)
        lines = display_lines(snap, self.req, local_time)
        if not snap.running:
            lines.insert(0, stale_message(snap, local_time))
        return lines

    def status(self) -> str:
        letter = next(k for k, v in DISPLAYS.items() if v == self.req.display)
        return (
            f"shrview -d{letter} ({self.req.display})  sort {self.req.sort}  "
            f"select {self.req.select}"
        )

    def press(self, key: str) -> bool:
        if key in DISPLAYS:
            self.req.display = DISPLAYS[key]
            return True
        if key == "o":
            at = SORT_ORDER.index(self.req.sort)
            self.req.sort = SORT_ORDER[(at + 1) % len(SORT_ORDER)]
            return True
        return False

    def select(self, text: str) -> None:
        """-s from the prompt ("" is all); NotFound, and nothing changes, when it names no
        published lnode."""
        old, self.req.select = self.req.select, parse_select(text or "all")
        if self.snap is not None:
            try:
                check_select(self.snap, self.req)
            except UdbError:
                self.req.select = old
                raise


class ShrtreeView:
    """shrtree's share tree: l shows users (-l), e only the problems (-e), / a subtree."""

    keys = (
        ViewKey("l", "groups only, or groups and users (-l)"),
        ViewKey("e", "the tree, or only its problems (-e)"),
    )
    prompt = "a group's NAME (its subtree), or all; Esc cancels"

    def __init__(
        self,
        load: Callable[[str | None], TreeReport],
        long: bool = False,
        errors: bool = False,
        node: str | None = None,
    ) -> None:
        self.load = load
        self.long = long
        self.errors = errors
        self.node = node

    def frame(self, width: int, height: int) -> list[str]:
        """The share tree display as the UDB holds it now (or its -e listing)."""
        report = self.load(self.node)
        if self.errors:
            return header_lines(report, self.long) + [line for line, _ in problem_lines(report)]
        return tree_display_lines(report, self.long)

    def status(self) -> str:
        flags = "".join(f for f, on in ((" -l", self.long), (" -e", self.errors)) if on)
        return f"shrtree{flags}  node {self.node or 'ALL'}"

    def press(self, key: str) -> bool:
        if key == "l":
            self.long = not self.long
            return True
        if key == "e":
            self.errors = not self.errors
            return True
        return False

    def select(self, text: str) -> None:
        """--node from the prompt ("" or all: the whole tree); NotFound when no node has
        that name."""
        node = None if text.lower() in ("", "all") else text
        self.load(node)  # NotFound before anything changes
        self.node = node
