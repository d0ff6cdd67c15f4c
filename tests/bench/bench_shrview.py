"""shrview on a big published table: 100 groups of 1,000 active users (100,101 lnodes).

Times, as medians of 5 runs, each step of one display: deriving the columns
(view_columns), ordering and selecting (select_rows), and the whole -dm and -da
displays as plain lines and as JSON, from the published columns already read.  Prints
the medians and the time per lnode.  Run: python tests/bench/bench_shrview.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from fairshare.core.consts import Consts
from fairshare.display.shrview import display_json, display_lines
from fairshare.report.lnodes import ViewRequest, select_rows, view_columns
from fairshare.report.published import Snapshot
from udb.columnar import row_columns
from udb.jsonout import dumps
from udb.models import PublishedLnode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tree import median_time  # noqa: E402

GROUPS, USERS = 100, 1000


def rows() -> list[PublishedLnode]:
    """A breadth-first numbered table: root, the groups, then their users, one user in
    ten wanting no CPU (its Eshr% in parentheses)."""
    n_users = GROUPS * USERS
    out = [_row(0, "root", -1, 0, "root", 1.0, 1.0, n_users * 5.0)]
    for g in range(GROUPS):
        out.append(_row(1 + g, f"g{g:03d}", 0, 1, "group", 1 / GROUPS, 1 / GROUPS, USERS * 5.0))
    first = 1 + GROUPS
    for g in range(GROUPS):
        for u in range(USERS):
            node = first + g * USERS + u
            m = 1 / n_users
            user = _row(node, f"u{g:03d}{u:04d}", 1 + g, 2, "user", m, m, 1.0 + u % 7)
            user.demand = u % 10 != 0
            out.append(user)
    return out


def _row(node, name, parent, level, kind, m, e, usage) -> PublishedLnode:
    return PublishedLnode(
        host="bench",
        node=node,
        name=name,
        uid=10000 + node,
        kind=kind,
        parent=parent,
        level=level,
        shares=1.0,
        refs=1,
        nrun=1,
        usage=usage,
        charge=usage,
        cpu_seconds=0.0,
        rate=usage / 10,
        m_share=m,
        e_share=e,
        cpu=m,
        adj=1.0,
        priority=usage / (m * m),
        background=False,
        demand=True,
        due=m,
        pri=m,
        want=1.0,
        target=m,
        got=m,
        got_minute=m,
        flat=m,
    )


def main() -> None:
    table = rows()
    published = row_columns(table, [c.name for c in PublishedLnode.__table__.columns][1:])
    snap = Snapshot(
        host="bench",
        cycle=1,
        time=0.0,
        delta=4.0,
        age=0.0,
        running=True,
        stopped=None,
        started=0.0,
        enforcer="none",
        mode="user",
        counts=None,
        consts=Consts(),
        lnodes=published,
    )
    n = len(table)
    cols = view_columns(published, frozenset())
    steps = {
        "view_columns (derive columns)": lambda: view_columns(published, frozenset()),
        "select_rows (tree order)": lambda: select_rows(cols, "all", "tree"),
        "select_rows (-o usage)": lambda: select_rows(cols, "all", "usage"),
        "-dm lines": lambda: display_lines(snap, ViewRequest("monitor"), str),
        "-da lines": lambda: display_lines(snap, ViewRequest("adjgroup"), str),
        "-dm JSON": lambda: dumps(display_json(snap, ViewRequest("monitor"))),
    }
    print(f"{n} lnodes ({GROUPS} groups x {USERS} users), median of 5 runs")
    for label, fn in steps.items():
        t = median_time(fn, 5)
        print(f"  {label:30s} {t:7.3f} s  {1e6 * t / n:6.2f} us/lnode")


if __name__ == "__main__":
    main()
