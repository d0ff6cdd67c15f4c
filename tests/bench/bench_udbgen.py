"""Bulk load speed of udbgen: 100,000 users from one directive file.

Goal (issue 3): under 15 s on a 2-core machine, and within 3x of a bare
executemany insert of the same rows into the same schema.  Prints the median of
3 runs of each, the ratio, and the command line's own time; exits 1 if a goal
is missed.

    python tests/bench/bench_udbgen.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

from udb import directives
from udb.models import Entry
from udb.session import dispose_all, open_udb

RUNS = 3
HEAD = (
    "acid:proj:5000:\n"
    "create:Users:uid:60000:gids:100:passwd:*:shflags:040000:shares:100:resgrp:0:\n"
)


def user_line(i: int) -> str:
    return (
        f"create:user{i:06d}:uid:{100000 + i}:gids:100:acids:proj:resgrp:Users:"
        f"shares:100:passwd:*:comment:Bulk user {i}:\n"
    )


def user_row(i: int) -> dict:
    """The row the directive above creates (the bare insert's input)."""
    return {
        "name": f"user{i:06d}",
        "uid": 100000 + i,
        "gids": [100],
        "acids": [5000],
        "resgrp": 60000,
        "shares": 100,
        "shflags": 0,
        "shusage": 0.0,
        "shcharge": 0.0,
        "shextime": 0.0,
        "cpuquota": 0.0,
        "cpuquotaused": 0.0,
        "nice": 0,
        "passwd": "*",
        "comment": f"Bulk user {i}",
    }


def time_udbgen(path: Path, url: str) -> float:
    """Seconds to read, parse, check and write the file in one transaction."""
    engine = open_udb(url, create=True)
    t = time.perf_counter()
    directives.run(engine, directives.parse(path.read_text(), str(path)))
    return time.perf_counter() - t


def time_bare(rows: list[dict], url: str) -> float:
    """Seconds for one executemany insert of `rows` in one transaction."""
    engine = open_udb(url, create=True)
    t = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(insert(Entry.__table__), rows)
    return time.perf_counter() - t


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-udbgen-") as tmp:
        return bench(Path(tmp), int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)


def bench(work: Path, n: int) -> int:
    """Run the benchmark with `n` users in directory `work`; 0 if the goals are met."""
    path = work / "users.udb"
    path.write_text(HEAD + "".join(user_line(i) for i in range(n)))
    rows = [user_row(i) for i in range(n)]

    load, bare = [], []
    for run in range(RUNS):
        load.append(time_udbgen(path, f"sqlite:///{work}/load{run}.sqlite"))
        bare.append(time_bare(rows, f"sqlite:///{work}/bare{run}.sqlite"))
        dispose_all()
    t = time.perf_counter()
    cli = subprocess.run(
        [sys.executable, "-m", "udb.cli.udbgen", "--udb", str(work / "cli.sqlite"), str(path)],
        capture_output=True,
        text=True,
    )
    cli_time = time.perf_counter() - t
    if cli.returncode:
        print(cli.stderr, file=sys.stderr)
        return 1

    m_load, m_bare = statistics.median(load), statistics.median(bare)
    ratio = m_load / m_bare
    print(f"users:                        {n}  ({path.stat().st_size / 1e6:.1f} MB of directives)")
    print(f"udbgen load (median of {RUNS}):   {m_load:6.2f} s   runs {_fmt(load)}")
    print(f"bare executemany (median {RUNS}): {m_bare:6.2f} s   runs {_fmt(bare)}")
    print(f"ratio load / bare:            {ratio:6.2f}    (goal <= 3)")
    print(f"udbgen command, end to end:   {cli_time:6.2f} s   (goal < 15 s, one run)")
    ok = ratio <= 3 and cli_time < 15 and m_load < 15
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def _fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


if __name__ == "__main__":
    sys.exit(main())
