"""Where the installed one-shot displays start (pyproject.toml's scripts): udbsee here,
shrview, shrtree and shrinfo through fairshare.cli.start.

A display is one short process that reads the UDB, prints and exits.  Its script turns
the cyclic garbage collector off before it imports the command, and with it SQLAlchemy
and numpy, whose imports the collector would otherwise scan again and again for
nothing: 0.03 s of every start (0.28 instead of 0.31 s of CPU for shrview's imports on
the development machine), and it stays off for what the display builds (udbsee -a of
100,000 entries: 2.8 -> 2.1 s).  shrview -c, which runs on, turns it back on.
Importing a command module (as the tests do) changes nothing.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable


def script(module: str) -> Callable[[], object]:
    """The entry point of the display whose click command is `module`'s main."""

    def start() -> object:
        gc.disable()
        return importlib.import_module(module).main()

    start.module = module  # what it runs (the completion test follows it)
    return start


udbsee = script("udb.cli.udbsee")
