"""Where the installed display commands start (pyproject.toml's scripts).

A display (shrview, shrtree, shrinfo) is one short process that reads the UDB, prints
and exits.  Before its script imports the command, and with it SQLAlchemy and numpy:

- it turns the cyclic garbage collector off, which would otherwise scan those imports
  again and again for nothing: 0.03 s of every start (0.28 instead of 0.31 s of CPU for
  shrview's imports on the development machine).  The command keeps it off for what
  it builds (up to 100,000 rows' objects); shrview -c, which runs on, turns it back on;
- it keeps numpy's OpenBLAS to one thread (unless the environment says otherwise): a
  display multiplies no matrices, and the thread pool numpy's import starts cost 0.05
  to 0.1 s of CPU on the other cores.

Importing a command module (as the tests do) changes neither.
"""

from __future__ import annotations

import gc
import importlib
import os


def _run(command: str) -> object:
    gc.disable()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    return importlib.import_module(f"fairshare.cli.{command}").main()


def shrview() -> object:
    return _run("shrview")


def shrtree() -> object:
    return _run("shrtree")


def shrinfo() -> object:
    return _run("shrinfo")
