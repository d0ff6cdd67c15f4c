"""The user database (UDB): entries, the account registry, udbgen and udbsee."""

import os

#: The suite's version (pyproject.toml reads it from here; every command's --version).
__version__ = "0.1.0"

# Every command of the suite imports numpy (through udb, or fairshare, which imports udb
# first), and none multiplies matrices large enough to want threads: without this,
# numpy's import starts an OpenBLAS thread per core, 0.1 s of CPU at every command's
# start on a 2-CPU machine.  Before numpy is imported; a value in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
