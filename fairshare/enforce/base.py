"""What every enforcer backend takes and does: the protocol of fairshare.enforce.

The daemon hands an enforcer, once a cycle, one `LnodeTarget` per active
leaf lnode that has processes to place: the processes, the effective share
the cycle computed and whether the lnode is a background user.  Each backend
turns e_share into its own kernel knob through `fairshare.enforce.mapping`
(cgroup v2 weights, cgroup v1 shares, nice values) and applies it; the
arithmetic lives there, the file writes here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fairshare.actions import OsActions

log = logging.getLogger("shrdaemon")


@dataclass(frozen=True)
class LnodeTarget:
    """One lnode to enforce: `e_share` (fraction of the machine), `nrun` its
    runnable processes, `pids` the processes to place, `runnable` those of
    them that were runnable at the sample, `nice` the UDB's nice of its user or
    account (a floor for its processes' nice, fairshare.enforce.renice)."""

    name: str
    pids: tuple[int, ...]
    e_share: float
    nrun: int
    background: bool = False
    runnable: frozenset[int] = field(default_factory=frozenset)
    nice: int = 0


class Enforcer(Protocol):
    """A way of making the kernel deliver the cycle's effective shares."""

    #: "cgroup2", "cgroup1", "nice", "none" or "sim"
    name: str
    #: Where its changes go: the daemon's own OsActions (fairshare.actions), no other.
    actions: OsActions
    #: Whether the daemon applies the UDB's nice beside this enforcer (cgroup v1/v2 and
    #: the simulator's cgroup model); False for the nice enforcer, which folds it into
    #: its own values, and for none, which changes nothing.
    udb_nice: bool

    def setup(self) -> None:
        """Prepare the machine (create the fair-share cgroup root, ...)."""
        ...

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Place every target's processes and set its weight; lnodes absent
        from `targets` are released."""
        ...

    def teardown(self) -> None:
        """Undo everything: processes back where they came from, nice values
        restored, our cgroups removed."""
        ...


def arrays(targets: Sequence[LnodeTarget]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """e_share (float), nrun (int) and background (bool) of `targets` as arrays."""
    e = np.array([t.e_share for t in targets], dtype=float)
    n = np.array([t.nrun for t in targets], dtype=np.int64)
    b = np.array([t.background for t in targets], dtype=bool)
    return e, n, b


_UNSAFE = re.compile(r"[^A-Za-z0-9_.@-]")


def safe_name(lnode: str) -> str:
    """`lnode` as a file name: characters other than letters, digits and _.@- become _."""
    name = _UNSAFE.sub("_", lnode)
    return name if name not in ("", ".", "..") else f"_{name}"
