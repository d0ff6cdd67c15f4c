"""Slurm's classic fair-share figures, as its sshare shows them (seed 002; pure).

Per node of the share tree (arrays over nodes; fractions 0..1):

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

`sshare` computes them: the one computation behind the slurm policy
(fairshare.core.policies.slurm, on the live usage) and the displays (shrtree -l, shrinfo,
through fairshare.report.sharetree.stored_sshare, on the usage stored in the UDB,
whatever the policy).  It needs only the tree's level index, so a display imports no
cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairshare.core.index import TreeIndex


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
