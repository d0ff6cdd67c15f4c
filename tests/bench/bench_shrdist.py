"""Benchmark: shrdist on a large site (the bench_tree site: 100,000 users in 2,000 groups).

Run as ``python tests/bench/bench_shrdist.py [--users N] [--groups N] [--repeat N]``.
Prints medians and their ratio to the goals:

- the editor's recomputation after a keystroke (`fairshare.admin.shrdist.plan` on a loaded group):
  < 0.05 s, so typing feels immediate;
- ``shrdist -g GROUP -b A=..,B=..`` end to end as a process (start, UDB read, tree,
  authorisation, the write transaction, the display): < 3 s;
- the write transaction alone (`redistribute`: tree re-read, locks, updates, log): < 1 s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tree import median_time, site_rows  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from fairshare.admin.shrdist import Caller, plan, preview, redistribute  # noqa: E402
from fairshare.core.consts import Consts  # noqa: E402
from fairshare.store.config import (
    load_tree,  # noqa: E402
    save_consts,  # noqa: E402
)
from udb.models import Entry  # noqa: E402
from udb.session import dispose_all, open_udb, read_session, write_session  # noqa: E402

KEYSTROKE_GOAL = 0.05  # s
COMMAND_GOAL = 3.0  # s
TRANSACTION_GOAL = 1.0  # s
ROOT = Caller("root", 0, "root")
NO_AUTH = Path("/nonexistent/shrdist.auth")


def line(label: str, seconds: float, goal: float) -> None:
    print(f"{label:<44} median {seconds:.4f} s  goal {goal} s  ratio {seconds / goal:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "udb.sqlite"
        engine = open_udb(str(path), create=True)
        with write_session(engine) as s:
            s.execute(insert(Entry), site_rows(args.users, args.groups))
            save_consts(s, Consts(maxlevels=5))
        with read_session(engine) as s:
            tree = load_tree(s)
        # The leaf group with the most members (about users / leaf groups of them).
        parents = tree.parent[tree.leaf_mask]
        group_node = int(max(set(parents.tolist()), key=parents.tolist().count))
        group = tree.names[group_node]
        with read_session(engine) as s:
            view, _d, _w = preview(s, ROOT, group, {}, auth=NO_AUTH)
        a, b = view.member_names()[:2]
        print(
            f"site: {tree.size} nodes, {int(tree.leaf_mask.sum())} leaves; "
            f"group {group}: {len(view.members)} members"
        )

        counter = iter(range(1, 10**9))
        t_key = median_time(lambda: plan(view, {a: next(counter)}), max(args.repeat, 20))
        line("editor keystroke (plan over the whole tree)", t_key, KEYSTROKE_GOAL)

        def transaction():
            k = next(counter)
            with write_session(engine) as s:
                redistribute(s, ROOT, group, {a: k, b: k + 1}, auth=NO_AUTH, now=time.time())

        t_tx = median_time(transaction, args.repeat)
        line("redistribute (one write transaction)", t_tx, TRANSACTION_GOAL)
        dispose_all()

        def command():
            k = next(counter)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "fairshare.cli.shrdist",
                    "--udb",
                    str(path),
                    "--auth",
                    str(NO_AUTH),
                    "-g",
                    group,
                    "-b",
                    f"{a}={k},{b}={k + 1}",
                    "--json",
                ],
                check=True,
                capture_output=True,
            )

        t_cmd = median_time(command, args.repeat)
        line("shrdist -b as a process (end to end)", t_cmd, COMMAND_GOAL)


if __name__ == "__main__":
    main()
