"""shrdaemon --show: one host's published lnode table (fairshare.store.published), as a rich
table indented by tree depth or as the JSON document of shrdaemon(8).

Rows are the store's published rows (anything with the published columns as
attributes); nothing here reads the UDB.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rich.console import Console
from rich.table import Table

#: The published cycle's header fields in the JSON document, in its order.
CYCLE_FIELDS = (
    "host",
    "time",
    "delta",
    "enforcer",
    "pid",
    "cycle",
    "mode",
    "started",
    "running",
    "stopped",
)
#: Each lnode's fields in the JSON document after "node", in its order.
LNODE_FIELDS = (
    "name",
    "uid",
    "kind",
    "parent",
    "shares",
    "refs",
    "nrun",
    "usage",
    "charge",
    "rate",
    "m_share",
    "e_share",
    "cpu",
    "priority",
    "background",
    "want",
    "target",
    "got",
    "got_minute",
)
_HEADINGS = (
    "lnode",
    "kind",
    "shares",
    "refs",
    "nrun",
    "usage",
    "m_share %",
    "e_share %",
    "got %",
    "minute %",
    "fair %",
)


def _pct(value) -> str:
    """A fraction as a percentage, "-" when not published (an older daemon's table)."""
    return "-" if value is None or value != value else f"{100 * value:.2f}"


def published_json(head, rows: Sequence) -> dict:
    """The --show --json document: {"cycle": header, "lnodes": [...]} (shrdaemon(8))."""
    return {
        "cycle": {k: getattr(head, k) for k in CYCLE_FIELDS},
        "lnodes": [{"node": r.node, **{k: getattr(r, k) for k in LNODE_FIELDS}} for r in rows],
    }


def depth_first(rows: Sequence) -> Iterator[tuple[object, int]]:
    """(row, depth) from the top lnodes (parent -1) down, siblings by name, as shrtree
    shows the tree; depth 0 is a top lnode."""
    kids: dict[int, list] = {}
    for r in rows:
        kids.setdefault(r.parent, []).append(r)
    stack = [(r, 0) for r in sorted(kids.get(-1, []), key=lambda r: r.name, reverse=True)]
    while stack:
        r, depth = stack.pop()
        yield r, depth
        children = sorted(kids.get(r.node, []), key=lambda c: c.name, reverse=True)
        stack.extend((c, depth + 1) for c in children)


def render_published(console: Console, head, rows: Sequence) -> None:
    """The published lnodes as one table, each name indented two spaces per level;
    shares, usage, m_share and e_share (in parentheses when it wants no CPU: what it
    would get if it alone started), what it got over the last cycle and minute and its
    fair target, as % of the machine (fairshare.core.delivery)."""
    t = Table(
        title=f"lnodes of {head.host}, cycle {head.cycle} ({head.enforcer}, "
        f"{'running' if head.running else 'stopped'})"
    )
    for col in _HEADINGS:
        t.add_column(col, justify="left" if col in ("lnode", "kind") else "right")
    for r, depth in depth_first(rows):
        t.add_row(
            "  " * depth + r.name,
            r.kind,
            f"{r.shares:g}",
            str(r.refs),
            str(r.nrun),
            f"{r.usage:.3g}",
            f"{100 * r.m_share:.2f}",
            f"{100 * r.e_share:.2f}" if r.demand else f"({100 * r.e_share:.2f})",
            _pct(r.got),
            _pct(r.got_minute),
            _pct(r.target),
        )
    console.print(t)
