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

With `background` (the real daemon's) the fetch and the pull run in a thread of their
own: a source or peer that answers slowly, or not at all until its connection times
out (up to 30 s), no longer holds up the cycle.  The cycle that finds them done takes
what they brought (their outcome passes through the cycle's UdbCalls, as the calls made
in the cycle do); the next exchange starts only after that.  Without it (the simulator,
whose clock is its own) all three run in the cycle that is due.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial

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

    def __init__(
        self, engine: Engine, interval: float = GRID_INTERVAL, background: bool = False
    ) -> None:
        self.engine, self.interval, self.background = engine, interval, background
        self.next = 0.0
        self.exchanges = 0
        self._said: dict[str, str | None] = {}
        self._pending: tuple[Future, Future] | None = None  # the thread's fetch and pull

    def again(self) -> None:
        """Exchange at the next cycle (a new tree restarted the grid state)."""
        self.next = 0.0

    def when_due(
        self, udb: UdbCalls, ln: Lnodes, site: SiteState, now: float, mono: float, consts: Consts
    ) -> bool:
        """Fetch, pull and take the other sites' usage into `site.grid` when due at `mono`
        (`now`: epoch s), or take what the thread fetched and pulled once it is done
        (`background`); True when it was taken (the site has peers)."""
        if self.interval <= 0:
            return False
        if self._pending is not None:
            fetch, pull = self._pending
            if not pull.done():
                return False
            self._pending = None
            return self._take_in(udb, fetch.result, pull.result, ln, site, now, consts)
        if mono < self.next:
            return False
        self.next = mono + self.interval
        calls = (partial(fetch_all, self.engine, now),
                 partial(pull_all, self.engine, now, consts.halflife))  # fmt: skip
        if not self.background:
            return self._take_in(udb, *calls, ln, site, now, consts)
        if udb.fenced is None:  # (a fenced daemon writes nothing, in no thread either)
            self._pending = in_thread(*calls)
        return False

    def _take_in(self, udb: UdbCalls, fetch, pull, ln, site, now, consts) -> bool:
        """Say what `fetch` and `pull` (calls, or the thread's results) brought, and take
        the other sites' usage; True when it was taken."""
        fetched = udb.call("fetch the mounted policies", fetch)
        for m, said in fetched or ():
            self._say(f"mount {m.name}", said, said.startswith("not fetched"))
        pulled = udb.call("pull the peers' usage records", pull)
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


def in_thread(*calls: Callable[[], object]) -> tuple[Future, ...]:
    """Run `calls` one after the other in a daemon thread (one that never holds up the
    daemon's exit); a Future each for its result or exception."""
    futures = tuple(Future() for _ in calls)

    def run() -> None:
        for call, future in zip(calls, futures, strict=True):
            try:
                future.set_result(call())
            except BaseException as err:  # passed to whoever takes the result
                future.set_exception(err)

    threading.Thread(target=run, name="grid exchange", daemon=True).start()
    return futures


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
