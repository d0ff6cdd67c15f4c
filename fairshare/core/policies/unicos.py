"""The UNICOS user-level fair-share policy (the default): Kay-Lauder with ADJGROUPS,
LIMSHARE, K5 edge effects and MAXUSAGE, in the order fairshare.core.cycle lists its steps."""

from __future__ import annotations

import numpy as np

from fairshare.core import fair
from fairshare.core.consts import ADJGROUPS, Consts
from fairshare.core.cycle import (
    USAGE_FLOOR,
    Consumption,
    Decision,
    background_leaves,
    cycle_lnodes,
    decay_usage,
    fill_ratio,
    group_adjustment,
    leaf_charges,
    limshare_band,
    lnode_table,
    near_future,
    near_future_shares,
    node_decay,
    raise_usage,
)
from fairshare.core.lnode import LnodeTable
from fairshare.core.split import even_targets
from fairshare.core.tree import ShareTree


def near_future_level(
    f: fair.SplitFigures, x: int, others: np.ndarray, consts: Consts
) -> float | None:
    """The usage (charge units) at which x's near-future share is its due part of its
    parent's, the parent at its due share: step 5 of fairshare.core.cycle on x's
    sibling set, x wanting CPU and its demanding siblings `others` as they are.  None
    when x has no share or they no weight.

    Among them x's part is target_x^2 / u over the sum of that over them and x (target
    = m_share, or its even spread), its due part target_x / (target_x + theirs): equal
    when u* = target_x^2 (1 - due) / (due S), S = the sum of their target^2 / usage.
    When a sibling would then leave its band (K5, and LIMSHARE's floor and limit, times
    its own due part), the rest, 1 - due, is water-filled among them as the cycle does
    (`fill_ratio`) and x's weight set to match.
    """
    demand = f.demanding.copy()
    demand[x] = True  # as the cycle spreads the idle siblings' shares with x wanting CPU
    even = consts.idleshare == "even"
    target = even_targets(f.idx, f.m_share, f.active, demand) if even else f.m_share
    tx, to = float(target[x]), target[others]
    w = to * to / np.maximum(f.usage[others], USAGE_FLOOR)
    s = sum(w.tolist())
    if s <= 0 or tx <= 0:
        return None
    claims = tx + sum(to.tolist())
    due = tx / claims
    floor, limit = limshare_band(consts)  # with the cycle's margins (_due_shares)
    low, cap = floor * (1 - 1e-12) * to / claims, limit * (1 + 1e-12) * to / claims
    t = (1 - due) / s  # their share per unit of weight with x at its due part
    if np.all((t * w >= low) & (t * w <= cap)):
        return tx * tx * (1 - due) / (due * s)
    return tx * tx * fill_ratio(w, low, cap, 1 - due) / due


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
            fair = table.target if table.target.any() else None
            groups = idx.group if c.grid is None else c.grid.adjustable(idx.group)
            adj = group_adjustment(idx, groups, active, m, charges, consts.mingshare, fair)
            adjusted = charges * adj
        else:
            adj, adjusted = None, charges

        k = node_decay(tree, elapsed, consts)
        usage = decay_usage(table.usage, adjusted, k) * leaves
        background = background_leaves(leaves, usage, m, consts.maxusage)
        demand_leaf = leaves & wants
        sched_leaf = demand_leaf & ~background
        sub_usage, sched = idx.subtree_sum(np.array((usage, sched_leaf)))

        split_m = m
        if c.grid is not None:  # other sites' usage, grid factors, pooled subtrees
            split_m, sub_usage = c.grid.split_inputs(idx, m, sub_usage)
        floor, limit = limshare_band(consts)
        flat = not consts.flags & ADJGROUPS
        sh = near_future_shares(
            idx, split_m, sub_usage, active, sched > 0, limit, floor, flat=flat, even=even
        )
        if c.grid is not None:
            sh.raise_ = c.grid.keep_raise(sh.raise_)
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

    def fair_usage(self, figures: fair.SplitFigures, node: int, consts: Consts) -> float | None:
        """The usage at which lnode `node` gets its due part (fairshare.core.fair): its
        `near_future_level` among its demanding siblings, or without ADJGROUPS among
        every demanding leaf (the flat model), with the idle siblings' shares spread as
        `Consts.idleshare` says and the K5 and LIMSHARE bands the cycle applies."""
        if not consts.flags & ADJGROUPS:
            figures, at = figures.flat(node)
            if at is None:
                return None
            node = at

        def level(f: fair.SplitFigures, x: int, others: np.ndarray) -> float | None:
            return near_future_level(f, x, others, consts)

        return fair.fair_usage(figures, node, level)
