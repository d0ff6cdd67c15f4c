"""The daemon's lnode state: the share tree, the lnode table over it, and what it knows
per leaf, with the steps that create, advance and carry over lnodes (no UDB, no clock:
what the UDB holds comes in through the reader given).

`Lnodes` is what the daemon (fairshare.daemon.daemon), shrsync's requests
(fairshare.daemon.sync), the write-backs (fairshare.daemon.writeback) and the simulator
work on.  Its steps:

- `activate_arriving`: the leaves that got processes (or idle time) and have no lnode
  yet (`arriving`) become lnodes with their stored usage aged since shextime
  (`activate_leaves`, fairshare.core.steps.activate_stored), from the entries read;
- `advance_lnodes`: the cycle itself (fairshare.core.steps.advance) on the lnode
  table, with a log line for each value that was not finite;
- `refresh_entries`: the active leaves' entries read again through the store
  (after a write-back, a reload, shrsync -q);
- `carry_over`: a rebuilt tree takes the active lnodes over by name, groups included,
  and releases those it no longer has.

What a write-back takes from them, and which it releases, is
fairshare.daemon.writeback.leave.  Everything is in place on the `Lnodes` given, except
what the store must write, which is returned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption
from fairshare.core.exits import SiteExit
from fairshare.core.lnode import LnodeTable, WriteBack, activate, copy_row, new_table, release
from fairshare.core.site import SiteState
from fairshare.core.steps import activate_stored, advance
from fairshare.core.tree import UNKNOWN_NAMES, Kind, ShareTree
from fairshare.enforce.base import safe_name
from udb.rules import IDLE_UID

if TYPE_CHECKING:
    from fairshare.store.published import EntryState

log = logging.getLogger("shrdaemon")

_COSTS = ("cost_tick", "cost_bio", "cost_sio", "cost_syscall", "cost_mem", "percent")
#: The constants each lnode field is computed from, named when a value is not finite.
_CONSTS_OF = {
    "usage": (*_COSTS, "halflife", "delta"),
    "charge": _COSTS,
    "rate": (*_COSTS, "halflife", "delta"),
    "priority": (*_COSTS, "halflife", "sharemin"),
    "m_share": ("sharemin",),
    "e_share": ("sharemin", "maxushare", "mingshare", "maxusage"),
    "adj": ("mingshare",),
}


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
        copy_row(old.table, int(n), new.table, m)
        if n in old.entry:
            new.entry[m] = old.entry[n]
        if n in old.warned:
            new.warned.add(m)
    copy_row(old.table, 0, new.table, 0)  # the root
    for n in np.flatnonzero(old.table.active & ~old.tree.leaf_mask)[1:].tolist():
        m = new.tree.find(old.tree.names[n])
        if m is not None and not new.tree.leaf_mask[m] and new.table.active[m]:
            copy_row(old.table, n, new.table, m)
    return gone


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
        usage = activate_stored(ln.table, n, *stored, now, consts, ln.tree)
        if st is not None:
            ln.entry[n] = st
        ln.warned.discard(n)
        out.append((n, usage))
    return out


def activate_arriving(
    ln: Lnodes,
    c: Consumption,
    read: Callable[[list[int]], Mapping[int, EntryState] | None],
    now: float,
    consts: Consts,
) -> None:
    """Create the lnodes of the leaves arriving in `c`, from the entries `read` gives
    for their uids (from usage 0 when it gives None: the UDB cannot be reached); each
    is logged."""
    new = arriving(ln, c)
    if not new:
        return
    states = read([int(ln.tree.ids[n]) for n in new])
    for n, usage in activate_leaves(ln, new, states or {}, now, consts):
        log.debug("lnode %s created, usage %.6g", ln.tree.names[n], usage)


def advance_lnodes(
    ln: Lnodes,
    c: Consumption,
    consts: Consts,
    elapsed: float,
    site: SiteState,
    exits: Sequence[SiteExit] = (),
) -> None:
    """One cycle of `elapsed` seconds of `c` on the lnode table of `ln` (replaced;
    fairshare.core.steps.advance, `site`: the host's GLOBALUSAGE state, `exits`: the
    site's hooks, fairshare.core.exits), saying which
    lnode kept its last finite value where the cycle produced NaN or infinity (the
    constants' ranges should make that impossible) and which constants were in play,
    so the site keeps its scheduler."""
    ln.table, not_finite = advance(ln.tree, ln.table, c, consts, elapsed, site, exits, site.grid)
    for node, name in not_finite:
        names = [k for k in _CONSTS_OF.get(name, ()) if getattr(consts, k)]
        involved = ", ".join(f"{k}={getattr(consts, k):g}" for k in names)
        log.error(
            "lnode %s: %s was not finite after the cycle (constants in play: %s); "
            "its last finite value %g is kept",
            ln.tree.names[node],
            name,
            involved or "none",
            float(getattr(ln.table, name)[node]),
        )


def refresh_entries(ln: Lnodes, store: EntryReader, nodes: list[int] | None = None) -> None:
    """Read again the entries of `nodes` (default: every active leaf) through `store`."""
    nodes = ln.active_leaves() if nodes is None else nodes
    states = store.entry_states(int(ln.tree.ids[n]) for n in nodes)
    for n in nodes:
        st = states.get(int(ln.tree.ids[n]))
        if st is not None:
            ln.entry[n] = st
