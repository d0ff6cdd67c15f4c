"""Seed 004's fully hierarchical feedback design as a policy (pure: numpy in and out).

Everitt, Jones and Knesel (section 2.2.2) make every branch point of the share tree a
pair of blocks: a *share node*, the advocate that makes its node receive its share, and a
*share redistribution node*, the arbitrator that divides the node's share among its
children from their decayed usage.  Here every node below the root has a share node and
every group (and the root) a redistribution node:

- The root (Figure 2-10) has a redistribution node but no share node: its children's base
  share is always 1.  Leaves (Figure 2-11) have a share node but no redistribution node;
  their base share is the terminator's input: their effective share, the weight the
  enforcer gives the kernel, and their priority the terminator's nprocs / share^2.
- `redistribution` (`transient_shares`; every `Consts.feedback_period` seconds, 5 min
  by default, and at once when an lnode appears): the seed's equation 10 over each set of
  active siblings that hold shares, tshare = s x v x max(u / s) - u (v: shradmin
  --feedback-v, REACH = 2 by default; --feedback-form literal: the seed's max(u)), s their
  entitlement among them (shares over the set's shares), u their decayed usage, and
  tshare / sum(tshare) their transient shares.  The target is the point of the fair line
  (u / s the same for all) REACH times beyond the nearest one that dominates the present
  usage: siblings whose usages are in proportion to their shares get exactly their
  shares, one that has used less gets more, and the largest consumer keeps part of its
  parent's share (REACH > 1: it is not marooned).  Without usage it is the entitlement.
- `share_nodes` (every cycle): a share node's desired share d = its parent's base share
  x its transient share renormalised over its siblings that want CPU; `low_pass` filters
  x, the share of the machine's charges it received during the cycle, f <- f + K_c (x -
  f); the error is K_mu (d - f) / max(d, f) (relative, so every level and every size of
  share moves at the same pace; at most K_mu per cycle).  Its children's base share is d
  x exp(correction), where `correction` accumulates the errors: the seed subtracts the
  error from "the node's actual share", its output as it stands, which makes the share
  node an integral controller.  A constant error keeps moving the base share until the
  node receives what it is due, whatever the kernel makes of the weights (nice floors
  the enforcer cannot go below, nice's 1.25x steps, which the loop dithers between so
  that the average is right); `held_error` keeps a node whose processes already have a
  CPU each (and its siblings) from winding the correction up.  K_mu is per level
  (`Consts.feedback_kmu`, deeper levels the last): the seed wants it to grow with depth,
  so that parents give their children time to correct before they act themselves.

The policy keeps its state (`FeedbackState`: `transient`, `filtered`, `correction`,
`since`) in the lnode table (LnodeTable.policy_state), so the daemon and the simulator
carry it from cycle to cycle like usage.  A group's usage is its own decayed usage (what
its subtree was charged, decaying with the half-life), at least the sum of its active
leaves': a member that leaves takes its lnode but not its part of the group's usage, so
an organisation pays for a member's past consumption after the member stops (seed 004's
Figure 2-3 story).  What else it shares with unicos: the charges, the machine shares
(m_share, sharemin), usage decay, MAXUSAGE and zero shares (background lnodes).
ADJGROUPS, LIMSHARE and the edge effects (K5) are unicos's and play no part.

Charges: the long-term charge (the guide's Muse, shcharge) is billed at the guide's
prices, a weaker nice's cheaper CPU ticks included; usage and the share nodes count
every tick at its full cost.  A nice value is then no way to receive more than one's
share of the machine (under cgroup enforcement nice does not slow a user down against
the others, so a cheaper tick would be a pure gift): this is the NAVOCEANO lesson.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from fairshare.core import fair
from fairshare.core.consts import Consts
from fairshare.core.cycle import (
    USAGE_FLOOR,
    Consumption,
    Decision,
    background_leaves,
    cycle_lnodes,
    decay_usage,
    leaf_charges,
    lnode_table,
    node_decay,
)
from fairshare.core.index import Memo, TreeIndex
from fairshare.core.lnode import LnodeTable, NodeState
from fairshare.core.tree import ShareTree, tree_index

#: Equation 10's v by default (shradmin --feedback-v): how far beyond the fair line's
#: nearest dominating point the redistribution aims (> 1; the largest consumer keeps
#: (REACH - 1) / REACH of what an even split would give it when the others have used
#: nothing).
REACH = 2.0
#: The largest factor a share node's accumulated correction may reach either way: wide
#: enough to offset the nice enforcer's whole range (19 steps, 1.25 ** 19 = 69), bounded
#: so that a node that cannot use its share does not wind the integral up for ever.
MAX_CORRECTION = 100.0
_LOG_MAX = float(np.log(MAX_CORRECTION))
#: K_mu of every node for the gains last asked (`kmu_by_node`).
_KMU: Memo[np.ndarray] = Memo("feedback K_mu by node")
#: A leaf whose runnable processes had at least this part of a CPU each over the cycle
#: is saturated: more weight would give it nothing more.
SATURATED = 0.98


def sibling_max(idx: TreeIndex, values: np.ndarray) -> np.ndarray:
    """For every node, the largest of `values` over it and its siblings (root: its own)."""
    top = np.full(idx.n, -np.inf)
    for k in range(1, len(idx.bounds)):
        s, e = idx.bounds[k]
        top[idx.owner_nodes[k]] = np.maximum.reduceat(values[s:e], idx.firsts[k])
    out = top[idx.parent0]
    out[0] = values[0]
    return out


def transient_shares(
    idx: TreeIndex,
    m: np.ndarray,
    usage: np.ndarray,
    reach: float = REACH,
    form: str = "dominating",
) -> np.ndarray:
    """Each node's transient share among its active siblings that hold shares (fraction;
    0 elsewhere, the root 1): seed 004's equation 10, tshare = s x [v x max] - u, with
    v = `reach`.

    `m` is the machine share over the active nodes (its ratios among siblings are the
    entitlements s), `usage` each node's decayed usage (charge units; a group's covers
    its subtree), without the USAGE_FLOOR of the leaves (0 for no usage).  `form` says
    what max is: "dominating", max(u / s), so that s x max is the nearest point of the
    fair line that dominates the usage and every tshare is positive for v > 1; or
    "literal", the seed's max(u), the largest usage, whose target may fall short of a
    sibling with a small entitlement: its tshare, negative, counts as 0 (it gets
    nothing until the others catch up), and when every one is 0 the entitlements rule.
    """
    holders = m > 0
    msum = idx.sibling_sum(np.where(holders, m, 0.0))
    s = np.divide(m, msum, out=np.zeros(idx.n), where=holders & (msum > 0))
    u = np.where(holders, np.maximum(usage, 0.0), 0.0)
    if form == "literal":
        top = sibling_max(idx, u)
        raw = np.where(top > 0, np.maximum(s * reach * top - u, 0.0), s) * holders
        total = idx.sibling_sum(raw)
        raw = np.where(total > 0, raw, s * holders)  # all at or past the target
    else:
        ratio = np.divide(u, s, out=np.zeros(idx.n), where=s > 0)
        top = sibling_max(idx, ratio)
        raw = np.where(top > 0, s * reach * top - u, s) * holders
    total = idx.sibling_sum(raw)
    out = np.divide(raw, total, out=np.zeros(idx.n), where=holders & (total > 0))
    out[0] = 1.0
    return out


def demanding_shares(
    idx: TreeIndex, transient: np.ndarray, demand: np.ndarray, idle: np.ndarray
) -> np.ndarray:
    """Transient shares renormalised over the siblings that want CPU (fractions; an idle
    active node gets what it would if it alone started: t / (demanding siblings' + t))."""
    td = transient * demand
    total = idx.sibling_sum(td)
    out = np.divide(td, total, out=np.zeros(idx.n), where=demand & (total > 0))
    out = np.divide(transient, total + transient, out=out, where=idle & (transient > 0))
    out[0] = 1.0
    return out


def centred(
    idx: TreeIndex, correction: np.ndarray, demand: np.ndarray, active: np.ndarray
) -> np.ndarray:
    """The corrections (natural logs) less their mean over each set of demanding
    siblings, within +-log(MAX_CORRECTION), 0 on inactive nodes.

    A correction common to all the siblings tilts nothing (their base shares are
    renormalised over the set), so it is taken out: what is left is bounded, and a lone
    child's correction stays 0 instead of winding up.
    """
    count = idx.sibling_sum(demand.astype(float))
    mean = np.divide(
        idx.sibling_sum(correction * demand), count, out=np.zeros(idx.n), where=count > 0
    )
    return np.clip(correction - mean, -_LOG_MAX, _LOG_MAX) * active


def held_error(idx: TreeIndex, error: np.ndarray, saturated: np.ndarray) -> np.ndarray:
    """The errors the share nodes integrate (anti-windup): a saturated node (its
    processes already have a CPU each) that receives less than it is due is held
    (no positive error), and so are its siblings' surpluses (no negative error in a
    sibling set holding one), since they only take what it cannot use.  Without
    this a user with one process on a machine of many CPUs would wind its
    correction up to MAX_CORRECTION and, starting more processes, shut its siblings
    out until the correction ran down."""
    short = saturated & (error > 0)
    beside = idx.sibling_sum(short.astype(float)) > 0
    return np.where(short | (beside & (error < 0)), 0.0, error)


def low_pass(filtered: np.ndarray, received: np.ndarray, kc: float, steps: float) -> np.ndarray:
    """The share node's filter after `steps` cycles (of delta) receiving `received`:
    f + (1 - (1 - K_c) ** steps) x (received - f) (fractions of the machine)."""
    alpha = 1.0 - (1.0 - kc) ** steps
    return filtered + alpha * (received - filtered)


def share_error(desired: np.ndarray, filtered: np.ndarray) -> np.ndarray:
    """(d - f) / max(d, f): the share node's relative error, in -1..1 (0 where both 0)."""
    top = np.maximum(desired, filtered)
    return np.divide(desired - filtered, top, out=np.zeros(len(top)), where=top > 0)


def kmu_by_node(tree: ShareTree, kmu: tuple[float, ...]) -> np.ndarray:
    """K_mu of every node from the gains by level (level 1 first; deeper levels the
    last; the root, which has no share node, 0).  Memoised on the tree's index."""
    idx = tree_index(tree)
    hit = _KMU.get(idx, kmu)
    if hit is None:
        gains = np.asarray(kmu, dtype=float)
        level = np.asarray(tree.level)
        out = gains[np.clip(level - 1, 0, len(gains) - 1)]
        out[level == 0] = 0.0
        hit = _KMU.put(idx, out, kmu)
    return hit


@dataclass
class FeedbackState(NodeState):
    """The feedback policy's state, carried by the lnode table from cycle to cycle
    (LnodeTable.policy_state); per node, 0 for an lnode just created:

    transient: the share redistribution node's transient share of the lnode among its
      active siblings (fraction; seed 004's equation 10, re-derived every period).
    filtered: the share node's low-pass filtered share of the machine's charges that
      the lnode received (fraction of the machine).
    correction: the share node's accumulated correction, as a natural log (0 = none).
    since: on groups and the root, seconds since their redistribution node last
      re-derived the children's transient shares.
    """

    transient: np.ndarray
    filtered: np.ndarray
    correction: np.ndarray
    since: np.ndarray

    @classmethod
    def of(cls, table: LnodeTable) -> FeedbackState:
        """`table`'s feedback state: every lnode's 0 when another policy (or none) ran."""
        state = table.policy_state
        return state if isinstance(state, cls) else cls.zeros(table.size)


def feedback_charges(c: Consumption, consts: Consts, leaves: np.ndarray):
    """(billed, charged) per leaf (charge units): billed at the guide's prices (a weaker
    nice's cheaper ticks) for the long-term charge; charged for usage and the share nodes
    on what was received, every tick at its full cost."""
    billed = leaf_charges(c, consts) * leaves
    if c.cpu_charged is None:
        return billed, billed
    return billed, leaf_charges(dataclasses.replace(c, cpu_charged=None), consts) * leaves


def redistribution(
    idx: TreeIndex,
    old: FeedbackState,
    m: np.ndarray,
    usage: np.ndarray,
    nleaves: np.ndarray,
    elapsed: float,
    consts: Consts,
) -> tuple[np.ndarray, float]:
    """The redistribution nodes: (transient shares, seconds since they were derived).

    Every `period` seconds, and at once for a new lnode (a holder of shares without a
    transient share), `transient_shares` from each node's `usage` less its `nleaves`
    active leaves' USAGE_FLOOR; between, the old ones on the nodes that hold shares.
    """
    holders = m > 0
    since = float(old.since[0]) + elapsed
    transient = old.transient * holders
    if since >= consts.feedback_period or np.count_nonzero(holders & (transient <= 0)):
        plain = np.maximum(usage - USAGE_FLOOR * nleaves, 0.0)  # without the floors
        transient = transient_shares(idx, m, plain, consts.feedback_v, consts.feedback_form)
        since = 0.0
    return transient, since


def share_nodes(
    tree: ShareTree,
    old: FeedbackState,
    was_demanding: np.ndarray,
    desired: np.ndarray,
    demand: np.ndarray,
    active: np.ndarray,
    received: np.ndarray,
    saturated: np.ndarray,
    elapsed: float,
    consts: Consts,
) -> tuple[np.ndarray, np.ndarray]:
    """The share nodes after the cycle: (filtered received shares, corrections).

    Each demanding node (not the root, which has none) filters the part of the
    machine's charges it `received` (charge units per node) and accumulates K_mu x its
    error against its `desired` share (fractions of the machine); `saturated` nodes are
    held (`held_error`).  A node that starts to demand starts filtered at its desired
    share; inactive nodes keep nothing.
    """
    idx = tree_index(tree)
    correction = old.correction * active
    filtered = np.where(demand & ~was_demanding, desired, old.filtered) * active
    total = float(received[0])
    if elapsed > 0 and total > 0:
        steps = elapsed / consts.delta
        seen = demand.copy()
        seen[0] = False  # the root has no share node
        fresh = low_pass(filtered, received / total, consts.feedback_kc, steps)
        filtered = np.where(seen, fresh, filtered)
        error = held_error(idx, share_error(desired, filtered), seen & saturated)
        gain = kmu_by_node(tree, consts.feedback_kmu) * steps
        correction = correction + np.where(seen, gain * error, 0.0)
        correction = centred(idx, correction, demand, active)
    return filtered, correction


def leaf_e_shares(
    idx: TreeIndex,
    base: np.ndarray,
    demand_leaf: np.ndarray,
    demand: np.ndarray,
    idle: np.ndarray,
) -> np.ndarray:
    """Effective shares from the base shares (fractions of the machine): the leaves'
    base shares over the demanding leaves' (groups: the sum of theirs below; idle
    lnodes: their own base share on that scale; 0 when no leaf demands)."""
    e_below = idx.subtree_sum(base * demand_leaf)
    scale = float(e_below[0])
    if scale <= 0:
        return np.zeros(idx.n)
    return np.where(demand, e_below, np.where(idle, base, 0.0)) / scale


def redistribution_level(f: fair.SplitFigures, x: int, others: np.ndarray) -> float | None:
    """The usage (charge units; a group's own) at which the redistribution gives x its
    due part among its demanding siblings `others`: its m_share over theirs and its own.

    By equation 10 (`transient_shares`) x's transient share over the demanding ones' is
    (s_x R - u_x) / sum over them of (s R - u), R = REACH x max(u / s), which is s_x over
    their sum of s exactly when u_x / s_x = the others' usage over their entitlement: so
    u_x = m_x x their usage / their m_share, usage without the leaves' USAGE_FLOOR (as
    the redistribution counts it).  None when x or its siblings hold no share.
    """
    idx = f.idx
    nleaves = idx.subtree_sum(idx.leaf & f.active)
    plain = np.maximum(f.usage - USAGE_FLOOR * nleaves, 0.0)
    mine, theirs = float(f.m_share[x]), sum(f.m_share[others].tolist())
    if mine <= 0 or theirs <= 0:
        return None
    return mine * sum(plain[others].tolist()) / theirs + USAGE_FLOOR * float(nleaves[x])


class FeedbackPolicy:
    """Seed 004's feedback-control hierarchy: share nodes and redistribution nodes."""

    name = "feedback"

    def cycle(
        self,
        tree: ShareTree,
        table: LnodeTable,
        consumption: Consumption,
        consts: Consts,
        elapsed: float,
    ) -> LnodeTable:
        """The lnode table after one cycle of `elapsed` seconds (see the module docstring)."""
        c = consumption
        idx, wants, leaves, active, m = cycle_lnodes(tree, table, c, consts)
        billed, charges = feedback_charges(c, consts, leaves)
        k = node_decay(tree, elapsed, consts)
        leaf_usage = decay_usage(table.usage, charges, k) * leaves
        background = background_leaves(leaves, leaf_usage, m, consts.maxusage)
        demand_leaf = leaves & wants & ~background
        # A leaf whose every runnable process had a whole CPU cannot receive more,
        # whatever its weight (nor a group whose demanding leaves all did).
        free_leaf = demand_leaf & (c.cpu < SATURATED * c.nrun * elapsed)
        sums = idx.subtree_sum(
            np.array((charges, leaf_usage, leaves, demand_leaf, charges * demand_leaf, free_leaf))
        )
        sub_charges, sub_usage, nleaves, ndemand, received, nfree = sums
        # A group's own decayed usage, at least its active leaves' (a newcomer brings its
        # own history); the leaves keep theirs.
        own = np.maximum(table.usage * k + sub_charges, sub_usage)
        usage = np.where(idx.leaf, leaf_usage, own) * active
        demand = ndemand > 0
        idle = active & ~demand & (m > 0)

        # The redistribution nodes set each share node's desired share (its transient
        # share of its parent's desired share); the corrections each has accumulated
        # tilt its base share among its siblings.
        old = FeedbackState.of(table)
        transient, since = redistribution(idx, old, m, usage, nleaves, elapsed, consts)
        desired = idx.down_product(demanding_shares(idx, transient, demand, idle))
        filtered, correction = share_nodes(
            tree, old, table.demand, desired, demand, active, received, nfree == 0, elapsed, consts
        )
        tilted = demanding_shares(idx, transient * np.exp(correction), demand, idle)
        e_share = leaf_e_shares(idx, idx.down_product(tilted), demand_leaf, demand, idle)
        groups = active & ~idx.leaf
        state = FeedbackState(
            transient=transient,
            filtered=filtered,
            correction=correction * active,
            since=np.where(groups, since, 0.0),
        )
        # Beside what every policy decides: the groups' own usage, the charge billed at
        # the guide's prices, demand without background lnodes, the priority on e_share
        # alone (the terminator's), and the controllers' state.
        decision = Decision(
            active=active,
            m_share=m,
            charges=charges,
            usage=leaf_usage,
            k=k,
            e_share=e_share * (active & ~background),
            background=background,
            due=desired * active,
            billed=billed,
            group_usage=usage,
            demanding=demand_leaf,
            priority="e_share",
            state=state,
        )
        return lnode_table(idx, table, c, elapsed, decision)

    def fair_usage(self, figures: fair.SplitFigures, node: int, consts: Consts) -> float | None:
        """The usage at which lnode `node` gets its due part (fairshare.core.fair): its
        `redistribution_level` among its demanding siblings, the share nodes' target."""
        return fair.fair_usage(figures, node, redistribution_level)
