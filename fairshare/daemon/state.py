"""The daemon's lnode state: the share tree, the lnode table over it, and what it knows
per leaf, with the steps that create and release lnodes (pure: no UDB, no clock).

`Lnodes` is what the daemon (fairshare.daemon.daemon), shrsync's requests (fairshare.daemon.sync)
and the simulator work on.  Its steps, in the order of a cycle:

- `arriving`: the leaves that got processes (or idle time) and have no lnode yet;
  `activate_leaves` creates their lnodes with the stored usage aged since shextime
  (fairshare.core.steps.activate_stored) from the entries the store read;
- `leave`: at a write-back, what every active leaf accrued (`accrued`) and the
  release of those whose processes have all gone (`release`), as (uid, WriteBack)
  pairs for the store; the CPU seconds written move into the entry's cpuquotaused;
- `refresh_entries`: the active leaves' entries read again through the store
  (a reload, shrsync -q);
- `carry_over`: a rebuilt tree takes the active lnodes over by name, groups included.

Everything is in place on the `Lnodes` given, except what the store must write,
which is returned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption
from fairshare.core.lnode import (
    LnodeTable,
    WriteBack,
    accrued,
    activate,
    copy_row,
    new_table,
    release,
)
from fairshare.core.steps import activate_stored
from fairshare.core.tree import UNKNOWN_NAMES, Kind, ShareTree
from fairshare.enforce.base import safe_name
from udb.rules import IDLE_UID

if TYPE_CHECKING:
    from fairshare.store.published import EntryState


class EntryReader(Protocol):
    """Where the entries behind lnodes are read (fairshare.store.published.LnodeStore)."""

    def entry_states(self, uids: Iterable[int]) -> dict[int, EntryState]:
        """The entry state of each uid (acid) that has an entry."""
        ...


@dataclass
class Lnodes:
    """The tree and the lnode table over it, plus what the daemon knows per leaf."""

    tree: ShareTree
    table: LnodeTable
    fingerprint: tuple
    acids: dict[int, list[int]]  # user uid -> acids (Share by Account)
    unknown: int | None  # the unknown leaf's node
    idle: int | None  # the Idle leaf's node
    leaf_of_id: dict[int, int] = field(default_factory=dict)  # uid (acid) -> its leaf node
    leaf_of_group: dict[str, int] = field(default_factory=dict)  # lnode cgroup -> leaf node
    entry: dict[int, EntryState] = field(default_factory=dict)  # active leaf -> its entry
    warned: set[int] = field(default_factory=set)  # leaves sent SIGXCPU this activation

    def active_leaves(self) -> list[int]:
        """The nodes of the leaves that have an lnode now."""
        return np.flatnonzero(self.table.active & self.tree.leaf_mask).tolist()


def lnodes_for(tree: ShareTree, acids: dict[int, list[int]], fingerprint: tuple) -> Lnodes:
    """`tree` with an empty lnode table, its unknown and Idle leaves and the uid and
    cgroup-name maps of its leaves."""
    unknown = next((n for name in UNKNOWN_NAMES if (n := tree.find(name)) is not None), None)
    idle = tree.find_id(IDLE_UID)
    if idle is not None and tree.kind(idle) != Kind.IDLE:
        idle = None
    leaves = np.flatnonzero(tree.leaf_mask).tolist()
    leaf_of_id = dict(zip(tree.ids[leaves].tolist(), leaves, strict=True))
    leaf_of_group = {safe_name(tree.names[n]): n for n in leaves}
    return Lnodes(
        tree, new_table(tree), fingerprint, acids, unknown, idle, leaf_of_id, leaf_of_group
    )


def same_tree(a: ShareTree, b: ShareTree) -> bool:
    """True when `a` and `b` have the same nodes, parents, shares and kinds."""
    return (
        a.mode == b.mode
        and a.names == b.names
        and np.array_equal(a.ids, b.ids)
        and np.array_equal(a.parent, b.parent)
        and np.array_equal(a.shares, b.shares)
        and np.array_equal(a.kinds, b.kinds)
    )


def carry_over(old: Lnodes, new: Lnodes, now: float) -> list[tuple[int, WriteBack]]:
    """Copy every active leaf lnode of `old` into `new` by name (in place), and the rows
    of the groups still active above them (a policy's state on groups, such as the
    feedback policy's group usage and corrections, survives a reload).

    Returns the write-backs (released at `now`, epoch s) of active leaves that the
    new tree no longer has.
    """
    gone = []
    for n in np.flatnonzero(old.table.active & old.tree.leaf_mask):
        name = old.tree.names[n]
        m = new.tree.find(name)
        if m is None or not new.tree.leaf_mask[m]:
            gone.append((int(old.tree.ids[n]), release(old.table, int(n), now)))
            continue
        activate(new.table, m, 0.0)
        _copy_row(old.table, int(n), new.table, m)
        if n in old.entry:
            new.entry[m] = old.entry[n]
        if n in old.warned:
            new.warned.add(m)
    _copy_row(old.table, 0, new.table, 0)  # the root
    for n in np.flatnonzero(old.table.active & ~old.tree.leaf_mask)[1:].tolist():
        m = new.tree.find(old.tree.names[n])
        if m is not None and not new.tree.leaf_mask[m] and new.table.active[m]:
            _copy_row(old.table, n, new.table, m)
    return gone


def _copy_row(old: LnodeTable, n: int, new: LnodeTable, m: int) -> None:
    copy_row(old, n, new, m)  # the policy's state too (fairshare.core.lnode)


def arriving(ln: Lnodes, c: Consumption) -> list[int]:
    """The leaves without an lnode that got processes or CPU (idle time) in `c`."""
    new = ln.tree.leaf_mask & ~ln.table.active & ((c.refs > 0) | (c.cpu > 0))
    return np.flatnonzero(new).tolist()


def activate_leaves(
    ln: Lnodes, nodes: list[int], states: Mapping[int, EntryState], now: float, consts: Consts
) -> list[tuple[int, float]]:
    """Create the lnodes of `nodes`, each from its entry's usage (`states`, by uid)
    aged from shextime to `now` (epoch s), or 0 when it has no entry (or the UDB did
    not answer).  Returns (node, usage) of each lnode created."""
    out = []
    for n in nodes:
        st = states.get(int(ln.tree.ids[n]))
        stored = (st.shusage, st.shextime) if st else (0.0, 0.0)
        usage = activate_stored(ln.table, n, *stored, now, consts)
        if st is not None:
            ln.entry[n] = st
        ln.warned.discard(n)
        out.append((n, usage))
    return out


def leave(
    ln: Lnodes, now: float, everything: bool, release_gone: bool = True
) -> list[tuple[int, WriteBack]]:
    """What every active leaf lnode accrued up to `now` (epoch s), by uid, releasing
    those with no processes (all of them when `everything`; none unless `release_gone`;
    never Idle while the daemon runs).  The CPU seconds of a lnode kept move into its
    entry's cpuquotaused, as the UDB will hold them once written."""
    t = ln.table
    leaves = t.active & ln.tree.leaf_mask
    gone = leaves & (t.refs == 0) if release_gone else np.zeros_like(leaves)
    if ln.idle is not None:
        gone[ln.idle] = False
    if everything:
        gone = leaves
    out = []
    for n in np.flatnonzero(leaves).tolist():
        uid = int(ln.tree.ids[n])
        if gone[n]:
            out.append((uid, release(t, n, now)))
            ln.entry.pop(n, None)
            ln.warned.discard(n)
            continue
        wb = accrued(t, n, now)
        out.append((uid, wb))
        st = ln.entry.get(n)
        if st is not None:
            ln.entry[n] = dataclasses.replace(st, cpuquotaused=st.cpuquotaused + wb.cpu_seconds)
    return out


def refresh_entries(ln: Lnodes, store: EntryReader, nodes: list[int] | None = None) -> None:
    """Read again the entries of `nodes` (default: every active leaf) through `store`."""
    nodes = ln.active_leaves() if nodes is None else nodes
    states = store.entry_states(int(ln.tree.ids[n]) for n in nodes)
    for n in nodes:
        st = states.get(int(ln.tree.ids[n]))
        if st is not None:
            ln.entry[n] = st
