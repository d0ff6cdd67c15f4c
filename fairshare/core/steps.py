"""The steps on the lnode table that shrdaemon and shrsim share, on plain values.

- `activate_stored`: a leaf that got processes becomes an lnode with its stored
  usage (shusage, as of shextime) aged to now (fairshare.core.lnode.aged_usage);
- `advance`: the policy's cycle (fairshare.core.policies.run_cycle) over the charges of
  the last `elapsed` seconds; on a host of a site the CPU is counted for the site
  factors and, with GLOBALUSAGE, the factors are applied to e_share
  (fairshare.core.site); the site's exits adjust the e_shares (fairshare.core.exits,
  the guide's site_adjust_lnodes); then what was delivered against the fair target and the flat
  enforcers' shares (fairshare.core.delivery); a value the cycle left not finite keeps
  its last finite value;
- `take_site_view` (GLOBALUSAGE, every cycle on a daemon): the active leaves take
  their site-wide usage and the host keeps the view of the other hosts;
- `refresh_site` (GLOBALUSAGE, at a write-back): that, and the host's site factors
  updated from the view (fairshare.core.site.update_factors).
- `exchange_grid` (a site of a grid, when the other sites' usage arrives): the site's
  view of the other sites and its grid factors (fairshare.core.grid).

Releasing an lnode whose processes have gone, or writing back what it accrued, is
fairshare.core.lnode.release and fairshare.core.lnode.accrued.  Where they come in the
daemon's cycle is fairshare.daemon's docstring.  The daemon reads the stored usage and
the site view from the UDB (fairshare.store.published); the simulator (fairshare.sim.run)
keeps them in memory, so a simulated week of 150,000 cycles takes seconds, not the
hours the UDB round trips would take.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.cycle import Consumption, node_decay
from fairshare.core.delivery import deliver
from fairshare.core.exits import SiteExit, adjust
from fairshare.core.grid import GridState, grid_view
from fairshare.core.grid import update_factors as update_grid_factors
from fairshare.core.lnode import LnodeTable, activate, aged_usage, keep_finite
from fairshare.core.policies import run_cycle
from fairshare.core.site import SiteState, SiteView, apply_factors, refresh_usage, update_factors
from fairshare.core.tree import ShareTree


def activate_stored(
    table: LnodeTable,
    node: int,
    shusage: float,
    shextime: float,
    now: float,
    consts: Consts,
    tree: ShareTree | None = None,
) -> float:
    """Create leaf `node`'s lnode (in place) with its stored usage `shusage` (as of
    `shextime`, epoch s) aged to `now` with the node's half-life in `tree` (its own or its
    group's; the global one without `tree`); returns that usage (charge units)."""
    if tree is not None and tree.own_halflives:
        consts = consts.replace(halflife=float(tree.halflives(consts.halflife)[node]))
    usage = aged_usage(shusage, shextime, now, consts)
    activate(table, node, usage)
    return usage


def advance(
    tree: ShareTree,
    table: LnodeTable,
    consumption: Consumption,
    consts: Consts,
    elapsed: float,
    site: SiteState | None = None,
    exits: Sequence[SiteExit] = (),
    grid: GridState | None = None,
) -> tuple[LnodeTable, list[tuple[int, str]]]:
    """The lnode table after one cycle of `elapsed` seconds of `consumption`, and the
    (node, field) pairs that were not finite and kept their value from `table`.

    With `site` (a host's GLOBALUSAGE state: the daemon always has one), the cycle's
    CPU is counted for the site factors and, under GLOBALUSAGE, e_share is corrected
    by them (fairshare.core.site.apply_factors).  Then each of the site's `exits`
    adjusts the e_shares in turn (fairshare.core.exits; one that fails is skipped).
    With `grid` (a site of a grid: the other sites' usage and the grid factors,
    fairshare.core.grid), the other sites' usage is aged over the cycle and the split
    of the entries whose scope is global counts it; pooled subtrees are split by shares
    alone with or without it.
    """
    if grid is not None:
        grid.age(node_decay(tree, elapsed, consts))
    view = grid_view(tree, consts, grid)
    if view is not None:
        consumption = dataclasses.replace(consumption, grid=view)
    new = run_cycle(tree, table, consumption, consts, elapsed)
    if site is not None:
        site.add(consumption.cpu, elapsed)
        if consts.flags & GLOBALUSAGE:
            new.e_share = apply_factors(tree, new, site.factor)
    adjust(exits, tree, new, consts)
    deliver(tree, table, new, consumption, consts, elapsed)
    return new, keep_finite(table, new)


def exchange_grid(
    tree: ShareTree,
    table: LnodeTable,
    grid: GridState,
    remote: np.ndarray,
    consts: Consts,
) -> None:
    """A site of a grid, when usage arrives from the other sites: `remote` (per node,
    the decayed usage of the node's subtree at the other sites, summed; charge units;
    fairshare.core.grid.remote_usage builds it from their publications) becomes the
    site's view, and its grid factors are updated from it (in place)."""
    grid.exchange(remote)
    update_grid_factors(tree, grid, table.usage, table.active, table.demand, consts)


def refresh_site(
    tree: ShareTree,
    table: LnodeTable,
    site: SiteState,
    view: SiteView,
    usage: np.ndarray,
    consts: Consts,
    cpus: float,
) -> None:
    """GLOBALUSAGE, at a write-back: `take_site_view`, then the host's site factors are
    updated for its `cpus` CPUs (in place)."""
    take_site_view(tree, table, site, view, usage)
    site.factor = update_factors(tree, table, site, consts, cpus)


def take_site_view(
    tree: ShareTree, table: LnodeTable, site: SiteState, view: SiteView, usage: np.ndarray
) -> None:
    """GLOBALUSAGE: the active leaves of `table` take their site-wide `usage` (per node,
    aged to now, charge units; fairshare.core.site.refresh_usage adds what this host
    owes), and `view` (the other hosts) becomes the host's (in place)."""
    mine = np.flatnonzero(table.active & tree.leaf_mask)
    refresh_usage(table, mine, usage)
    site.view = view
