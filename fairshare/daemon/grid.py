"""A grid's exchange in the daemon's loop (seed 001): every `interval` seconds the
mounted policies are fetched (udb.mounts: a changed policy bumps the entries' serial,
so the next cycle's reload takes the new tree), the peers' usage records pulled
(fairshare.store.grid), and the other sites' usage of the mounted nodes taken into the
policy model (`GridExchange.take`: fairshare.core.steps.exchange_grid), which counts
it for the entries whose scope is global and updates their grid factors.  That is the
one path by which the other sites' usage reaches the scheduler: it is never added to
the users' own usage (this site's, which the write-back keeps and exports).

A source or peer that cannot be reached is said once when it fails (and again when its
reason changes) and once when it answers again; the mount keeps its last good version
and the peer's records wait in its own UDB until it is back.  The UDB itself being away
is the outage's (fairshare.daemon.outage): nothing is fetched or pulled meanwhile.
"""

from __future__ import annotations

import logging

import numpy as np
from sqlalchemy import Engine

from fairshare.core.consts import Consts
from fairshare.core.grid import GridState
from fairshare.core.grid import remote_usage as remote_array
from fairshare.core.site import SiteState
from fairshare.core.steps import exchange_grid
from fairshare.core.tree import ShareTree
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.state import Lnodes
from fairshare.store.grid import pull_all, remote_usage
from udb.mounts import fetch_all

log = logging.getLogger("shrdaemon")

#: shrdaemon --grid-interval's default, seconds.
GRID_INTERVAL = 60.0


class GridExchange:
    """Fetching, pulling and taking the other sites' usage every `interval` s of the
    monotonic clock (0: never), and the last thing said about each source."""

    def __init__(self, engine: Engine, interval: float = GRID_INTERVAL) -> None:
        self.engine, self.interval = engine, interval
        self.next = 0.0
        self.exchanges = 0
        self._said: dict[str, str | None] = {}

    def again(self) -> None:
        """Exchange at the next cycle (a new tree restarted the grid state)."""
        self.next = 0.0

    def when_due(
        self, udb: UdbCalls, ln: Lnodes, site: SiteState, now: float, mono: float, consts: Consts
    ) -> bool:
        """Fetch, pull and take the other sites' usage into `site.grid` when due at `mono`
        (`now`: epoch s); True when it was taken (the site has peers)."""
        if self.interval <= 0 or mono < self.next:
            return False
        self.next = mono + self.interval
        fetched = udb.call("fetch the mounted policies", fetch_all, self.engine, now)
        for m, said in fetched or ():
            self._say(f"mount {m.name}", said, said.startswith("not fetched"))
        args = (self.engine, now, consts.halflife)
        pulled = udb.call("pull the peers' usage records", pull_all, *args)
        for p, said in pulled or ():
            self._say(f"peer {p.site}", said, said.startswith("not pulled"))
        self.exchanges += 1
        if not pulled or site.grid is None:
            return False
        return bool(udb.read("take the other sites' usage", self.take, ln, site, now, consts))

    def take(self, ln: Lnodes, site: SiteState, now: float, consts: Consts) -> bool:
        """The other sites' usage of `ln`'s mounted nodes as of `now` becomes the site's
        view of them and its grid factors are updated (fairshare.core.steps.exchange_grid;
        only the entries whose scope is global count it).  True when done."""
        remote = self.remote(ln.tree, now, consts.halflife)
        exchange_grid(ln.tree, ln.table, site.grid, remote, consts)
        return True

    def _say(self, who: str, said: str, failed: bool) -> None:
        """Log a failure when it starts or its reason changes, and the recovery once."""
        was = self._said.get(who)
        if failed and said != was:
            log.warning("%s: %s", who, said)
        elif not failed and was is not None:
            log.info("%s: reachable again: %s", who, said)
        elif not failed and said != "unchanged" and not said.startswith("0 "):
            log.debug("%s: %s", who, said)
        self._said[who] = said if failed else None

    def remote(self, tree: ShareTree, now: float, halflife: float) -> np.ndarray:
        """The other sites' usage of `tree`'s nodes (charge units, aged to `now`; 0 for
        the nodes none of them used: fairshare.core.grid.remote_usage)."""
        return remote_array(tree, [remote_usage(self.engine, now, halflife)])


def remote_by_name(tree: ShareTree, grid: GridState | None) -> dict[str, float]:
    """The other sites' usage as `grid` holds it now (aged since the last exchange), by
    entry name of `tree`, the nodes with none left out: what the socket's priority
    request counts for the global entries (`remote_now`)."""
    if grid is None:
        return {}
    pairs = zip(tree.names[1:], grid.remote[1:].tolist(), strict=False)
    return {name: float(u) for name, u in pairs if u}


def remote_now(daemon) -> dict[str, float]:
    """The other sites' usage a daemon (fairshare.daemon.daemon.Daemon) holds now, by
    entry name (the socket's priority request; {} before its first cycle)."""
    tree, site = daemon.tree, daemon.site
    return {} if tree is None or site is None else remote_by_name(tree, site.grid)
