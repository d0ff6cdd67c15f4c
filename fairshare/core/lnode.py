"""The lnode table: the scheduler's state for every node of the share tree (pure).

One `LnodeTable` holds, as numpy arrays indexed by tree node number, what the
guide's lnodes hold: an lnode exists (`active`) for every user or account with
processes and for every resource group above one, up to the root.  Units:
usage and charge in charge units (see fairshare.core.consts), rate in charge units
per second, cpu_seconds in CPU seconds, m_share / e_share / cpu as fractions of
the machine.

Lifecycle (the daemon drives it; the cycle only reads `active`):

- a leaf's first process appears: ``activate(table, node, aged_usage(shusage, shextime,
  now, consts))`` (its ancestors become active too; the table knows the tree's parent
  array, so no tree is passed);
- every cycle: ``table = run_cycle(...)`` (fairshare.core.cycle);
- every write-back interval: ``accrued(table, node, now)`` returns what the lnode
  accrued since it was created or last written (the `WriteBack` increment) and marks it
  written, without releasing it;
- its last process is gone: ``release(table, node, now)`` returns the last increment
  and clears the lnode; groups with no active leaf left below are released with it.

Usage reaches the UDB as *increments*, never as an overwrite, so several hosts can
write back one user without erasing each other's charges: `stored` is the part of an
lnode's usage that is already in the UDB (what it brought at activation, then what it
wrote), decayed like usage; usage - stored is what this host accrued and still owes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from fairshare.core.consts import Consts, decay
from fairshare.core.tree import ShareTree, ancestors

_FLOAT_FIELDS = (
    "usage",
    "stored",
    "charge",
    "charge_written",
    "cpu_seconds",
    "cpu_written",
    "rate",
    "m_share",
    "e_share",
    "due",
    "pri",
    "cpu",
    "adj",
    "priority",
    "transient",
    "filtered",
    "correction",
    "since",
)
#: The feedback policy's state among the float fields (other policies leave it 0).
FEEDBACK_STATE = ("transient", "filtered", "correction", "since")
_BOOL_FIELDS = ("active", "demand", "background")
_INT_FIELDS = ("refs", "nrun")


@dataclass
class LnodeTable:
    """Lnode state over the tree's nodes (index = node number; inactive rows are zero).

    usage: decayed usage (charge units); for groups the sum over active leaves below.
    stored: the part of a leaf's usage already in the UDB (charge units, decayed like
      usage); usage - stored is what this host accrued since and still has to write.
    charge: undecayed charges since the lnode was created (the guide's Muse).
    charge_written: the part of `charge` already added to shcharge.
    cpu_seconds: CPU seconds since the lnode was created.
    cpu_written: the part of `cpu_seconds` already added to cpuquotaused (so the CPU
      quota counts cpuquotaused + cpu_seconds - cpu_written).
    rate: decayed charge rate (charge units per second).
    active: the lnode exists (a leaf with processes, or an ancestor of one; root always).
    demand: wanted CPU in the last cycle (runnable processes or CPU used).
    refs, nrun: processes attached / runnable at the last sample (groups: sums below).
    m_share: machine share among active lnodes (Rshr), after sharemin.
    e_share: effective share the enforcer must deliver next cycle (Eshr).  Over the
      demanding lnodes it sums to 1; for an active lnode that did not demand CPU it is
      what it would get if it alone started to run.
    due: its due share (fraction of the machine), the share its e_share settles at and
      the edge effects and LIMSHARE bound: m_share renormalised over the demanding
      lnodes at every level (for an active lnode that did not demand CPU: over them and
      itself, what would be due if it started); 0 when inactive.  Under the feedback
      policy, the share its share node steers to (the redistribution's transient
      shares multiplied down the tree).  A policy that has no due share leaves it 0.
    pri: the Kay-Lauder near-future proportion (shrview's Pri): a demanding leaf's
      m_share^2 / usage over the sum of that over all demanding leaves; 0 for the
      others and for groups (a display sums their leaves'), or from a policy that does
      not compute it.
    cpu: fraction of the CPU delivered to all lnodes that this lnode got last cycle.
    adj: ADJGROUPS factor applied to the charges under this node (1 = none).
    priority: Kay-Lauder priority usage x nrun / m_share**2 (PRIORITY_MAX if m_share 0).
    background: past MAXUSAGE or zero shares: runs only on CPU nobody else wants.
    parent: the tree's parent array (shared, never written), for activate/release.

    The feedback policy's state (fairshare.core.policies.feedback; zero under other policies,
    and for an lnode just created):
    transient: the share redistribution node's transient share of the lnode among its
      active siblings (fraction; seed 004's equation 10, re-derived every period).
    filtered: the share node's low-pass filtered share of the machine's charges that
      the lnode received (fraction of the machine).
    correction: the share node's accumulated correction, as a natural log (0 = none).
    since: on groups and the root, seconds since their redistribution node last
      re-derived the children's transient shares.
    """

    usage: np.ndarray
    stored: np.ndarray
    charge: np.ndarray
    charge_written: np.ndarray
    cpu_seconds: np.ndarray
    cpu_written: np.ndarray
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
    due: np.ndarray | None = None
    pri: np.ndarray | None = None
    transient: np.ndarray | None = None
    filtered: np.ndarray | None = None
    correction: np.ndarray | None = None
    since: np.ndarray | None = None

    def __post_init__(self) -> None:
        # Figures a policy need not compute (the displays show 0 for them), and the
        # feedback policy's state (0 under the others).
        for name in ("due", "pri", *FEEDBACK_STATE):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(len(self.usage)))

    @property
    def size(self) -> int:
        return len(self.usage)

    def copy(self) -> LnodeTable:
        """A deep copy (every array copied)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return LnodeTable(**{k: v if k == "parent" else v.copy() for k, v in fields.items()})


@dataclass(frozen=True)
class WriteBack:
    """What a leaf lnode adds to its UDB entry (and to its resource groups').

    shusage: usage accrued on this host, as of `shextime` (charge units), to add to the
    stored shusage aged to that time (fairshare.store.published.add_usage); shextime: when it was
    written (epoch s); charge: charges to add to shcharge; cpu_seconds: CPU s to add to
    cpuquotaused.
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


def keep_finite(old: LnodeTable, new: LnodeTable) -> list[tuple[int, str]]:
    """Put back in `new`, in place, `old`'s value of every number that is not finite
    (NaN or infinite) after a cycle, so no such number is ever published, checkpointed
    or written back; a value not finite in `old` either becomes 0.  Returns the
    (node, field) pairs put back, [] in the usual case."""
    bad: list[tuple[int, str]] = []
    for name in _FLOAT_FIELDS:
        values = getattr(new, name)
        finite = np.isfinite(values)
        if finite.all():
            continue
        idx = np.flatnonzero(~finite)
        prev = getattr(old, name)[idx]
        values[idx] = np.where(np.isfinite(prev), prev, 0.0)
        bad += [(int(i), name) for i in idx]
    return bad


def aged_usage(shusage: float, shextime: float, now: float, consts: Consts) -> float:
    """A returning lnode's usage (charge units): `decayed_usage` with the constants'
    half-life, as a number."""
    return float(decayed_usage(shusage, shextime, now, consts.halflife))


def decayed_usage(shusage, shextime, now: float, halflife: float):
    """Stored usage decayed to `now`: shusage x 0.5 ** ((now - shextime) / halflife).

    Element-wise over numbers or numpy arrays (charge units; epoch s).  The age is never
    negative (a clock set back, a shextime in the future, ages nothing) and a usage
    below 0 counts as 0.
    """
    usage = np.maximum(np.asarray(shusage, dtype=float), 0.0)
    return usage * decay(now - np.asarray(shextime, dtype=float), halflife)


def add_usage(shusage, shextime, usage, time, halflife: float):
    """Stored usage plus an increment: (new shusage, new shextime), element-wise.

    The stored `shusage` (as of `shextime`) and the increment `usage` (as of `time`) are
    both aged to the later of the two times and added (charge units; epoch s), so the
    order in which hosts write back does not matter.
    """
    shusage, shextime = np.asarray(shusage, float), np.asarray(shextime, float)
    usage, time = np.asarray(usage, float), np.asarray(time, float)
    when = np.maximum(shextime, time)
    total = shusage * decay(when - shextime, halflife) + usage * decay(when - time, halflife)
    return total, when


def activate(table: LnodeTable, node: int, usage: float) -> None:
    """Create the lnode of leaf `node` with `usage` (charge units), in place.

    Its ancestors become active; an already active lnode is left as it is.
    """
    if table.active[node]:
        return
    table.active[node] = True
    table.usage[node] = max(float(usage), 0.0)
    table.stored[node] = table.usage[node]
    table.charge[node] = table.charge_written[node] = 0.0
    table.cpu_seconds[node] = table.cpu_written[node] = 0.0
    table.rate[node] = 0.0
    table.adj[node] = 1.0
    table.transient[node] = table.filtered[node] = table.correction[node] = 0.0
    for a in ancestors(table.parent, node):
        table.active[a] = True


def accrued(table: LnodeTable, node: int, now: float) -> WriteBack:
    """What leaf `node` accrued since it was created or last written (the increment to
    add to its entry, as of `now`, epoch s), marking it written: its stored usage
    becomes its usage, its written charge and CPU seconds its charge and CPU seconds
    (which keep counting from the lnode's creation)."""
    wb = WriteBack(
        shusage=max(float(table.usage[node] - table.stored[node]), 0.0),
        shextime=float(now),
        charge=float(table.charge[node] - table.charge_written[node]),
        cpu_seconds=float(table.cpu_seconds[node] - table.cpu_written[node]),
    )
    table.stored[node] = table.usage[node]
    table.charge_written[node] = table.charge[node]
    table.cpu_written[node] = table.cpu_seconds[node]
    return wb


def release(table: LnodeTable, node: int, now: float) -> WriteBack:
    """Release leaf `node`'s lnode in place and return its last increment (`accrued`).

    `now` (epoch s) becomes shextime.  Groups left without an active leaf below are
    released too (their stored usage grows with their leaves' increments: see
    fairshare.store.published).
    """
    wb = accrued(table, node, now)
    _clear(table, node)
    for a in ancestors(table.parent, node):
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
