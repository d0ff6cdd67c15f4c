"""One scheduling cycle (pure: no OS, no clock, no database).

`run_cycle(tree, table, consumption, consts, elapsed)` takes the share tree, the
lnode table of the previous cycle, what every active leaf consumed during the
last `elapsed` seconds, and the constants, and returns the new lnode table.  The
daemon, the simulator and the tests all call it; there is no other copy of the
algorithm.  The policy sits behind `Policy`: it works out a `Decision` (what it decided:
usage, shares, background lnodes, its own state) from the steps below, and
`lnode_table` turns that into the new lnode table with the bookkeeping every policy
shares (rates, counts, group sums, the long-term charge, CPU seconds, the priority).
`UnicosPolicy` (the default, fairshare.core.policies.unicos) is the UNICOS / Kay-Lauder
policy, in the order of the guide and Kay-Lauder's paper (docs/architecture.md draws the
cycle around it), one named function per step:

1. `leaf_charges`: cost x resources x percent/100 per leaf (charge units), CPU ticks
   times the host's `speed` (a CPU-second on a host twice as fast counts as two, as
   SGAS scales host CPU time for a grid's usage; 1 by default).  CPU ticks
   are charged by nice (`Consumption.cpu_charged`, the guide's Nice Ticks: 150% at nice
   -20 down to 55% at 18); processes at the weakest nice are not charged: the daemon
   leaves them out of `Consumption`.
2. `machine_shares` then `apply_sharemin` (Kay-Lauder's machine share and the guide's
   sharemin; they need nothing from steps 3-4, so they run first): machine shares over
   the active lnodes (a group whose active leaves all have zero shares claims none),
   every active leaf at least `sharemin`.
3. `group_adjustment` (ADJGROUPS): a group whose share of its active siblings' charges is
   below mingshare x its due share has its leaves' charges scaled by
   actual / (mingshare x due), for the decayed usage only.
4. `decay_usage`: usage = usage x K + adjusted charges, K = 0.5 ** (elapsed / halflife)
   (`node_decay`: each node's own half-life where a group sets one, seed 004 2.2.2.4);
   an active leaf keeps at least USAGE_FLOOR, so m^2 / usage is finite and a group's
   usage (the sum of its leaves') is never 0.
5. `near_future_shares` (`effective_shares`, fairshare.core.split): the Kay-Lauder near-future
   proportion m^2 / usage.  With ADJGROUPS it is applied *hierarchically*: each group's
   e_share is split among its children that want CPU in proportion to m_child^2 /
   usage_child (usage of the child's subtree), so a logged-in but idle child leaves its
   part to its siblings, not to other organisations, and the paper's Table I gives
   organisation B half the machine.  Without ADJGROUPS it is Kay-Lauder's *flat model*:
   one split over all leaves, every user competing by its m_share whatever its group
   (Table I: B2 settles at 0.05 / 0.55 = 9.1%).  At equilibrium every demanding lnode
   gets its *due share*: its m_share renormalised over the demanding siblings at every
   level (flat: over all demanding leaves).  Where an idle sibling's share goes, in
   proportion to the others' shares or evenly, is `Consts.idleshare` (fairshare.core.split).
   Edge effects: no lnode gets more than `limit` x its due share, `limit` being
   Kay-Lauder's K5 (`Consts.k5`, 2 by default) without LIMSHARE and maxushare with it
   (the guide's 4.6.1.4: -X "defines the maximum effective share for an individual
   user"; LIMSHARE is UNICOS's form of the edge-effect limit); the excess goes to its
   siblings (exact water-filling), and, as in the paper's Figure 4, the usage of an
   lnode that was capped is raised so that m^2 / usage gives exactly the capped value
   among its siblings (`raise_usage`; a raised leaf also raises its groups' usage, as
   in the paper).  LIMSHARE also keeps e_share at least due / maxushare
   (`limshare_band`; usage is not lowered for it), so a user with very high past usage
   is not locked out (Kay-Lauder's marooning).  An active lnode that wants no CPU is
   given what it would get if it alone started, so an enforcer can set its weight before it runs.
   MAXUSAGE (`background_leaves`, after step 4, which every policy applies): a leaf
   whose usage reaches maxusage is a background lnode; so is a leaf with zero shares
   (Idle): e_share 0, they run only on CPU nobody else wants.
6. `priority`: Kay-Lauder's usage x nrun / m_share^2, and `near_future`: the flat
   Kay-Lauder proportion m^2 / usage over the demanding leaves (shrview's Pri), shown by
   the displays; so are the due shares of step 5 (`LnodeTable.due`).

Step 5's water-fill for one sibling set alone, `fill_ratio`, also answers the inverse
question shrinfo asks (fairshare.core.fair): at what usage an lnode gets its due part.

NOSHARE and NOSCHED concern enforcement (the daemon's); the cycle accounts as usual.

All arithmetic is over numpy arrays with no loop over nodes: sibling sums are one
bincount over all nodes, products down the tree one step per level (nodes are numbered
breadth first, so each level is a contiguous slice), subtree sums one matrix product on
small trees and one reduceat per level on large ones.  What depends only on which
lnodes exist and which want CPU (m_share, due shares) is memoised on the tree's index,
one `Memo` per result, owned by the module that computes it (fairshare.core.index),
since it changes when processes come and go, not every cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from fairshare.core.consts import LIMSHARE, TICKS_PER_SECOND, Consts, decay
from fairshare.core.fair import SplitFigures
from fairshare.core.grid import GridView
from fairshare.core.index import SMALL_TREE, Memo, TreeIndex, build_index
from fairshare.core.lnode import LnodeTable, NodeState
from fairshare.core.split import even_targets, flat_index, machine_shares, to_tree
from fairshare.core.tree import ShareTree, tree_index

#: Usage below this (charge units) counts as this in m^2 / usage, so nothing divides by 0.
USAGE_FLOOR = 1e-9
#: Priority shown for lnodes with no machine share (they run only on idle CPU).
PRIORITY_MAX = 1e30

#: What the cycle memoises per tree index (fairshare.core.index.Memo): the active
#: lnodes and their machine shares; the ADJGROUPS groups and due ratios; the due shares
#: and the edge and LIMSHARE bounds.
_LNODES: Memo[tuple[np.ndarray, np.ndarray]] = Memo("active lnodes and m_share")
_ADJ: Memo[tuple[np.ndarray, np.ndarray]] = Memo("ADJGROUPS groups and due ratios")
_DUE: Memo[tuple] = Memo("due shares and bounds")


@dataclass
class Consumption:
    """What each leaf consumed during one cycle (arrays over tree nodes; non-leaves 0).

    cpu: CPU seconds; bio, sio, syscalls, tty: operation counts; mem: MiB-seconds of
    resident memory; nrun: runnable processes at sample time; refs: processes attached;
    cpu_charged: CPU seconds as charged, each process's weighted by its nice's tick rate
    (fairshare.core.nicetables.tick_rates), or None to charge `cpu` as it is (nice 0's rate).
    want: CPU seconds the leaf's processes would have used unconstrained, where the
    collector knows it (the time they were runnable; the simulator's demand), NaN for a
    leaf where it does not, None for all (fairshare.core.delivery estimates those);
    cpus: the machine's CPUs (0: not given), for the fair target and the CPU delivered.
    grid: what the grid changes in the split (fairshare.core.grid: the other sites'
    usage where an entry's scope is global, pooled subtrees), or None: nothing.
    """

    cpu: np.ndarray
    bio: np.ndarray
    sio: np.ndarray
    syscalls: np.ndarray
    mem: np.ndarray
    tty: np.ndarray
    nrun: np.ndarray
    refs: np.ndarray
    cpu_charged: np.ndarray | None = None
    want: np.ndarray | None = None
    cpus: float = 0.0
    grid: GridView | None = None

    @classmethod
    def zeros(cls, n: int) -> Consumption:
        """An all-zero consumption over `n` nodes."""
        f = [np.zeros(n) for _ in range(6)]
        return cls(*f, nrun=np.zeros(n, dtype=np.int64), refs=np.zeros(n, dtype=np.int64))


@dataclass(frozen=True)
class Decision:
    """What a policy decided in one cycle (`Policy.cycle`), from which `lnode_table`
    builds the new lnode table with the bookkeeping every policy shares.

    Arrays over the tree's nodes.  active: the lnodes (`cycle_lnodes`); m_share: their
    machine shares after sharemin; charges: per leaf, what the cycle charged (charge
    units; the usage and the charge rate grow by it); usage: per leaf, the decayed usage
    after the charges and any raise (charge units, 0 off the active leaves); k: the
    cycle's decay factor (fairshare.core.consts.decay); e_share: the effective shares
    (fractions of the machine); background: the background leaves (`background_leaves`).

    What a policy may leave out: adj, the ADJGROUPS factors (None: no adjustment, 1); due
    and pri, the due shares (per node) and the near-future proportions (per leaf),
    LnodeTable.due and .pri (None: the policy has none, 0); billed: per leaf, what the
    long-term charge grows by (None: `charges`); group_usage: the usage per node with
    each group's own (None: a group's is the sum of its leaves'); demanding: the leaves
    counted as demanding CPU (None: every leaf that wants CPU, background ones
    included); priority: what the priority weighs, "usage" for Kay-Lauder's usage x
    nrun / m_share^2, "e_share" for the terminator's nrun / e_share^2; state: the
    policy's own state for the next cycle (LnodeTable.policy_state; None: it keeps none).
    """

    active: np.ndarray
    m_share: np.ndarray
    charges: np.ndarray
    usage: np.ndarray
    k: float | np.ndarray  # one number, or one per node where nodes set their own half-life
    e_share: np.ndarray
    background: np.ndarray
    adj: np.ndarray | None = None
    due: np.ndarray | None = None
    pri: np.ndarray | None = None
    billed: np.ndarray | None = None
    group_usage: np.ndarray | None = None
    demanding: np.ndarray | None = None
    priority: Literal["usage", "e_share"] = "usage"
    state: NodeState | None = None


class Policy(Protocol):
    """A fair-share policy: one cycle from the old lnode table to the new one, given what
    the leaves consumed during the last `elapsed` seconds.  A policy works out what it
    decides (a `Decision`: shares, usage, background lnodes, its own state) with the
    steps below and returns `lnode_table` of it, which does the bookkeeping they share.

    `fair_usage` answers the question shrinfo asks of the policy: the usage (charge
    units) at which lnode `node` of `figures` would get its due part as this policy
    splits the machine under `consts` (fairshare.core.fair; None when there is none)."""

    name: str

    def cycle(
        self,
        tree: ShareTree,
        table: LnodeTable,
        consumption: Consumption,
        consts: Consts,
        elapsed: float,
    ) -> LnodeTable: ...

    def fair_usage(self, figures: SplitFigures, node: int, consts: Consts) -> float | None: ...


# -- the steps -------------------------------------------------------------------------


def leaf_charges(consumption: Consumption, consts: Consts) -> np.ndarray:
    """Charges per node for the cycle (charge units; zero where nothing was consumed)."""
    c = consumption
    cpu = c.cpu if c.cpu_charged is None else c.cpu_charged
    total = consts.cost_tick * TICKS_PER_SECOND * consts.speed * cpu
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
    fair: np.ndarray | None = None,
) -> np.ndarray:
    """ADJGROUPS: the factor each node's charges are scaled by (1 = none), cumulative.

    Top-down over active groups: actual = the group's charges / its active siblings'
    charges; due = its m_share / its active siblings' m_share; where actual < mingshare x
    due the charges below are scaled by actual / (mingshare x due).  A node's factor is
    the product of its own and its ancestors' (Kay-Lauder Figure 5, K6 = mingshare).

    With `fair` (each node's fair target, fairshare.core.delivery, as the last cycle
    left it), a group is due no more than its fair target over its siblings': one whose
    members want less than its share is not deprived when it gets what they want, and
    its charges are not scaled down (which raised its e_share, and with it the weight
    of the group above, whose busy members then took the rest from its siblings).
    """
    key = (m.tobytes(), active.tobytes(), kinds_group.tobytes(), mingshare)
    hit = _ADJ.get(idx, key)
    if hit is None:
        m_act = m * active
        sib_m = idx.sibling_sum(m_act)
        groups = active & kinds_group & (sib_m > 0)
        due = np.divide(m_act, sib_m, out=np.zeros(idx.n), where=groups) * mingshare
        hit = _ADJ.put(idx, (groups, due), key)
    groups, due = hit
    if fair is not None:
        f = fair * active
        sib_f = idx.sibling_sum(f)
        known = groups & (sib_f > 0)
        due = np.where(known, np.minimum(due, f / np.where(known, sib_f, 1.0) * mingshare), due)
    sub = idx.subtree_sum(charges) * active
    sib_c = idx.sibling_sum(sub)
    actual = np.divide(sub, sib_c, out=np.zeros(idx.n), where=sib_c > 0)
    low = groups & (sib_c > 0) & (actual < due)
    own = np.divide(actual, due, out=np.ones(idx.n), where=low)
    return idx.down_product(own)


def node_decay(tree: ShareTree, elapsed: float, consts: Consts) -> float | np.ndarray:
    """K over `elapsed` seconds: 0.5 ** (elapsed / halflife), one number when every node
    decays with the global half-life (shradmin -K), else one per node with each node's
    own (`ShareTree.halflives`: a group's for its subtree, seed 004's 2.2.2.4)."""
    if not tree.own_halflives:
        return decay(elapsed, consts.halflife)
    return decay(elapsed, tree.halflives(consts.halflife))


def decay_usage(usage: np.ndarray, charges: np.ndarray, k: float | np.ndarray) -> np.ndarray:
    """usage x K + charges (charge units), at least USAGE_FLOOR."""
    return np.maximum(usage * k + charges, USAGE_FLOOR)


def background_leaves(
    leaves: np.ndarray, usage: np.ndarray, m: np.ndarray, maxusage: float
) -> np.ndarray:
    """MAXUSAGE and Idle: the `leaves` whose usage (charge units, after decay) reached
    `maxusage`, or that have no machine share `m` (zero shares): background lnodes, with
    e_share 0, that run only on CPU nobody else wants."""
    return leaves & ((usage >= maxusage) | (m <= 0))


@dataclass
class Shares:
    """What `effective_shares` returns (arrays over nodes, fractions of the machine).

    e_share: effective share (demanding nodes sum to their parent's; idle active nodes get
    what they would get if they alone started to run); due: the due share the edge and
    LIMSHARE bounds refer to; raise_: the factor by which each capped node's usage must
    grow (Figure 4; 1 = unchanged), realised on the leaves by `raise_usage`.
    """

    e_share: np.ndarray
    due: np.ndarray
    raise_: np.ndarray


def limshare_band(consts: Consts) -> tuple[float, float]:
    """(floor, limit): every demanding lnode's e_share is kept between floor x and limit x
    its due share.  With LIMSHARE: 1 / maxushare and maxushare (the guide's 4.6.1.4:
    maxushare is the ceiling); without: 0 and Kay-Lauder's K5 (`Consts.k5`, edge effects
    only)."""
    if consts.flags & LIMSHARE:
        return 1.0 / consts.maxushare, consts.maxushare
    return 0.0, consts.k5


def effective_shares(
    idx: TreeIndex,
    m: np.ndarray,
    usage: np.ndarray,
    active: np.ndarray,
    demand: np.ndarray,
    limit: float,
    floor: float = 0.0,
) -> Shares:
    """The hierarchical Kay-Lauder near-future proportion with edge effects and limits.

    `usage` is per node (groups: their subtree's, leaves at least USAGE_FLOOR); `demand`
    marks nodes with a leaf below that wants CPU (and has shares, and is not background);
    `limit` is the largest multiple of its due share any node may get (K5, or maxushare
    with LIMSHARE), `floor` the smallest (1 / maxushare with LIMSHARE, else 0).

    Each node's local proportion (its m^2/usage over its demanding siblings') and due
    ratio (its m_share over theirs) are computed for all nodes at once; e_share is then
    multiplied down level by level, water-filling only the levels in which a node would
    leave the band floor x .. limit x its due share.
    """
    n = idx.n
    idle, any_idle, due, cap, low = _due_shares(idx, m, active, demand, limit, floor)
    w_all = m * m / np.maximum(usage, USAGE_FLOOR)
    w = w_all * demand
    W = idx.sibling_sum(w)
    er = np.divide(w, W, out=np.zeros(n), where=W > 0)
    if any_idle:
        # Active nodes that did not want CPU: what they would get if they alone started.
        er = np.divide(w_all, W + w_all, out=er, where=idle)
    e_share = er
    e_share[0] = 1.0
    raise_ = np.ones(n)
    p = idx.parent0
    for k in range(1, len(idx.bounds)):
        s, e = idx.bounds[k]
        prospect = ek = e_share[s:e] * e_share[p[s:e]]
        capk, lowk, dem = cap[s:e], low[s:e], demand[s:e]
        out = ((ek > capk) | (ek < lowk)) & dem
        if np.count_nonzero(out):
            ek, ratio, capped = _water_fill_level(idx, k, e_share, w[s:e], lowk, capk, dem)
            # Figure 4: raise usage so that m^2/usage yields the capped value exactly.
            f = np.divide(ratio * w[s:e], limit * due[s:e], out=np.ones(e - s), where=capped)
            raise_[s:e] = np.maximum(f, 1.0)
        if any_idle:
            bounded = np.clip(prospect, floor * due[s:e], limit * due[s:e])
            ek = np.where(idle[s:e], bounded, ek)
        e_share[s:e] = ek
    return Shares(e_share=e_share, due=due, raise_=raise_)


def near_future_shares(
    idx: TreeIndex,
    m: np.ndarray,
    usage: np.ndarray,
    active: np.ndarray,
    demand: np.ndarray,
    limit: float,
    floor: float = 0.0,
    *,
    flat: bool = False,
    even: bool = False,
) -> Shares:
    """`effective_shares` split as the constants say (fairshare.core.split; same arguments).

    Group by group, or with `flat` (ADJGROUPS off: Kay-Lauder's flat model) over all
    leaves at once, every leaf competing by its m_share; then a group's e_share and due
    share are its leaves' sums, and only leaves have their usage raised.  With `even`
    (idleshare even) an idle sibling's share goes to the demanding ones evenly.
    """
    if not flat:
        target = even_targets(idx, m, active, demand) if even else m
        return effective_shares(idx, target, usage, active, demand, limit, floor)
    fidx, nodes = flat_index(idx)
    fm, fa, fd = m[nodes], active[nodes], demand[nodes]
    if even:
        fm = even_targets(fidx, fm, fa, fd)
    sh = effective_shares(fidx, fm, usage[nodes], fa, fd, limit, floor)
    e_share, due = to_tree(idx, nodes, np.array((sh.e_share, sh.due)), demand)
    raise_ = np.ones(idx.n)
    raise_[nodes[1:]] = sh.raise_[1:]
    return Shares(e_share=e_share, due=due, raise_=raise_)


def _due_shares(idx: TreeIndex, m, active, demand, limit, floor) -> tuple:
    """(idle nodes, any idle, due share, upper bound, lower bound) for `effective_shares`,
    memoised.

    The due share is m_share renormalised over the demanding siblings at every level
    (for an idle node: over them and itself); the bounds are limit x due and floor x due
    (widened by a rounding margin).
    """
    key = (m.tobytes(), active.tobytes(), demand.tobytes(), limit, floor)
    hit = _DUE.get(idx, key)
    if hit is None:
        md = m * demand
        M = idx.sibling_sum(md)
        dr = np.divide(md, M, out=np.zeros(idx.n), where=M > 0)
        idle = active & ~demand & (m > 0)
        any_idle = np.count_nonzero(idle) > 0
        if any_idle:
            dr = np.divide(m, M + m, out=dr, where=idle)
        due = idx.down_product(dr)
        cap, low = limit * (1 + 1e-12) * due, floor * (1 - 1e-12) * due
        hit = _DUE.put(idx, (idle, any_idle, due, cap, low), key)
    idle, any_idle, due, cap, low = hit
    return idle, any_idle, due.copy(), cap, low


#: Bisection steps of `_water_fill_level` on log t when its running sums misplace t.
_FILL_STEPS = 24


def _water_fill_level(idx: TreeIndex, k: int, e_share, w, low, cap, demand):
    """Level k's e_share when some demanding nodes leave their band: (e_share, ratio, capped).

    Within each sibling set every demanding node i gets clip(t x w_i, low_i, cap_i), with
    the set's t (e_share per unit of w) chosen so that the set sums to its parent's
    e_share; the others get 0.  The sum is piecewise linear and non-decreasing in t, with
    a breakpoint where a node leaves its floor (t = low_i / w_i) and where it reaches its
    cap (cap_i / w_i).  `_crossing` sorts every set's breakpoints at once and finds the
    segment where the sum crosses the parent's e_share, checked by summing at its ends (where
    weights of very different sizes round the running sums, or where the caps cannot fill
    a set, bisection on log t finds it instead); t is then solved exactly from the nodes
    that are free, floored and capped in it (repeated while that changes which they are).
    `ratio` is each node's t; `capped` marks the nodes held at their cap.
    """
    ps, pe = idx.bounds[k - 1]
    pp, nsets = idx.ppos[k], pe - ps
    parent = e_share[ps:pe]
    pos = demand & (w > 0)
    wd = np.where(pos, w, 0.0)
    lo, hi = np.where(pos, low, 0.0), np.where(pos, cap, 0.0)

    def per_set(values):
        return np.bincount(pp, weights=values, minlength=nsets)

    W = per_set(wd)
    ok = W > 0

    def short(tset):  # the sum at t, per set, falls short of the parent's e_share
        return per_set(np.clip(tset[pp] * wd, lo, hi)) < parent

    # On a small level the sorted breakpoints give the bracket at once; a large level,
    # or a bracket the running sums misplaced (weights of very different sizes round
    # them), is bracketed by bisection on log t between every node's breakpoints, whose
    # cost per node is lower there than sorting's.
    small = pp.size <= SMALL_TREE
    if small:
        below, above = _crossing(np.flatnonzero(pos), pp, nsets, parent, wd, lo, hi)
    if not small or (ok & ((~short(below) & (below > 0)) | short(above))).any():
        t0 = np.divide(parent, W, out=np.ones(nsets), where=ok)[pp]
        hi_t = np.divide(hi, wd, out=t0.copy(), where=pos)
        lo_t = np.divide(lo, wd, out=t0.copy(), where=pos & (lo > 0))
        a, b = np.zeros(nsets), np.zeros(nsets)
        a[idx.owners[k]] = np.log(np.minimum.reduceat(np.minimum(lo_t, hi_t), idx.firsts[k])) - 1
        b[idx.owners[k]] = np.log(np.maximum.reduceat(np.maximum(hi_t, t0), idx.firsts[k])) + 1
        for _ in range(_FILL_STEPS):
            mid = (a + b) / 2
            is_short = short(np.exp(mid))
            a, b = np.where(is_short, mid, a), np.where(is_short, b, mid)
        below, above = np.exp(a), np.exp(b)
    t = ((below + above) / 2)[pp]  # inside the segment: its nodes' state is exact
    state = None
    for _ in range(20):  # one round in practice
        capped = pos & (t * wd >= hi)
        floored = pos & ~capped & (t * wd <= lo)
        new = (capped.tobytes(), floored.tobytes())
        if new == state:
            break
        state = new
        free = pos & ~capped & ~floored
        fixed = per_set(np.where(capped, hi, 0.0) + np.where(floored, lo, 0.0))
        wfree = per_set(np.where(free, wd, 0.0))
        sol = np.divide(parent - fixed, wfree, out=np.zeros(nsets), where=ok & (wfree > 0))
        t = np.where((wfree > 0)[pp], np.maximum(sol, 0.0)[pp], t)
        if (sol < 0).any():
            # The bounds alone fill a set (caps summing to its parent, up to rounding):
            # its free nodes get nothing, and the state that says so is kept, not
            # re-derived from a t of 0 (which would release every capped node).
            break
    ek = np.where(capped, hi, np.where(floored, lo, np.clip(t * wd, lo, hi)))
    return ek, t, capped


def fill_ratio(w: np.ndarray, low: np.ndarray, cap: np.ndarray, total: float) -> float:
    """One sibling set's water-fill: the t (share per unit of weight) at which the set's
    shares clip(t x w_i, low_i, cap_i) sum to `total`, as `_water_fill_level` finds it
    for a set whose parent's share is `total` (w > 0; sum(low) <= total <= sum(cap))."""
    n = len(w)
    parent = np.concatenate(([-1], np.zeros(n, dtype=np.int64)))
    top = np.arange(n + 1) == 0
    star = build_index([np.zeros(1, np.int64), np.arange(1, n + 1)], parent, ~top, ~top, top)
    e_share = np.where(top, total, 0.0)
    _ek, t, _capped = _water_fill_level(star, 1, e_share, w, low, cap, np.ones(n, dtype=bool))
    return float(t[0])


def _crossing(nodes, pp, nsets: int, parent, wd, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """Per sibling set, the breakpoints (below, above) between which the set's sum of
    clip(t x w, lo, hi) over `nodes` crosses `parent` (below 0 when the floors fill the
    set; both the last when the caps cannot).  The sum at each breakpoint comes from
    running sums of what the breakpoints change: a node leaving its floor takes lo off
    the constant part and adds w to the slope, a node reaching its cap does the reverse."""
    below, above = np.zeros(nsets), np.ones(nsets)
    if nodes.size == 0:
        return below, above
    w, low, cap, sets = wd[nodes], lo[nodes], hi[nodes], pp[nodes]
    bset = np.concatenate((sets, sets))
    bt = np.concatenate((low / w, cap / w))
    order = np.lexsort((bt, bset))
    bset, bt = bset[order], bt[order]
    const = np.bincount(sets, weights=low, minlength=nsets)[bset]
    const += _set_cumsum(np.concatenate((-low, cap))[order], bset, nsets)
    slope = _set_cumsum(np.concatenate((w, -w))[order], bset, nsets)
    short = const + bt * slope < parent[bset]  # the sum at the breakpoint falls short
    before = np.bincount(bset, weights=short, minlength=nsets).astype(np.int64)
    count = np.bincount(bset, minlength=nsets)
    start = np.cumsum(count) - count
    has = count > 0
    at = np.minimum(start + before, start + count - 1)[has]  # the first not short
    b = before[has]
    below[has] = np.where(b > 0, bt[np.maximum(at - 1, start[has])], 0.0)
    above[has] = bt[at]
    return below, above


def _set_cumsum(values: np.ndarray, sets: np.ndarray, nsets: int) -> np.ndarray:
    """Running sums of `values` within each run of equal `sets` (sorted by set)."""
    count = np.bincount(sets, minlength=nsets)
    total = np.cumsum(values)
    before = np.concatenate(([0.0], total))[np.cumsum(count) - count]  # sums of earlier sets
    return total - before[sets]


def raise_usage(idx: TreeIndex, usage: np.ndarray, raise_: np.ndarray) -> np.ndarray:
    """Leaf usage after the Figure 4 raise (charge units; a new array).

    `usage` is per leaf (groups 0), `raise_` the local factor of every capped node.  A
    capped leaf's usage is multiplied by its factor; a capped group's leaves are scaled
    together so that the group's usage becomes its old usage times its factor, deepest
    groups first, so that every capped node ends with exactly its target usage and the
    proportions among its children are kept.
    """
    out = usage * np.where(idx.leaf, raise_, 1.0)
    groups = ~idx.leaf & (raise_ > 1.0)
    if not np.count_nonzero(groups):
        return out
    target = idx.subtree_sum(usage) * raise_
    for k in range(len(idx.bounds) - 1, 0, -1):
        s, e = idx.bounds[k]
        sel = groups[s:e]
        if not sel.any():
            continue
        factor = np.ones(idx.n)
        factor[s:e] = np.divide(target[s:e], idx.subtree_sum(out)[s:e], out=factor[s:e], where=sel)
        out *= idx.down_product(factor)
    return out


def priority(usage: np.ndarray, nrun: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Kay-Lauder priority usage x nrun / m_share^2 (PRIORITY_MAX where m_share is 0)."""
    p = np.full(len(m), PRIORITY_MAX)
    ok = m > 0
    np.divide(usage * nrun, m * m, out=p, where=ok)
    return np.minimum(p, PRIORITY_MAX)


def near_future(usage: np.ndarray, m: np.ndarray, demanding: np.ndarray) -> np.ndarray:
    """The Kay-Lauder near-future proportion of each `demanding` leaf (others, groups
    included, 0): its m^2 / usage over the sum of that over all of them (fractions
    summing to 1, or all 0).  `usage` is per leaf (charge units, after the Figure 4
    raise)."""
    w = np.zeros(len(m))
    np.divide(m * m, np.maximum(usage, USAGE_FLOOR), out=w, where=demanding)
    total = float(w.sum())
    if total > 0:
        w /= total
    return w


def _lnodes_and_shares(idx: TreeIndex, shares, leaves, sharemin, even=False) -> tuple:
    """(active nodes, m_share after sharemin) for the active `leaves`, memoised.

    Zero-share leaves (Idle) have lnodes but claim no share: groups holding only them do
    not take machine share from their siblings.
    """
    key = (leaves.tobytes(), sharemin, even)
    hit = _LNODES.get(idx, key)
    if hit is None:
        active, holders = idx.subtree_sum(np.array((leaves, leaves & idx.has_shares))) > 0
        active[0] = True
        m = machine_shares(idx, shares, holders, even)
        m = apply_sharemin(idx, m, leaves, sharemin)
        hit = _LNODES.put(idx, (active, m), key)
    return hit[0].copy(), hit[1].copy()


def cycle_lnodes(
    tree: ShareTree, table: LnodeTable, c: Consumption, consts: Consts, even: bool = False
) -> tuple[TreeIndex, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The lnodes of this cycle, where every policy starts: (the tree's index, the leaves
    that want CPU (runnable processes or CPU used), the leaf lnodes (active before, with
    processes, or wanting CPU), the active nodes (those leaves and their groups), the
    machine shares after sharemin; `even`: idle siblings' shares split evenly)."""
    idx = tree_index(tree)
    wants = (c.nrun > 0) | (c.cpu > 0)
    leaves = idx.leaf & (table.active | (c.refs > 0) | wants)
    active, m = _lnodes_and_shares(idx, tree.shares, leaves, consts.sharemin, even)
    return idx, wants, leaves, active, m


def lnode_table(
    idx: TreeIndex, table: LnodeTable, c: Consumption, elapsed: float, d: Decision
) -> LnodeTable:
    """The new lnode table from what the policy decided (`d`) over a cycle of `elapsed`
    seconds of `c`, after `table`: the bookkeeping every policy shares (rates, counts,
    group sums, the long-term charge and CPU seconds, the priority), written once here.
    """
    leaves = idx.leaf & d.active
    demanding = leaves & ((c.nrun > 0) | (c.cpu > 0)) if d.demanding is None else d.demanding
    # Charges and consumption need no masking below: they are 0 off the leaves, and a
    # leaf with any is in `leaves`; the table's charge and cpu_seconds are kept for
    # leaves only, but its usage and rate hold sums on the groups too.
    rate = table.rate * (leaves * d.k)
    if elapsed > 0:
        rate += (1 - d.k) / elapsed * d.charges
    cpu_total = float(c.cpu.sum())
    cpu = c.cpu / cpu_total if cpu_total > 0 else np.zeros(idx.n)
    sums = idx.subtree_sum(np.array((d.usage, rate, demanding, c.refs, c.nrun, cpu)))
    sub_usage, rate, demand, refs, nrun, cpu = sums
    if d.priority == "e_share":  # the terminator's nrun / e_share^2
        prio = priority(np.ones(idx.n), nrun, d.e_share)
    else:  # Kay-Lauder's usage x nrun / m_share^2
        prio = priority(sub_usage, nrun, d.m_share)
    return LnodeTable(
        usage=sub_usage if d.group_usage is None else d.group_usage,
        stored=table.stored * (leaves * d.k),  # decays like usage (fairshare.core.lnode)
        charge=table.charge + (d.charges if d.billed is None else d.billed),
        charge_written=table.charge_written,
        cpu_seconds=table.cpu_seconds + c.cpu,
        cpu_written=table.cpu_written,
        rate=rate,
        active=d.active,
        demand=demand > 0,
        refs=refs.astype(np.int64),
        nrun=nrun.astype(np.int64),
        m_share=d.m_share,
        e_share=d.e_share,
        due=d.due,
        pri=d.pri,
        cpu=cpu,
        adj=np.ones(idx.n) if d.adj is None else np.where(d.active, d.adj, 1.0),
        priority=prio * d.active,
        background=d.background,
        parent=table.parent,
        policy_state=d.state,
    )
