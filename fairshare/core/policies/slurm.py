"""Slurm's classic fair-share factor (seed 002) as a policy (fairshare.core.sshare has the
figures: normalized shares S, normalized and effective usage U and UE, factor F).

The scheduling consequence (`slurm_e_shares`).  Slurm orders queued jobs by F; here F
must steer running CPU, through the kernel weights the enforcers derive from e_share.
Down the tree, each node's e_share is split among its children that want CPU in
proportion to S x F of each child (its own normalized shares and factor); a group's
members thus share what the group gets, as the share tree's hierarchy requires.  Why
this mapping (shradmin(8) says it for administrators, with what shrsim measures on the
example scenarios):

- S x F is the share still owed: an unused node weighs its whole S, one that used
  exactly its share S/2, so siblings at their shares keep the ratio of their shares.  F
  alone would give a 0.05-share user as much CPU as a 0.3-share one.
- It converges to the entitled shares: delivered CPU becomes usage, and among siblings
  w_i = S_i 2 ** (-U_i / S_i / d) keeps proportion with their usage only when their
  usage is in proportion to their shares, at every level.  The weight takes the
  normalized usage U, not Slurm's effective usage UE (which F, shown by shrview -ds
  and shrinfo, keeps): below the first level UE_i / S_i is the parent's UE_p / S_p,
  common to the siblings, plus U_i (1 - s_i) / (S_p s_i) with s_i the local share, so a
  sibling with a larger part of its group's shares settled above it (up to 6 points
  on three-level trees), away from the max-min allocation every policy must deliver.
  Between siblings U_i / S_i is (U_p / S_p) (u_i / s_i), u_i the local usage share:
  equal for all exactly when the usage follows the shares.
- The boost is bounded as Kay-Lauder's edge effects are (K5 = 2): against siblings at
  their share (F = 0.5), a newcomer (F = 1) weighs at most twice its share.
- The dampening factor keeps its meaning: a larger d weakens the effect of usage (as d
  grows, the split tends to the shares alone, with no memory of usage).
- Not one flat competition of all leaves by S x F, although Slurm's job queue is one
  queue: classic Slurm's normalized shares never pass an idle member's share to its
  siblings, so the flat order gave scenario 05's B2 9.1% instead of organisation B's half
  and scenario 04's organisation A 45% instead of half (the weakness Slurm's Fair Tree
  replaced it for); here the hierarchy keeps them at their entitlement.

The weights are computed as log2(S) - UE / (S d), shifted by the largest among the
siblings before exponentiating, so no factor underflowing to 0 (S tiny, usage large)
divides by zero.
"""

from __future__ import annotations

import numpy as np

from fairshare.core import fair
from fairshare.core.consts import Consts
from fairshare.core.cycle import (
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
from fairshare.core.lnode import LnodeTable
from fairshare.core.sshare import Sshare, share_ratios, sshare
from fairshare.core.tree import ShareTree

#: log2 of the largest weight ratio kept (2 ** 900 ~ 1e271): a sum over a million
#: siblings stays finite for an active node that does not run and would dwarf them.
_MAX_LOG2_RATIO = 900.0
#: The tree's share ratios (fairshare.core.sshare.share_ratios): its shares never change.
_RATIOS: Memo[tuple[np.ndarray, np.ndarray]] = Memo("slurm share ratios")


def slurm_e_shares(
    idx: TreeIndex,
    figures: Sshare,
    dampening: float,
    demand: np.ndarray,
    runnable: np.ndarray,
) -> np.ndarray:
    """e_share per node: each node's e_share split among its demanding children in
    proportion to S x 2 ** (-U / S / d), their S x F with the normalized usage U for the
    effective (see the module docstring; fractions of the machine; the root's 1).

    `demand` marks the leaves that want CPU, `runnable` the active leaves that may run
    (not background; a superset of `demand`).  A node with nothing demanding below but a
    runnable leaf gets what it would get if it alone started (w / (W + w) of its parent's,
    as under UNICOS), so an enforcer can set its weight before it runs; other nodes 0.
    """
    S, u = figures.normalized_shares, figures.normalized_usage
    below_d, below_r = idx.subtree_sum(np.array((demand, runnable))) > 0
    run = below_r & (S > 0)
    dem = below_d & run
    logw = np.full(idx.n, -np.inf)
    s = S[run]
    logw[run] = np.log2(s) - u[run] / (s * dampening)
    # The largest log2 weight among each node's demanding children (-inf if none).
    top = np.full(idx.n, -np.inf)
    logw_d = np.where(dem, logw, -np.inf)
    for k in range(1, len(idx.bounds)):
        s0, e0 = idx.bounds[k]
        if len(idx.firsts[k]):
            top[idx.owner_nodes[k]] = np.maximum.reduceat(logw_d[s0:e0], idx.firsts[k])
    shift = top[idx.parent0]
    shift = np.where(np.isfinite(shift), shift, logw)  # siblings that do not demand
    w = np.zeros(idx.n)
    w[run] = np.exp2(np.minimum(logw[run] - shift[run], _MAX_LOG2_RATIO))
    wd = w * dem
    W = idx.sibling_sum(wd)
    local = np.divide(wd, W, out=np.zeros(idx.n), where=dem)
    alone = run & ~dem
    local = np.divide(w, W + w, out=local, where=alone)
    return idx.down_product(local)


def factor_level(
    f: fair.SplitFigures, x: int, others: np.ndarray, dampening: float
) -> float | None:
    """The usage (charge units, x's subtree's) at which x's part of its parent's share,
    as `slurm_e_shares` splits it among x and its demanding siblings `others` by S x F,
    is its due part: its shares over theirs and its own (Slurm's S).  The fair-share
    factors follow from the usage (`sshare`: x's usage is its ancestors' and the total's
    too), so the level is found by bisection on the policy's own split, which gives x
    less the more it has used.  None when x holds no shares."""
    mine = float(f.local_shares[x])
    if mine <= 0:
        return None
    due = mine / (mine + sum(f.local_shares[others].tolist()))
    f, x = f.spine(x)  # the split down to x's siblings, without what lies below them
    local = f.local_shares
    ratios = (local, f.idx.down_product(local))
    demand = f.demanding.copy()
    demand[x] = True
    chain = f.chain(x)

    def part(u: float) -> float:  # x's part of its parent's share with usage u
        usage = f.usage.copy()
        usage[chain[1:]] += u - f.usage[x]
        usage[x] = u
        figures = sshare(f.idx, local, usage, dampening, None, ratios)
        e = slurm_e_shares(f.idx, figures, dampening, demand, demand)
        return float(e[x] / e[chain[1]]) if e[chain[1]] > 0 else 0.0

    return fair.bisect_level(part, due, max(float(f.usage[0]), 1.0))


class SlurmPolicy:
    """Slurm's classic fair-share factor steering running CPU (seed 002; see the module
    docstring).  Usage decays as under UNICOS (the same usage the UDB keeps); ADJGROUPS,
    LIMSHARE, sharemin's effect on e_share and the K5 edge effects are UNICOS's and do
    not apply (effective usage is Slurm's group mechanism); MAXUSAGE and zero shares make
    background lnodes as under UNICOS."""

    name = "slurm"

    def cycle(
        self,
        tree: ShareTree,
        table: LnodeTable,
        consumption: Consumption,
        consts: Consts,
        elapsed: float,
    ) -> LnodeTable:
        """The lnode table after one cycle of `elapsed` seconds (fairshare.core.cycle.Policy)."""
        c = consumption
        idx, wants, leaves, active, m = cycle_lnodes(tree, table, c, consts)
        ratios = _RATIOS.get(idx)
        if ratios is None:  # the tree's shares never change
            ratios = _RATIOS.put(idx, share_ratios(idx, tree.shares))

        charges = leaf_charges(c, consts) * leaves
        k = node_decay(tree, elapsed, consts)
        usage = decay_usage(table.usage, charges, k) * leaves
        background = background_leaves(leaves, usage, m, consts.maxusage)
        figures = sshare(idx, tree.shares, idx.subtree_sum(usage), consts.dampening, None, ratios)
        runnable = leaves & ~background
        e_share = slurm_e_shares(idx, figures, consts.dampening, runnable & wants, runnable)
        e_share *= active & ~background
        decision = Decision(
            active=active,
            m_share=m,
            charges=charges,
            usage=usage,
            k=k,
            e_share=e_share,
            background=background,
        )
        return lnode_table(idx, table, c, elapsed, decision)

    def fair_usage(self, figures: fair.SplitFigures, node: int, consts: Consts) -> float | None:
        """The usage at which lnode `node` gets its due part (fairshare.core.fair): its
        `factor_level` among its demanding siblings, under the dampening factor in force."""

        def level(f: fair.SplitFigures, x: int, others: np.ndarray) -> float | None:
            return factor_level(f, x, others, consts.dampening)

        return fair.fair_usage(figures, node, level)
