"""What the machine delivered against what is fair, and what a flat enforcer weighs (pure).

After every policy's cycle (fairshare.core.steps.advance, after GLOBALUSAGE's site
factors), on the new lnode table, in place:

- `want`: the CPUs each active leaf would use if nothing held it back.  Where the
  collector measured it (`Consumption.want`, NaN where not) that: the real machine's
  collector reads how long each process's threads ran or waited in a run queue over
  the cycle (/proc/PID/task/TID/schedstat), the simulator knows each workload's
  demand.  Otherwise (a process not read this cycle: one counted by its cgroup's
  counter) the larger of the CPUs it used over the cycle and its runnable processes
  at the sample: a process uses at most one CPU, a busy one is runnable whenever it is
  sampled.  That guess fails an interactive user whose small commands run on a period
  that beats with the cycle's: caught runnable at sample after sample, it looked as if
  it wanted a whole CPU, and its group's allocation went to it (the benchmark's groups
  case under nice, where the light user's half-second commands and the one-second
  cycle kept in step for tens of seconds).  A group's want is its leaves' sum.
- `target`: the fair target, the hierarchical max-min allocation of the machine's CPUs
  (fairshare.core.maxmin) for those wants over the tree's shares, as a fraction of the
  machine.  A group's target is its subtree's.
- `got`: the fraction of the machine each lnode received over the cycle; `got_minute`
  the same, averaged over about the last minute (exponentially, time constant MINUTE;
  a new lnode's starts at its first cycle's).
- `flat`: the share a flat enforcer (nice values, systemd's user slices: one weight
  per lnode, side by side) gives an lnode, so that the kernel delivers what nested
  cgroups would.  The kernel hands the CPU an lnode leaves unused to every runnable
  lnode by weight; nested cgroups hand it to the lnode's own group first.  So:

  1. the policy's e_shares, as weights of each node among its siblings, are shared
     out by hierarchical max-min over the wants (`maxmin_allocation`): what an lnode
     leaves goes to its siblings first, as the nested cgroups do;
  2. an lnode that gets less than it wants (it is *using its share*) weighs exactly its
     allocation: the weights of those lnodes then split the CPU that the others leave
     in the ratio of their allocations;
  3. an lnode that gets all it wants (it used less than its share) weighs the larger of
     its allocation and its e_share: the kernel still gives it only what it uses, so
     the rest is not lost, and when it wakes it is served at once at its full share,
     the next cycle being the policy's to correct;
  4. the kernel's weights are coarse (nice values step by 1.25) and the kernel is not
     the model (autogroups, wake-up preemption, a fork placed on the CPU of a busy
     process of another group): every node has a `trim`, a factor on its weight that
     every cycle moves by (owed / received) ** TRIM_GAIN, within TRIM_RANGE, where
     owed is its allocation or, when it wants less, all it wants (a leaf that received
     nothing is not competing, and what is owed is scaled to what the tree received:
     see `flat_shares`); so what it receives averages what it is owed (an integral
     controller: between two nice values, the lnode alternates in the proportion that
     gives the right mean).  A node that received less than half of it is held back by
     something else and is left alone.

  This holds whatever the policy and its flags: without ADJGROUPS unicos splits the
  machine by Kay-Lauder's flat model, each user by its own share, and the flat shares
  still hand what a member leaves to its own group first, as the nested cgroups do, so
  that every enforcer delivers the same.  When every lnode uses its share the flat
  shares are the e_shares (times the trims).

- `nested`: each node's weight among its siblings for the nested cgroup enforcers: its
  e_share times its `trim`.  Groups have trims too, steered by what their subtree is
  owed and received: the kernel spreads a group's weight over the
  CPUs by where its processes run, so a group of one busy process shares that
  process's CPU with a part of every other group's weight, and receives less than
  its weight says (the benchmark's interactive-member case: Chem's one loop against
  Physics' nine processes).  The trim raises such a group's weight until its
  CPU is its own.

Background lnodes (past MAXUSAGE, zero shares) want as the others (a fair target
counts them) but get no flat share: the enforcers run them at the lowest weight.
"""

from __future__ import annotations

import numpy as np

from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption
from fairshare.core.lnode import LnodeTable
from fairshare.core.maxmin import maxmin_allocation
from fairshare.core.tree import ShareTree

#: The time constant of `got_minute` (s): about the last minute's CPU.
MINUTE = 60.0
#: An lnode gets all it wants when its allocation is within this fraction of its want.
_SATISFIED = 1e-6
#: How far one cycle moves a trim towards allocation / received (as a power of it), and
#: the range a trim stays in (see the module docstring: how far the kernel can be off).
TRIM_GAIN = 0.3
TRIM_RANGE = (0.25, 4.0)


def leaf_want(c: Consumption, elapsed: float, leaves: np.ndarray) -> np.ndarray:
    """CPUs each leaf of `leaves` would use unconstrained, from one cycle of `c` (see the
    module docstring); 0 elsewhere."""
    if elapsed <= 0:
        return np.where(leaves, c.nrun, 0.0)
    want = np.maximum(c.cpu / elapsed, c.nrun)
    if c.want is not None:
        known = ~np.isnan(c.want)
        want[known] = np.maximum(c.want[known], c.cpu[known]) / elapsed
    return np.where(leaves, want, 0.0)


def flat_shares(
    tree: ShareTree,
    old: LnodeTable,
    new: LnodeTable,
    want: np.ndarray,
    cpus: float,
    got: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each leaf's share for a flat enforcer (a fraction of the machine), every node's
    trim, and every node's weight among its siblings for nested cgroups, from the new
    table's e_share and background flags, `want` (CPUs, per node) and `got` (the
    fraction of the machine each node received over the cycle; None: a re-plan, the
    trims stand).  See the module docstring."""
    idx = tree.index
    sched = new.active & ~new.background
    leaf = sched & idx.leaf
    e = np.where(sched, new.e_share, 0.0)
    alloc = maxmin_allocation(idx, e, np.where(leaf, want, 0.0), cpus) / cpus
    satisfied = alloc * cpus >= want * (1 - _SATISFIED)
    trim = np.where(old.trim > 0, old.trim, 1.0)
    if got is not None:
        # What each node is owed: its allocation, or all it wants when that is less.
        # A leaf that received nothing at all is not competing (a process caught
        # runnable at the sample that is not, or one waiting on I/O): what its want
        # would be allocated is owed to the others, its own group first.  And what is
        # owed is scaled to what the tree received: CPU taken by processes outside it
        # (root's, the kernel's) leaves every node short alike.  Without either, every
        # trim would go to one end of its range, where none can correct another.
        wanting = np.where(leaf & (got > 0), want, 0.0)
        owed = maxmin_allocation(idx, e, wanting, cpus) / cpus
        owed = np.minimum(owed, idx.subtree_sum(wanting) / cpus)
        if owed[0] > 0 and got[0] > 0:
            owed = owed * (got[0] / owed[0])
        # A node that got less than it is owed weighs more next time, one that got
        # more weighs less (see TRIM_GAIN); one that got less than half of it is held
        # back by something else (I/O, a lock) and is left alone.
        steer = sched & (got >= owed * 0.5) & (got > 0) & (owed > 0)
        steer[0] = False  # the root has no siblings
        ratio = np.divide(owed, got, out=np.ones(idx.n), where=steer)
        trim = np.clip(trim * ratio**TRIM_GAIN, *TRIM_RANGE)
    trim = np.where(sched, trim, 0.0)
    flat = np.where(satisfied, np.maximum(alloc, e), alloc) * trim
    nested = e * trim
    return np.where(leaf, flat, 0.0), trim, nested


def deliver(
    tree: ShareTree,
    old: LnodeTable,
    new: LnodeTable,
    c: Consumption,
    consts: Consts,
    elapsed: float,
) -> None:
    """Fill `new`'s want, target, got, got_minute, flat and trim (in place) after a
    cycle of `elapsed` seconds of `c` that followed `old` (see the module docstring).
    The machine's CPUs are `c.cpus` (1 when not given)."""
    idx = tree.index
    cpus = c.cpus if c.cpus > 0 else 1.0
    leaves = new.active & idx.leaf
    want = leaf_want(c, elapsed, leaves)
    if elapsed <= 0:  # a re-plan: the wants measured stand, a newcomer's is its nrun
        want = np.where(leaves & (old.want > 0), old.want, want)
    shares = np.where(new.active, tree.shares, 0.0)
    even = consts.idleshare == "even"
    target = maxmin_allocation(idx, shares, want, cpus, even) / cpus
    if elapsed > 0:
        got_leaf = np.where(leaves, c.cpu, 0.0) / (elapsed * cpus)
    else:
        got_leaf = np.where(leaves, old.got, 0.0)
    got, want = idx.subtree_sum(np.array((got_leaf, want)))
    k = float(np.exp(-elapsed / MINUTE))
    new.want = want * new.active
    new.target = target * new.active
    new.got = got * new.active
    # A new lnode's minute starts at what it got in its first cycle, not at 0.
    fresh = (old.got_minute <= 0) & (old.got <= 0)
    minute = np.where(fresh, got, old.got_minute * k + got * (1 - k))
    new.got_minute = minute * new.active
    measured = got if elapsed > 0 else None
    new.flat, new.trim, new.nested = flat_shares(tree, old, new, want, cpus, measured)
