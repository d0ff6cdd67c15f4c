"""Where the installed display commands start (pyproject.toml's scripts).

A display (shrview, shrtree, shrinfo) is one short process that reads the UDB, prints
and exits.  Its script turns the cyclic garbage collector off before it imports the
command, and with it SQLAlchemy and numpy, whose imports the collector would otherwise
scan again and again for nothing: 0.03 s of every start (0.28 instead of 0.31 s of
CPU for shrview's imports on the development machine).  The command itself keeps it off
for what it builds (up to 100,000 rows' objects); shrview -c, which runs on, turns it
back on.  Importing a command module (as the tests do) changes nothing.
"""

from __future__ import annotations

import gc
import importlib


def _run(command: str) -> object:
    gc.disable()
    return importlib.import_module(f"fairshare.cli.{command}").main()


def shrview() -> object:
    return _run("shrview")


def shrtree() -> object:
    return _run("shrtree")


def shrinfo() -> object:
    return _run("shrinfo")
