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
from typing import TypeVar

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
    "want",
    "target",
    "got",
    "got_minute",
    "flat",
    "trim",
    "nested",
)
_BOOL_FIELDS = ("active", "demand", "background")
_INT_FIELDS = ("refs", "nrun")


S = TypeVar("S", bound="NodeState")


@dataclass
class NodeState:
    """A policy's own state over the tree's nodes, which the lnode table carries from
    cycle to cycle (`LnodeTable.policy_state`) without knowing what it holds.

    A policy that keeps state subclasses it with float array fields over the nodes (as
    fairshare.core.policies.feedback.FeedbackState does), each 0 for an lnode just created;
    the table's row steps (`activate`, `release`, `copy_row`, `keep_finite`, copying)
    treat every field alike.
    """

    def arrays(self) -> dict[str, np.ndarray]:
        """The state's arrays by field name, in field order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def zeros(cls: type[S], n: int) -> S:
        """The state of `n` nodes none of which has any yet (every array 0)."""
        return cls(**{f.name: np.zeros(n) for f in dataclasses.fields(cls)})

    def copy(self: S) -> S:
        """A deep copy (every array copied)."""
        return type(self)(**{k: v.copy() for k, v in self.arrays().items()})

    def clear(self, node: int) -> None:
        """Set `node`'s row to 0 (an lnode created or released), in place."""
        for values in self.arrays().values():
            values[node] = 0.0


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
    want, target, got, got_minute, flat (fairshare.core.delivery, the same for every
      policy): the CPUs the lnode would use unconstrained; its fair target, the
      hierarchical max-min allocation for those wants (fraction of the machine); the
      fraction of the machine it received over the last cycle, and about the last
      minute; the share a flat enforcer (nice, systemd) weighs a leaf by, and the
      factor that corrects it for what the kernel delivered (0: not yet set).
    policy_state: the state the policy in force keeps from cycle to cycle, of a type it
      defines (a `NodeState`: fairshare.core.policies.feedback.FeedbackState); None
      under a policy that keeps none, and in a new table.
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
    want: np.ndarray | None = None
    target: np.ndarray | None = None
    got: np.ndarray | None = None
    got_minute: np.ndarray | None = None
    flat: np.ndarray | None = None
    trim: np.ndarray | None = None
    nested: np.ndarray | None = None
    policy_state: NodeState | None = None

    def __post_init__(self) -> None:
        # Figures a policy need not compute (the displays show 0 for them), and those
        # fairshare.core.delivery fills in after the policy's cycle.
        for name in ("due", "pri", "want", "target", "got", "got_minute", "flat", "trim", "nested"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(len(self.usage)))

    @property
    def size(self) -> int:
        return len(self.usage)

    def copy(self) -> LnodeTable:
        """A deep copy (every array copied)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        state = fields.pop("policy_state")
        return LnodeTable(
            **{k: v if k == "parent" else v.copy() for k, v in fields.items()},
            policy_state=None if state is None else state.copy(),
        )


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
    before = _float_arrays(old)
    for name, values in _float_arrays(new).items():
        finite = np.isfinite(values)
        if finite.all():
            continue
        idx = np.flatnonzero(~finite)
        prev = before[name][idx] if name in before else np.zeros(len(idx))  # a new state
        values[idx] = np.where(np.isfinite(prev), prev, 0.0)
        bad += [(int(i), name) for i in idx]
    return bad


def _float_arrays(table: LnodeTable) -> dict[str, np.ndarray]:
    """The table's float arrays by name: its own, then its policy state's."""
    own = {name: getattr(table, name) for name in _FLOAT_FIELDS}
    state = table.policy_state
    return own if state is None else {**own, **state.arrays()}


def copy_row(old: LnodeTable, n: int, new: LnodeTable, m: int) -> None:
    """Copy lnode `n` of `old` into lnode `m` of `new` (in place): every figure but the
    parent array and `active`, the policy state's included (a new table takes a zero
    state of the old one's type)."""
    for f in dataclasses.fields(LnodeTable):
        if f.name not in ("parent", "active", "policy_state"):
            getattr(new, f.name)[m] = getattr(old, f.name)[n]
    state = old.policy_state
    if state is None:
        if new.policy_state is not None:
            new.policy_state.clear(m)
        return
    if type(new.policy_state) is not type(state):
        new.policy_state = type(state).zeros(new.size)
    mine = new.policy_state.arrays()
    for name, values in state.arrays().items():
        mine[name][m] = values[n]


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
    if table.policy_state is not None:
        table.policy_state.clear(node)
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
    if table.policy_state is not None:
        table.policy_state.clear(node)
