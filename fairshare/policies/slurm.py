"""Slurm's classic fair-share factor (seed 002) as a policy, and its sshare figures (pure).

The figures, per node of the share tree (arrays over nodes; fractions 0..1):

- normalized shares S: the node's shares over its siblings', multiplied down from the
  root over *every* node of the tree (Slurm's associations, whether or not they run);
- normalized usage U: the node's decayed usage (a group's: the sum below it) over the
  total usage;
- effective usage UE: UE = U at the first level below the root; below it
  UE = U + (UE_parent - U) x S_child / S_siblings (the local share ratio), so a member
  of a group that has used much inherits part of the group's usage;
- fair-share factor F = 2 ** (-UE / S / d), d the dampening factor (`Consts.dampening`,
  Slurm's FairShareDampeningFactor); F = 0 for a node with no shares.  F = 0.5 is a
  node that used exactly its share, above 0.5 less, below 0.5 more.

`sshare` computes them; it is the one computation behind the policy and the displays
(shrtree, shrinfo), which feed it the usage stored in the UDB whatever the policy.

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
- It converges to the entitled shares where Slurm's factor can tell: delivered CPU
  becomes usage, and among siblings w_i = S_i 2 ** (-UE_i / S_i / d) keeps proportion
  with their usage only when their usage is in proportion to their shares (at the
  first level exactly; below it, the parent's part of UE is common to the siblings and
  cancels, and siblings of equal shares settle exactly; a sibling with a larger part
  of its group's shares settles a little above it, the effective usage's doing).
- The boost is bounded as Kay-Lauder's edge effects are (K5 = 2): against siblings at
  their share (F = 0.5), a newcomer (F = 1) weighs at most twice its share.
- The dampening factor keeps its meaning: a larger d weakens the effect of usage (d ->
  infinity gives the static shares).
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

from dataclasses import dataclass

import numpy as np

from fairshare.consts import Consts, decay
from fairshare.cycle import (
    Consumption,
    TreeIndex,
    _lnodes_and_shares,
    decay_usage,
    leaf_charges,
    lnode_table,
    tree_index,
)
from fairshare.lnode import LnodeTable
from fairshare.tree import ShareTree

#: log2 of the largest weight ratio kept (2 ** 900 ~ 1e271): a sum over a million
#: siblings stays finite for an active node that does not run and would dwarf them.
_MAX_LOG2_RATIO = 900.0


@dataclass
class Sshare:
    """Slurm's sshare figures per node (arrays over tree nodes, fractions 0..1)."""

    normalized_shares: np.ndarray
    normalized_usage: np.ndarray
    effective_usage: np.ndarray
    fairshare_factor: np.ndarray


def share_ratios(idx: TreeIndex, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(local, S): each node's shares over its siblings' (all of them, whether active or
    not), and the normalized shares S, the product of `local` down from the root (the
    root's both 1).  Fractions 0..1; 0 where the siblings hold no shares."""
    shares = np.asarray(shares, dtype=float)
    sums = idx.sibling_sum(shares)
    local = np.divide(shares, sums, out=np.zeros(idx.n), where=sums > 0)
    local[0] = 1.0
    return local, idx.down_product(local)


def effective_usage(idx: TreeIndex, local: np.ndarray, norm_usage: np.ndarray) -> np.ndarray:
    """UE per node: U at levels 0 and 1, UE_parent's part by the local share ratio below.

    UE = U + (UE_parent - U) x local, level by level from level 2 down (the seed's
    formula; the first tier below the root keeps its actual usage).  A new array.
    """
    ue = np.array(norm_usage, dtype=float)
    p = idx.parent0
    for s, e in idx.bounds[2:]:
        u = ue[s:e]
        ue[s:e] = u + (ue[p[s:e]] - u) * local[s:e]
    return ue


def fairshare_factor(norm_shares: np.ndarray, eff_usage: np.ndarray, dampening: float):
    """F = 2 ** (-UE / S / d) per node; 0 where S is 0 (a node without shares)."""
    ok = norm_shares > 0
    x = np.divide(eff_usage, norm_shares * dampening, out=np.zeros(len(ok)), where=ok)
    return np.where(ok, np.exp2(-x), 0.0)


def sshare(
    idx: TreeIndex,
    shares: np.ndarray,
    usage: np.ndarray,
    dampening: float = 1.0,
    total: float | None = None,
    ratios: tuple[np.ndarray, np.ndarray] | None = None,
) -> Sshare:
    """Slurm's sshare figures for every node (see the module docstring).

    `shares` are the tree's allocated shares; `usage` the decayed usage per node in any
    unit (a group's: the sum over the leaves below it); `total` the usage U is a fraction
    of (default the root's, i.e. all of the tree's; 0 gives U = 0 everywhere); `ratios`
    the tree's `share_ratios`, when the caller keeps them.
    """
    local, norm_shares = ratios if ratios is not None else share_ratios(idx, shares)
    usage = np.asarray(usage, dtype=float)
    total = float(usage[0]) if total is None else float(total)
    norm_usage = usage / total if total > 0 else np.zeros(idx.n)
    ue = effective_usage(idx, local, norm_usage)
    return Sshare(
        normalized_shares=norm_shares,
        normalized_usage=norm_usage,
        effective_usage=ue,
        fairshare_factor=fairshare_factor(norm_shares, ue, dampening),
    )


def slurm_e_shares(
    idx: TreeIndex,
    figures: Sshare,
    dampening: float,
    demand: np.ndarray,
    runnable: np.ndarray,
) -> np.ndarray:
    """e_share per node: each node's e_share split among its demanding children in
    proportion to their S x F (fractions of the machine; the root's 1).

    `demand` marks the leaves that want CPU, `runnable` the active leaves that may run
    (not background; a superset of `demand`).  A node with nothing demanding below but a
    runnable leaf gets what it would get if it alone started (w / (W + w) of its parent's,
    as under UNICOS), so an enforcer can set its weight before it runs; other nodes 0.
    """
    S, ue = figures.normalized_shares, figures.effective_usage
    below_d, below_r = idx.subtree_sum(np.array((demand, runnable))) > 0
    run = below_r & (S > 0)
    dem = below_d & run
    logw = np.full(idx.n, -np.inf)
    s = S[run]
    logw[run] = np.log2(s) - ue[run] / (s * dampening)
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
        """The lnode table after one cycle of `elapsed` seconds (fairshare.cycle.Policy)."""
        idx = tree_index(tree)
        c = consumption
        wants = (c.nrun > 0) | (c.cpu > 0)
        leaves = idx.leaf & (table.active | (c.refs > 0) | wants)
        active, m = _lnodes_and_shares(idx, tree.shares, leaves, consts.sharemin)
        ratios = idx.memo.get("slurm_ratios")
        if ratios is None:  # the tree's shares never change
            ratios = idx.memo["slurm_ratios"] = share_ratios(idx, tree.shares)

        charges = leaf_charges(c, consts) * leaves
        k = decay(elapsed, consts.halflife)
        usage = decay_usage(table.usage, charges, k) * leaves
        background = leaves & ((usage >= consts.maxusage) | (m <= 0))
        figures = sshare(idx, tree.shares, idx.subtree_sum(usage), consts.dampening, None, ratios)
        runnable = leaves & ~background
        e_share = slurm_e_shares(idx, figures, consts.dampening, runnable & wants, runnable)
        e_share *= active & ~background
        return lnode_table(
            idx, table, c, charges, usage, k, elapsed, active, m, e_share, None, background
        )
