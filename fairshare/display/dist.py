"""shrdist's displays: a redistribution as a table (old and new shares, group share,
machine share), the change log as lines, and the change log's --json records."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from rich.console import Console
from rich.table import Table

from fairshare.core.dist import Distribution
from fairshare.display import percent


class ShareChange(Protocol):
    """One logged change of a member's shares (udb.models.ShareChange)."""

    time: float
    who: str
    grp: str
    member: str
    old: int
    new: int


def render_distribution(console: Console, d: Distribution, title: str) -> None:
    """The group's members with old and new shares, group share and machine share."""
    t = Table(
        title=f"{title} (machine share of {d.group}: {percent(d.m_share, 2)})",
        title_justify="left",
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
            percent(m.group_share, 2),
            percent(m.m_share, 2),
        )
    t.add_section()
    t.add_row("total", "", str(sum(m.old for m in d.members)), str(d.total), "100.00%", "")
    console.print(t)


def change_lines(changes: Sequence[ShareChange]) -> list[str]:
    """The change log (--history) as lines: local time, who, group, member, old -> new."""
    return [
        f"{datetime.fromtimestamp(r.time).strftime('%Y-%m-%d %H:%M:%S')}  "
        f"{r.who}  {r.grp}  {r.member}  {r.old} -> {r.new}"
        for r in changes
    ]


#: (JSON key, ShareChange attribute) of a change log record, in the document's order.
_CHANGE_FIELDS = (
    ("time", "time"),
    ("who", "who"),
    ("group", "grp"),
    ("member", "member"),
    ("old", "old"),
    ("new", "new"),
)


def change_json(changes: Sequence[ShareChange]) -> list[dict]:
    """The change log as --json records (shape documented in man/shrdist.8)."""
    return [{key: getattr(r, attr) for key, attr in _CHANGE_FIELDS} for r in changes]
