"""Where the installed one-shot displays start (pyproject.toml's scripts): udbsee here,
shrview, shrtree and shrinfo through fairshare.cli.start.

A display is one short process that reads the UDB, prints and exits.  Its script:

- turns the cyclic garbage collector off before it imports the command, and with it
  SQLAlchemy and numpy, whose imports the collector would otherwise scan again and
  again for nothing: 0.03 s of every start (0.28 instead of 0.31 s of CPU for
  shrview's imports on the development machine), and it stays off for what the
  display builds (udbsee -a of 100,000 entries: 2.8 -> 2.1 s).  shrview -c, which
  runs on, turns it back on.
- leaves without freeing what the display built (`leave`): a command that ends in
  sys.exit keeps its report alive in the exception's traceback, and the process ends
  there, as a forked child does, once its output is flushed, the atexit handlers have
  run and the UDB's connections are closed.  Freeing shrtree -l's 100,000 rows one by
  one took a tenth of its time.

Importing a command module (as the tests do) changes nothing.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def script(module: str) -> Callable[[], NoReturn]:
    """The entry point of the display whose click command is `module`'s main."""

    def start() -> NoReturn:
        gc.disable()
        main = importlib.import_module(module).main
        try:
            main()
        except SystemExit as stop:  # click's main always ends in one
            leave(stop.code)
        leave(0)

    start.module = module  # what it runs (the completion test follows it)
    return start


def leave(code: object) -> NoReturn:
    """End the process with SystemExit's `code` (None: 0; a number: it; anything else:
    printed on stderr, 1), as the interpreter would but without its teardown."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    from udb.session import dispose_all  # imported by every display by now

    dispose_all()  # a server's connections end with a goodbye, not a dropped socket
    atexit._run_exitfuncs()  # logging's flush and the like, which os._exit skips
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # `udbsee -a | head`; a closed stream
            pass
    os._exit(status)


udbsee = script("udb.cli.udbsee")
