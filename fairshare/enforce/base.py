"""What every enforcer backend takes and does: the protocol of fairshare.enforce.

The daemon hands an enforcer, once a cycle, one `LnodeTarget` per active
leaf lnode that has processes to place: the processes, the effective share
the cycle computed, whether the lnode is a background user, and the groups above
it (`GroupShare`: name, e_share, background; top first), which the cgroup
enforcers mirror as nested cgroups, and its flat share, which the flat ones (nice,
systemd) weigh it by instead: the cycle works it out so that the CPU an lnode leaves
goes to its own group first there too (fairshare.core.delivery).  Each backend
turns e_share into its own kernel knob through `fairshare.enforce.mapping`
(cgroup v2 weights, cgroup v1 shares, nice values) and applies it; the
arithmetic lives there, the file writes here.

An enforcer says what else it does through its `Capabilities`, never through its
name: the daemon reads them to decide whether it applies the UDB's nice beside the
enforcer, how it charges nice values, whether new processes can be placed between
cycles (`place`) and whether the lnode cgroups' CPU counters can be read
(`read_groups`, handed to the procfs collector).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fairshare.enforce.actions import OsActions

log = logging.getLogger("shrdaemon")


@dataclass(frozen=True)
class Capabilities:
    """What an enforcer does beyond setup, apply and teardown.

    - `udb_nice`: the daemon applies the UDB's nice of each lnode to its processes
      beside this enforcer (fairshare.enforce.renice.Renicer: cgroup v1/v2, systemd,
      the simulator's cgroup model); False where the enforcer folds it into its own
      nice values (nice), or changes nothing (none);
    - `sets_nice`: the enforcer sets the processes' nice values itself, so a nice
      value is its doing, not the user's: every process is charged, at nice 0's rate
      (fairshare.daemon.charges);
    - `nice_local`: a process's nice weighs it only against the processes of its own
      lnode (the cgroup enforcers: each lnode cgroup competes at its weight whatever
      the nice values inside), so nice 19 is not background work: every process is
      charged at nice 0's rate too;
    - `places`: it has `place(pid, lnode)`, which puts a process that has just become
      the lnode's in its place at once (fairshare.enforce.events);
    - `counts`: it has `read_groups(members=True)`, the CPU counters of its lnode
      cgroups (fairshare.collect.procfs.ProcfsCollector's `groups`).
    """

    udb_nice: bool = False
    sets_nice: bool = False
    nice_local: bool = False
    places: bool = False
    counts: bool = False


@dataclass(frozen=True)
class GroupShare:
    """A group above a target lnode: its name, e_share (its subtree's, a fraction of
    the machine) and background flag, as the lnode table holds them, and `nested` its
    weight among its siblings in nested cgroups (fairshare.core.delivery: its e_share
    trimmed toward what it is owed; None: e_share)."""

    name: str
    e_share: float
    background: bool = False
    nested: float | None = None

    @property
    def weight(self) -> float:
        """Its weight among its siblings in nested cgroups."""
        return self.e_share if self.nested is None else self.nested


@dataclass(frozen=True)
class LnodeTarget:
    """One lnode to enforce: `e_share` (fraction of the machine), `nrun` its
    runnable processes, `pids` the processes to place, `runnable` those of
    them that were runnable at the sample, `nice` the UDB's nice of its user or
    account (a floor for its processes' nice, fairshare.enforce.renice), `starts`
    the start times of `pids` in order (ProcessSample.create_time; empty: not known),
    which tell a pid given since the sample to another process (fairshare.enforce.actions),
    `groups` the groups above it, top first, the root left out (empty: flat), and `flat`
    the share a flat enforcer weighs it by, so that side by side with the others it
    gets what nested cgroups would give it, and `nested` its weight among its siblings
    in nested cgroups (both fairshare.core.delivery; None: e_share); `light` whether
    it wants no more than its fair target (an interactive user, or one asleep), whose
    processes the nice enforcer leaves the short time slice that lets them preempt;
    `want` the CPUs it would use (fairshare.core.delivery): its runnable threads on
    average, where a process of many threads counts each (a nice value is a thread's)."""

    name: str
    pids: tuple[int, ...]
    e_share: float
    nrun: int
    background: bool = False
    runnable: frozenset[int] = field(default_factory=frozenset)
    nice: int = 0
    starts: tuple[float, ...] = ()
    groups: tuple[GroupShare, ...] = ()
    flat: float | None = None
    nested: float | None = None
    light: bool = False
    want: float = 0.0

    @property
    def weight(self) -> float:
        """Its weight among its siblings in nested cgroups."""
        return self.e_share if self.nested is None else self.nested

    def processes(self) -> zip:
        """(pid, start time or None) of every process of `pids`."""
        return zip(self.pids, self.starts or (None,) * len(self.pids), strict=True)


class Enforcer(Protocol):
    """A way of making the kernel deliver the cycle's effective shares."""

    #: "cgroup2", "cgroup1", "systemd", "nice", "none" or "sim": published and logged
    name: str
    #: Where its changes go: the daemon's own OsActions (fairshare.enforce.actions), no other.
    actions: OsActions
    #: What it does beyond the three methods below.
    capabilities: Capabilities

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


def arrays(
    targets: Sequence[LnodeTarget], threads: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a flat enforcer (nice, systemd) weighs `targets` by, as arrays: the flat
    share (float: `LnodeTarget.flat`, else e_share), nrun (int; `threads`: the larger of
    nrun and its want rounded, for weights given thread by thread) and background (bool)."""
    e = np.array([t.e_share if t.flat is None else t.flat for t in targets], dtype=float)
    n = np.array([max(t.nrun, round(t.want)) if threads else t.nrun for t in targets])
    b = np.array([t.background for t in targets], dtype=bool)
    return e, n, b


#: Characters a cgroup name keeps as they are (and "_", unless it would read as an escape).
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.@-")
_HEX = frozenset("0123456789abcdef")


def safe_name(lnode: str) -> str:
    """`lnode` as one file name (its cgroup's, its counters' key), a different one for
    every different name: letters, digits and .@- stay as they are; every other
    character is ``_xx`` for each byte of its UTF-8 (lower-case hex: "$" is ``_24``,
    "+" ``_2b``); "_" stays "_" unless two lower-case hex digits follow it, when it
    is ``_5f``.  So ``_`` and two lower-case hex digits is always an escape and nothing
    else is, and the name can be read back.  A name that needs none of this keeps its
    own name (``a_b`` too); "." and ".." are ``_2e`` and ``_2e_2e``.  Never holds "/",
    NUL or "+" (mapping.GROUP_PREFIX).  ValueError for the empty name."""
    if not lnode:
        raise ValueError("an lnode's name is never empty")
    if lnode in (".", ".."):
        return "_2e" * len(lnode)
    out = []
    for i, c in enumerate(lnode):
        if c in _PLAIN:
            out.append(c)
        elif c == "_" and not (lnode[i + 1 : i + 2] in _HEX and lnode[i + 2 : i + 3] in _HEX):
            out.append(c)
        else:
            out.extend(f"_{b:02x}" for b in c.encode("utf-8", "surrogatepass"))
    return "".join(out)
