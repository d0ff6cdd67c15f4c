"""GLOBALUSAGE's per-cycle step: this host's part of the site's view sent, the other
hosts' read back and summed, and the lnodes given the site-wide usage
(fairshare.store.exchange, fairshare.core.steps.take_site_view).

The host's *contribution* is, per uid it has an lnode for or still owes: whether it
has an lnode and whether that lnode wants CPU, the usage it accrued and has not
written back (its active lnodes' usage - stored, plus the increments the write-back
kept, fairshare.daemon.writeback), the CPU it receives here and the CPUs it would use.
The write-back (every `writeback` seconds) stays what it was: the books; this is the
view, cheap enough for every cycle.  The site factors are still updated at the
write-back (fairshare.daemon.writeback), from the view this step keeps fresh.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fairshare.core.consts import Consts, decay
from fairshare.core.lnode import WriteBack
from fairshare.core.site import SiteState
from fairshare.core.steps import take_site_view
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.state import Lnodes
from fairshare.store.exchange import Contribution, site_view_of
from fairshare.store.published import LnodeStore

#: A host silent for this many write-back intervals (or deltas, when longer) is no longer
#: live: the others leave it out of their view.
LIVE_INTERVALS = 3


def live_after(now: float, consts: Consts) -> float:
    """The epoch second after which a host must have exchanged to count as live."""
    return now - LIVE_INTERVALS * max(consts.writeback, consts.delta)


def contribution(
    ln: Lnodes, pending: Mapping[int, WriteBack], now: float, halflife: float, cpus: float
) -> Contribution:
    """This host's contribution at `now` (epoch s): its active leaf lnodes (on a host of
    `cpus` CPUs) and the increments kept for the UDB (`pending`, by uid, aged with
    `halflife` s)."""
    t, tree = ln.table, ln.tree
    leaves = np.flatnonzero(t.active & tree.leaf_mask)
    got = np.zeros(tree.size) if t.got is None else t.got
    want = np.zeros(tree.size) if t.want is None else t.want
    kept = list(pending.items())
    uid = np.concatenate([tree.ids[leaves], [u for u, _wb in kept]])
    owed_kept = [wb.shusage * decay(now - wb.shextime, halflife) for _u, wb in kept]
    zeros = [0.0] * len(kept)
    return Contribution.of(
        uid,
        present=np.concatenate([np.ones(len(leaves), dtype=bool), np.zeros(len(kept), bool)]),
        demand=np.concatenate([t.demand[leaves], np.zeros(len(kept), dtype=bool)]),
        owed=np.concatenate([np.maximum(t.usage[leaves] - t.stored[leaves], 0.0), owed_kept]),
        rate=np.concatenate([got[leaves] * cpus, zeros]),
        want=np.concatenate([want[leaves], zeros]),
    )


def exchange(
    udb: UdbCalls,
    store: LnodeStore,
    ln: Lnodes,
    site: SiteState,
    pending: Mapping[int, WriteBack],
    now: float,
    consts: Consts,
    cpus: float,
    everyone: bool = True,
) -> None:
    """Send this host's contribution as of `now` (epoch s) and read the other hosts'
    through `udb` (fairshare.daemon.outage: nothing changes when the UDB does not
    answer), then give the active lnodes of `ln` their site-wide usage and `site` the
    view of the other hosts (in place).  The stored usage is read for this host's
    lnodes only unless `everyone` (the view's usage of the others' lnodes serves the
    site factors alone, updated at a write-back: it is read in that cycle)."""
    mine = contribution(ln, pending, now, consts.halflife, cpus)
    stored_of = None if everyone else ln.tree.ids[ln.active_leaves()].tolist()
    args = (mine, now, cpus, live_after(now, consts), stored_of)
    sums = udb.call("exchange the site's usage", store.exchange, *args)
    if sums is None:
        return
    view, usage = site_view_of(ln.tree, sums, now, consts.halflife)
    view.time = sums.oldest
    take_site_view(ln.tree, ln.table, site, view, usage)
