"""The UNICOS user-level fair-share policy (the default): Kay-Lauder with ADJGROUPS,
LIMSHARE, K5 edge effects and MAXUSAGE, in the order fairshare.core.cycle lists its steps."""

from __future__ import annotations

import numpy as np

from fairshare.core.consts import ADJGROUPS, Consts, decay
from fairshare.core.cycle import (
    Consumption,
    Decision,
    background_leaves,
    cycle_lnodes,
    decay_usage,
    group_adjustment,
    leaf_charges,
    limshare_band,
    lnode_table,
    near_future,
    near_future_shares,
    raise_usage,
)
from fairshare.core.lnode import LnodeTable
from fairshare.core.tree import ShareTree


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
        c = consumption
        even = consts.idleshare == "even"
        idx, wants, leaves, active, m = cycle_lnodes(tree, table, c, consts, even)

        charges = leaf_charges(c, consts) * leaves
        if consts.flags & ADJGROUPS:
            adj = group_adjustment(idx, idx.group, active, m, charges, consts.mingshare)
            adjusted = charges * adj
        else:
            adj, adjusted = None, charges

        k = decay(elapsed, consts.halflife)
        usage = decay_usage(table.usage, adjusted, k) * leaves
        background = background_leaves(leaves, usage, m, consts.maxusage)
        demand_leaf = leaves & wants
        sched_leaf = demand_leaf & ~background
        sub_usage, sched = idx.subtree_sum(np.array((usage, sched_leaf)))

        floor, limit = limshare_band(consts)
        flat = not consts.flags & ADJGROUPS
        sh = near_future_shares(
            idx, m, sub_usage, active, sched > 0, limit, floor, flat=flat, even=even
        )
        if np.count_nonzero(sh.raise_ > 1.0):
            usage = raise_usage(idx, usage, sh.raise_)
        e_share = sh.e_share * (active & ~background)

        decision = Decision(
            active=active,
            m_share=m,
            charges=charges,
            usage=usage,
            k=k,
            e_share=e_share,
            background=background,
            adj=adj,
            due=sh.due * active,
            pri=near_future(usage, m, sched_leaf),
        )
        return lnode_table(idx, table, c, elapsed, decision)
