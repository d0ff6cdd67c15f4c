"""A grid's exchange in the daemon's loop (seed 001): every `interval` seconds the
mounted policies are fetched (udb.mounts: a changed policy bumps the entries' serial,
so the next cycle's reload takes the new tree) and the peers' usage records pulled
(fairshare.store.grid); when records arrived, a write-back is made due at the end of
the cycle, and it gives the active mounted leaves the other sites' usage
(`add_remote`, called by fairshare.daemon.writeback).

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
from fairshare.core.tree import ShareTree
from fairshare.daemon.outage import UdbCalls
from fairshare.store.grid import pull_all, remote_usage
from udb.mounts import fetch_all

log = logging.getLogger("shrdaemon")

#: shrdaemon --grid-interval's default, seconds.
GRID_INTERVAL = 60.0


class GridExchange:
    """Fetching and pulling every `interval` s of the monotonic clock (0: never), and the
    last thing said about each source."""

    def __init__(self, engine: Engine, interval: float = GRID_INTERVAL) -> None:
        self.engine, self.interval = engine, interval
        self.next = 0.0
        self.exchanges = 0
        self._said: dict[str, str | None] = {}

    def when_due(self, udb: UdbCalls, now: float, mono: float, consts: Consts) -> bool:
        """Fetch and pull when due at `mono` (`now`: epoch s); True when peers' records
        arrived (their usage is to be taken at once)."""
        if self.interval <= 0 or mono < self.next:
            return False
        self.next = mono + self.interval
        fetched = udb.call("fetch the mounted policies", fetch_all, self.engine, now)
        for m, said in fetched or ():
            self._say(f"mount {m.name}", said, said.startswith("not fetched"))
        args = (self.engine, now, consts.halflife)
        pulled = udb.call("pull the peers' usage records", pull_all, *args)
        arrived = False
        for p, said in pulled or ():
            self._say(f"peer {p.site}", said, said.startswith("not pulled"))
            arrived |= not said.startswith(("not pulled", "0 "))
        self.exchanges += 1
        return arrived

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

    def remote(self, tree: ShareTree, now: float, halflife: float) -> np.ndarray | None:
        """The other sites' usage of `tree`'s nodes (charge units, aged to `now`), None
        when there is none."""
        by_name = remote_usage(self.engine, now, halflife)
        if not by_name:
            return None
        out = np.zeros(tree.size)
        for name, usage in by_name.items():
            node = tree.find(name)
            if node is not None:
                out[node] = usage
        return out
