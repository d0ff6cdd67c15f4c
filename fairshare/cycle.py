"""One scheduling cycle (pure: no OS, no clock, no database).

`run_cycle(tree, table, consumption, consts, elapsed)` takes the share tree, the
lnode table of the previous cycle, what every active leaf consumed during the
last `elapsed` seconds, and the constants, and returns the new lnode table.  The
daemon, the simulator and the tests all call it; there is no other copy of the
algorithm.  The policy sits behind `Policy`; `UnicosPolicy` (the default) is the
UNICOS / Kay-Lauder policy, in DESIGN.md's order, one named function per step:

1. `leaf_charges`: cost x resources x percent/100 per leaf (charge units).  Processes
   at the weakest nice are not charged: the collector leaves them out of `Consumption`.
2. `machine_shares` then `apply_sharemin` (DESIGN.md's steps 4-5; they need nothing from
   steps 2-3, so they run first): machine shares over the active lnodes (a group whose
   active leaves all have zero shares claims none), every active leaf at least `sharemin`.
3. `group_adjustment` (ADJGROUPS): a group whose share of its active siblings' charges is
   below mingshare x its due share has its leaves' charges scaled by
   actual / (mingshare x due), for the decayed usage only.
4. `decay_usage`: usage = usage x K + adjusted charges, K = 0.5 ** (elapsed / halflife).
5. `effective_shares`: the Kay-Lauder near-future proportion m^2 / usage, applied
   *hierarchically*: each group's e_share is split among its children that want CPU in
   proportion to m_child^2 / usage_child (usage of the child's subtree).  A logged-in but
   idle child leaves its part to its siblings, not to other organisations, so the paper's
   Table I gives organisation B half the machine (a flat split over all leaves settles
   near 9%).  At equilibrium every demanding lnode gets its *due share*: its m_share
   renormalised over the demanding siblings at every level.
   Edge effects (K5 = 2): no lnode gets more than K5 x its due share; the excess goes to
   its siblings (exact water-filling), and, as in the paper's Figure 4, the usage of an
   lnode that was capped is raised so that m^2 / usage gives exactly the capped value.
   LIMSHARE caps e_share at maxushare x the due share (without raising usage).
   MAXUSAGE: a leaf whose usage reaches maxusage is a background lnode; so is a leaf
   with zero shares (Idle): e_share 0, they run only on CPU nobody else wants.
6. `priority`: Kay-Lauder's usage x nrun / m_share^2, shown by the displays.

All arithmetic is over numpy arrays, level by level (nodes are numbered breadth
first, so each level is a contiguous slice); there is no loop over nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fairshare.consts import ADJGROUPS, K5, LIMSHARE, TICKS_PER_SECOND, Consts, decay
from fairshare.lnode import LnodeTable
from fairshare.tree import ShareTree

#: Usage below this (charge units) counts as this in m^2 / usage, so nothing divides by 0.
USAGE_FLOOR = 1e-9
#: Priority shown for lnodes with no machine share (they run only on idle CPU).
PRIORITY_MAX = 1e30


@dataclass
class Consumption:
    """What each leaf consumed during one cycle (arrays over tree nodes; non-leaves 0).

    cpu: CPU seconds; bio, sio, syscalls, tty: operation counts; mem: MiB-seconds of
    resident memory; nrun: runnable processes at sample time; refs: processes attached.
    """

    cpu: np.ndarray
    bio: np.ndarray
    sio: np.ndarray
    syscalls: np.ndarray
    mem: np.ndarray
    tty: np.ndarray
    nrun: np.ndarray
    refs: np.ndarray

    @classmethod
    def zeros(cls, n: int) -> Consumption:
        """An all-zero consumption over `n` nodes."""
        f = [np.zeros(n) for _ in range(6)]
        return cls(*f, nrun=np.zeros(n, dtype=np.int64), refs=np.zeros(n, dtype=np.int64))


class Policy(Protocol):
    """A fair-share policy: one cycle from the old lnode table to the new one."""

    name: str

    def cycle(
        self,
        tree: ShareTree,
        table: LnodeTable,
        consumption: Consumption,
        consts: Consts,
        elapsed: float,
    ) -> LnodeTable: ...


# -- the tree's level structure, computed once per tree --------------------------------


@dataclass
class TreeIndex:
    """Level slices of a breadth-first numbered tree, for fast per-level arithmetic.

    bounds[k] = (start, stop) of level k's node numbers; ppos[k] = each level-k node's
    parent as a position within level k-1.  Children of one parent are contiguous and
    in parent order (build_tree numbers them so), so `firsts[k]` (the first child of each
    parent that has children, within level k) and `owners[k]` (those parents' positions
    within level k-1) let np.add.reduceat sum siblings for many arrays at once.
    """

    n: int
    leaf: np.ndarray
    bounds: list[tuple[int, int]]
    ppos: list[np.ndarray]
    firsts: list[np.ndarray]
    owners: list[np.ndarray]

    def subtree_sum(self, values: np.ndarray) -> np.ndarray:
        """Each node's value plus those of all its descendants (a new float array).

        `values` may be (n,) or (k, n) for k arrays at once.
        """
        t = np.array(values, dtype=float)
        for k in range(len(self.bounds) - 1, 0, -1):
            s, e = self.bounds[k]
            ps = self.bounds[k - 1][0]
            t[..., ps + self.owners[k]] += np.add.reduceat(t[..., s:e], self.firsts[k], axis=-1)
        return t


def tree_index(tree: ShareTree) -> TreeIndex:
    """The `TreeIndex` of `tree` (cached on the tree object, which never changes)."""
    idx = tree.__dict__.get("_cycle_index")
    if idx is not None:
        return idx
    bounds, ppos, firsts, owners = [], [], [], []
    for k, lv in enumerate(tree.levels):
        s, e = int(lv[0]), int(lv[-1]) + 1
        if e - s != len(lv) or (k and s != bounds[-1][1]):
            raise ValueError("tree levels must be contiguous breadth-first node ranges")
        bounds.append((s, e))
        if k == 0:
            ppos.append(np.zeros(1, dtype=np.int64))
            firsts.append(np.zeros(0, dtype=np.int64))
            owners.append(np.zeros(0, dtype=np.int64))
            continue
        pp = tree.parent[s:e] - bounds[k - 1][0]
        if (np.diff(pp) < 0).any():
            raise ValueError("children must be numbered in the order of their parents")
        first = np.flatnonzero(np.concatenate(([True], pp[1:] != pp[:-1])))
        ppos.append(pp)
        firsts.append(first)
        owners.append(pp[first])
    idx = TreeIndex(tree.size, tree.leaf_mask, bounds, ppos, firsts, owners)
    tree.__dict__["_cycle_index"] = idx
    return idx


# -- the steps -------------------------------------------------------------------------


def leaf_charges(consumption: Consumption, consts: Consts) -> np.ndarray:
    """Charges per node for the cycle (charge units; zero where nothing was consumed)."""
    c = consumption
    total = consts.cost_tick * TICKS_PER_SECOND * c.cpu
    for cost, amount in (
        (consts.cost_bio, c.bio),
        (consts.cost_sio, c.sio),
        (consts.cost_syscall, c.syscalls),
        (consts.cost_mem, c.mem),
        (consts.cost_tty, c.tty),
    ):
        if cost:
            total = total + cost * amount
    return total * (consts.percent / 100.0)


def machine_shares(idx: TreeIndex, shares: np.ndarray, active: np.ndarray) -> np.ndarray:
    """m_share of every node over the active nodes (fractions of the machine, 0 inactive).

    The same normalisation as ShareTree.m_shares (UNICOS Figure 4), on level slices.
    """
    weight = np.where(active, shares, 0.0)
    m = np.zeros(idx.n)
    m[0] = 1.0
    for k in range(1, len(idx.bounds)):
        s, e = idx.bounds[k]
        ps, pe = idx.bounds[k - 1]
        pp = idx.ppos[k]
        sums = np.bincount(pp, weights=weight[s:e], minlength=pe - ps)[pp]
        mp = m[ps:pe][pp]
        np.divide(mp * weight[s:e], sums, out=m[s:e], where=sums > 0)
    return m


def apply_sharemin(idx: TreeIndex, m: np.ndarray, leaves: np.ndarray, sharemin: float):
    """m_share with every leaf in `leaves` that has shares raised to at least `sharemin`.

    The other leaves are scaled down to make room; groups become the sums of their
    leaves.  If the leaves cannot all have sharemin they share the machine equally.
    Returns a new array (fractions of the machine).
    """
    if sharemin <= 0:
        return m
    cand = leaves & (m > 0)
    count = int(cand.sum())
    if count == 0:
        return m
    out = np.where(idx.leaf, m, 0.0)
    if count * sharemin >= 1.0:
        out[cand] = 1.0 / count
    else:
        fixed = np.zeros_like(cand)
        for _ in range(count):
            low = cand & ~fixed & (out < sharemin)
            if not low.any():
                break
            fixed |= low
            free = cand & ~fixed
            room = 1.0 - sharemin * fixed.sum()
            out[fixed] = sharemin
            out[free] = m[free] * (room / m[free].sum())
    total = idx.subtree_sum(out)
    return np.where(idx.leaf, out, total)


def group_adjustment(
    idx: TreeIndex,
    kinds_group: np.ndarray,
    active: np.ndarray,
    m: np.ndarray,
    charges: np.ndarray,
    mingshare: float,
) -> np.ndarray:
    """ADJGROUPS: the factor each node's charges are scaled by (1 = none), cumulative.

    Top-down over active groups: actual = the group's charges / its active siblings'
    charges; due = its m_share / its active siblings' m_share; where actual < mingshare x
    due the charges below are scaled by actual / (mingshare x due).  A node's factor is
    the product of its own and its ancestors' (Kay-Lauder Figure 5, K6 = mingshare).
    """
    sub = idx.subtree_sum(charges)
    adj = np.ones(idx.n)
    for k in range(1, len(idx.bounds)):
        s, e = idx.bounds[k]
        ps, pe = idx.bounds[k - 1]
        pp = idx.ppos[k]
        act = active[s:e]
        sib_c = np.bincount(pp, weights=np.where(act, sub[s:e], 0.0), minlength=pe - ps)[pp]
        sib_m = np.bincount(pp, weights=np.where(act, m[s:e], 0.0), minlength=pe - ps)[pp]
        ok = act & kinds_group[s:e] & (sib_c > 0) & (sib_m > 0)
        actual = np.divide(sub[s:e], sib_c, out=np.zeros(e - s), where=ok)
        due = np.divide(m[s:e], sib_m, out=np.zeros(e - s), where=ok) * mingshare
        low = ok & (actual < due)
        own = np.divide(actual, due, out=np.ones(e - s), where=low)
        adj[s:e] = adj[ps:pe][pp] * own
    return adj


def decay_usage(usage: np.ndarray, charges: np.ndarray, k: float) -> np.ndarray:
    """usage x K + charges (charge units), never negative."""
    return np.maximum(usage * k + charges, 0.0)


@dataclass
class Shares:
    """What `effective_shares` returns (arrays over nodes, fractions of the machine).

    e_share: effective share (demanding nodes sum to their parent's; idle active nodes get
    what they would get if they alone started to run); due: the due share the edge and
    LIMSHARE bounds refer to; raise_: the factor each node's usage must be multiplied by
    (Figure 4), cumulative from the root (1 = unchanged).
    """

    e_share: np.ndarray
    due: np.ndarray
    raise_: np.ndarray


def effective_shares(
    idx: TreeIndex,
    m: np.ndarray,
    usage: np.ndarray,
    active: np.ndarray,
    demand: np.ndarray,
    limit: float,
) -> Shares:
    """The hierarchical Kay-Lauder near-future proportion with edge effects and limits.

    `usage` is per node (groups: their subtree's); `demand` marks nodes with a leaf below
    that wants CPU (and has shares, and is not background); `limit` is the largest
    multiple of its due share any node may get (K5, or maxushare with LIMSHARE if less).
    """
    n = idx.n
    e_share = np.zeros(n)
    due = np.zeros(n)
    raise_ = np.ones(n)
    raised = False
    e_share[0] = due[0] = 1.0
    w_all = m * m / np.maximum(usage, USAGE_FLOOR)
    w_dem = w_all * demand
    m_dem = m * demand
    idle_all = active & ~demand & (m > 0)
    any_idle = idle_all.any()
    for k in range(1, len(idx.bounds)):
        s, e = idx.bounds[k]
        ps, pe = idx.bounds[k - 1]
        pp = idx.ppos[k]
        np_ = pe - ps
        mk = m[s:e]
        dem = demand[s:e]
        w = w_dem[s:e]
        W = np.bincount(pp, weights=w, minlength=np_)
        M = np.bincount(pp, weights=m_dem[s:e], minlength=np_)
        e_par = e_share[ps:pe]
        due_par = due[ps:pe][pp]
        Wk, Mk, ek_par = W[pp], M[pp], e_par[pp]
        due_k = np.divide(due_par * mk, Mk, out=np.zeros(e - s), where=dem)
        cap = limit * due_k
        ek = np.divide(ek_par * w, Wk, out=np.zeros(e - s), where=dem)
        over = ek > cap * (1 + 1e-12)
        if over.any():
            R = np.divide(e_par, W, out=np.zeros(np_), where=W > 0)
            capped = np.zeros(e - s, dtype=bool)
            for _ in range(e - s):
                capped |= over
                capsum = np.bincount(pp, weights=np.where(capped, cap, 0.0), minlength=np_)
                wfree = np.bincount(pp, weights=np.where(capped, 0.0, w), minlength=np_)
                R = np.divide(e_par - capsum, wfree, out=R, where=wfree > 0)
                ek = np.where(capped, cap, R[pp] * w)
                over = ~capped & (ek > cap * (1 + 1e-12))
                if not over.any():
                    break
            # Figure 4: raise usage so that m^2/usage yields the capped value exactly.
            f = np.divide(R[pp] * w, K5 * due_k, out=np.ones(e - s), where=capped)
            raise_[s:e] = np.maximum(f, 1.0)
            raised = True
        if any_idle:
            # Active nodes that did not want CPU: what they would get if they alone started.
            idle = idle_all[s:e]
            if idle.any():
                wi = w_all[s:e]
                ei = np.divide(ek_par * wi, Wk + wi, out=np.zeros(e - s), where=idle)
                di = np.divide(due_par * mk, Mk + mk, out=np.zeros(e - s), where=idle)
                ek = np.where(idle, np.minimum(ei, limit * di), ek)
                due_k = np.where(idle, di, due_k)
        e_share[s:e] = ek
        due[s:e] = due_k
        if raised:
            raise_[s:e] *= raise_[ps:pe][pp]
    return Shares(e_share=e_share, due=due, raise_=raise_)


def priority(usage: np.ndarray, nrun: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Kay-Lauder priority usage x nrun / m_share^2 (PRIORITY_MAX where m_share is 0)."""
    p = np.full(len(m), PRIORITY_MAX)
    ok = m > 0
    np.divide(usage * nrun, m * m, out=p, where=ok)
    return np.minimum(p, PRIORITY_MAX)


# -- the policy ------------------------------------------------------------------------


class UnicosPolicy:
    """The UNICOS user-level fair-share policy (Kay-Lauder with ADJGROUPS, LIMSHARE, ...)."""

    name = "unicos"

    def cycle(
        self,
        tree: ShareTree,
        table: LnodeTable,
        consumption: Consumption,
        consts: Consts,
        elapsed: float,
    ) -> LnodeTable:
        """The lnode table after one cycle of `elapsed` seconds (see the module docstring)."""
        idx = tree_index(tree)
        leaf = idx.leaf
        c = consumption
        wants = (c.nrun > 0) | (c.cpu > 0)
        leaves = leaf & (table.active | (c.refs > 0) | wants)
        # Zero-share leaves (Idle) have lnodes but claim no share: groups holding only
        # them do not take machine share from their siblings.
        below = idx.subtree_sum(np.stack((leaves, leaves & (tree.shares > 0)))) > 0
        active, holders = below
        active[0] = True

        m = machine_shares(idx, tree.shares, holders)
        m = apply_sharemin(idx, m, leaves, consts.sharemin)

        charges = np.where(leaves, leaf_charges(c, consts), 0.0)
        if consts.flags & ADJGROUPS:
            group = tree.kinds == 1  # Kind.GROUP
            adj = group_adjustment(idx, group, active, m, charges, consts.mingshare)
            adjusted = charges * adj
        else:
            adj, adjusted = np.ones(idx.n), charges

        k = decay(elapsed, consts.halflife)
        usage = np.where(leaves, decay_usage(table.usage, adjusted, k), 0.0)
        background = leaves & ((usage >= consts.maxusage) | (m <= 0))
        demand_leaf = leaves & wants
        sub_usage, sched = idx.subtree_sum(np.stack((usage, demand_leaf & ~background)))

        limit = K5
        if consts.flags & LIMSHARE:
            limit = min(limit, consts.maxushare)
        sh = effective_shares(idx, m, sub_usage, active, sched > 0, limit)
        raised = leaves & (sh.raise_ > 1.0)
        if raised.any():
            usage = np.where(raised, np.maximum(usage, USAGE_FLOOR) * sh.raise_, usage)
        e_share = np.where(background | ~active, 0.0, sh.e_share)

        if elapsed > 0:
            rate = np.where(leaves, table.rate * k + (1 - k) * charges / elapsed, 0.0)
        else:
            rate = np.where(leaves, table.rate, 0.0)
        cpu_total = float(c.cpu[leaves].sum())
        cpu = np.where(leaves, c.cpu / cpu_total, 0.0) if cpu_total > 0 else np.zeros(idx.n)
        nrun = np.where(leaves, c.nrun, 0)
        refs = np.where(leaves, c.refs, 0)
        sums = idx.subtree_sum(np.stack((usage, rate, demand_leaf, refs, nrun, cpu)))
        sub_usage, rate, demand, refs, nrun, cpu = sums
        return LnodeTable(
            usage=sub_usage,
            charge=np.where(leaves, table.charge + charges, 0.0),
            cpu_seconds=np.where(leaves, table.cpu_seconds + c.cpu, 0.0),
            rate=rate,
            active=active,
            demand=demand > 0,
            refs=refs.astype(np.int64),
            nrun=nrun.astype(np.int64),
            m_share=m,
            e_share=e_share,
            cpu=cpu,
            adj=np.where(active, adj, 1.0),
            priority=np.where(active, priority(sub_usage, nrun, m), 0.0),
            background=background,
            parent=table.parent,
        )


#: The policy run_cycle uses unless told otherwise.
DEFAULT_POLICY: Policy = UnicosPolicy()


def run_cycle(
    tree: ShareTree,
    table: LnodeTable,
    consumption: Consumption,
    consts: Consts,
    elapsed: float,
    policy: Policy | None = None,
) -> LnodeTable:
    """The new lnode table after one cycle of `elapsed` seconds (pure; `table` untouched).

    `consumption` is what each leaf consumed during those seconds; leaves with processes
    (refs), runnable processes or CPU use become active even if `activate` was not
    called for them (with their current usage, 0 for a new lnode).
    """
    return (policy or DEFAULT_POLICY).cycle(tree, table, consumption, consts, elapsed)
