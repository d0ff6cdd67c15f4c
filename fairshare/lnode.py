"""The lnode table: the scheduler's state for every node of the share tree (pure).

One `LnodeTable` holds, as numpy arrays indexed by tree node number, what the
guide's lnodes hold: an lnode exists (`active`) for every user or account with
processes and for every resource group above one, up to the root.  Units:
usage and charge in charge units (see fairshare.consts), rate in charge units
per second, cpu_seconds in CPU seconds, m_share / e_share / cpu as fractions of
the machine.

Lifecycle (the daemon drives it; the cycle only reads `active`):

- a leaf's first process appears: ``activate(table, node, aged_usage(shusage, shextime,
  now, consts))`` (its ancestors become active too; the table knows the tree's parent
  array, so no tree is passed);
- every cycle: ``table = run_cycle(...)`` (fairshare.cycle);
- its last process is gone: ``release(table, node, now)`` returns the `WriteBack` to
  store in the UDB (shusage, shextime, the charges to add to shcharge, the CPU seconds
  to add to cpuquotaused) and clears the lnode; groups with no active leaf left below
  are released with it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from fairshare.consts import Consts, decay
from fairshare.tree import ShareTree

_FLOAT_FIELDS = (
    "usage",
    "charge",
    "cpu_seconds",
    "rate",
    "m_share",
    "e_share",
    "cpu",
    "adj",
    "priority",
)
_BOOL_FIELDS = ("active", "demand", "background")
_INT_FIELDS = ("refs", "nrun")


@dataclass
class LnodeTable:
    """Lnode state over the tree's nodes (index = node number; inactive rows are zero).

    usage: decayed usage (charge units); for groups the sum over active leaves below.
    charge: undecayed charges since the lnode was created (added to shcharge on release).
    cpu_seconds: CPU seconds since the lnode was created (for cpuquotaused).
    rate: decayed charge rate (charge units per second).
    active: the lnode exists (a leaf with processes, or an ancestor of one; root always).
    demand: wanted CPU in the last cycle (runnable processes or CPU used).
    refs, nrun: processes attached / runnable at the last sample (groups: sums below).
    m_share: machine share among active lnodes (Rshr), after sharemin.
    e_share: effective share the enforcer must deliver next cycle (Eshr).  Over the
      demanding lnodes it sums to 1; for an active lnode that did not demand CPU it is
      what it would get if it alone started to run.
    cpu: fraction of the CPU delivered to all lnodes that this lnode got last cycle.
    adj: ADJGROUPS factor applied to the charges under this node (1 = none).
    priority: Kay-Lauder priority usage x nrun / m_share**2 (PRIORITY_MAX if m_share 0).
    background: past MAXUSAGE or zero shares: runs only on CPU nobody else wants.
    parent: the tree's parent array (shared, never written), for activate/release.
    """

    usage: np.ndarray
    charge: np.ndarray
    cpu_seconds: np.ndarray
    rate: np.ndarray
    active: np.ndarray
    demand: np.ndarray
    refs: np.ndarray
    nrun: np.ndarray
    m_share: np.ndarray
    e_share: np.ndarray
    cpu: np.ndarray
    adj: np.ndarray
    priority: np.ndarray
    background: np.ndarray
    parent: np.ndarray

    @property
    def size(self) -> int:
        return len(self.usage)

    def copy(self) -> LnodeTable:
        """A deep copy (every array copied)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return LnodeTable(**{k: v if k == "parent" else v.copy() for k, v in fields.items()})


@dataclass(frozen=True)
class WriteBack:
    """What a released leaf lnode leaves in its UDB entry.

    shusage: usage to store (charge units); shextime: release time (epoch s);
    charge: charges to add to shcharge; cpu_seconds: CPU s to add to cpuquotaused.
    """

    shusage: float
    shextime: float
    charge: float
    cpu_seconds: float


def new_table(tree: ShareTree) -> LnodeTable:
    """An empty lnode table for `tree`: only the root is active, everything else zero."""
    n = tree.size
    arrays: dict[str, np.ndarray] = {}
    for name in _FLOAT_FIELDS:
        arrays[name] = np.zeros(n)
    for name in _BOOL_FIELDS:
        arrays[name] = np.zeros(n, dtype=bool)
    for name in _INT_FIELDS:
        arrays[name] = np.zeros(n, dtype=np.int64)
    arrays["adj"][:] = 1.0
    table = LnodeTable(**arrays, parent=tree.parent)
    table.active[0] = True
    table.m_share[0] = 1.0
    return table


def aged_usage(shusage: float, shextime: float, now: float, consts: Consts) -> float:
    """A returning lnode's usage (charge units): shusage x 0.5 ** (age / halflife).

    The age is now - shextime in seconds, never negative (a clock set back ages nothing).
    """
    if shusage <= 0:
        return 0.0
    return float(shusage) * decay(now - shextime, consts.halflife)


def _ancestors(table: LnodeTable, node: int) -> list[int]:
    chain, node = [], int(table.parent[node])
    while node >= 0:
        chain.append(node)
        node = int(table.parent[node])
    return chain


def activate(table: LnodeTable, node: int, usage: float) -> None:
    """Create the lnode of leaf `node` with `usage` (charge units), in place.

    Its ancestors become active; an already active lnode is left as it is.
    """
    if table.active[node]:
        return
    table.active[node] = True
    table.usage[node] = max(float(usage), 0.0)
    table.charge[node] = 0.0
    table.cpu_seconds[node] = 0.0
    table.rate[node] = 0.0
    table.adj[node] = 1.0
    for a in _ancestors(table, node):
        table.active[a] = True


def release(table: LnodeTable, node: int, now: float) -> WriteBack:
    """Release leaf `node`'s lnode in place and return what to write back to its entry.

    `now` (epoch s) becomes shextime.  Groups left without an active leaf below are
    released too (groups have nothing to write back: their usage is their leaves').
    """
    wb = WriteBack(
        shusage=float(table.usage[node]),
        shextime=float(now),
        charge=float(table.charge[node]),
        cpu_seconds=float(table.cpu_seconds[node]),
    )
    _clear(table, node)
    for a in _ancestors(table, node):
        if a == 0:
            break
        kids = table.parent == a
        if table.active[kids].any():
            break
        _clear(table, a)
    return wb


def _clear(table: LnodeTable, node: int) -> None:
    for name in _FLOAT_FIELDS:
        getattr(table, name)[node] = 0.0
    for name in _BOOL_FIELDS:
        getattr(table, name)[node] = False
    for name in _INT_FIELDS:
        getattr(table, name)[node] = 0
    table.adj[node] = 1.0
