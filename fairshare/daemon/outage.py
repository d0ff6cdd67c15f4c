"""The daemon's calls to the UDB, which may not answer (server down, network, lock
timeout) or may answer reads but refuse writes (a full disk, a read-only database).

`UdbCalls.call(what, fn, *args)` runs one call that writes, `UdbCalls.read` one that
only reads; when the UDB cannot be reached it returns None, logs one line a minute
("could not `what`", how long, how many lnodes' increments are kept) and the daemon
goes on scheduling from what it knows.  The outage ends when the kind of call that
failed works again: a read that works while writes fail does not end it (else the
outage would end and begin again every cycle, and be logged every cycle).  When it
ends, it says so (if it said the outage) and calls `on_back` (the daemon then writes
back what it kept).

A write the database refuses because another daemon took this host's lock
(fairshare.store.fence.Fenced) is not an outage: it is said once, `fenced` is set, and
`on_fenced` is called (the daemon stops writing and exits).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from sqlalchemy.exc import InterfaceError, OperationalError

from fairshare.store.fence import Fenced

log = logging.getLogger("shrdaemon")

#: While the UDB cannot be reached, say so at most once per this many seconds.
UNREACHABLE_LOG_EVERY = 60.0
#: The errors that mean the UDB cannot be reached or written (server down, network,
#: lock timeout, disk full, read-only): sqlite3's and the servers' OperationalError.
UNREACHABLE = (OperationalError, InterfaceError)


class UdbCalls:
    """Calls to the UDB that survive its absence.  `monotonic`: the clock (s);
    `kept`: how many lnodes' increments are waiting (for the log); `on_back`: called
    when the UDB answers again; `on_fenced`: called once when a write is refused
    because another daemon holds this host's lock."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        kept: Callable[[], int],
        on_back: Callable[[], None],
        on_fenced: Callable[[], None] = lambda: None,
    ) -> None:
        self.monotonic, self.kept, self.on_back = monotonic, kept, on_back
        self.on_fenced = on_fenced
        self.unreachable_since: float | None = None  # monotonic s; None while it answers
        self.writes_failed = False  # a write failed in this outage: only a write ends it
        self.fenced: Fenced | None = None
        # When an outage was last said (monotonic s), across outages: a UDB that fails,
        # answers and fails again (a full disk whose checkpoint freed a page) is said
        # once a minute, not at every flip.
        self._logged = -math.inf

    def call(self, what: str, fn: Callable, *args):
        """`fn(*args)`, a call that writes, or None when the UDB cannot be reached or
        written (logged once a minute) or refuses this daemon (`fenced`)."""
        if self.fenced is not None:
            return None
        try:
            out = fn(*args)
        except UNREACHABLE as err:
            self._failed(what, err, writes=True)
            return None
        except Fenced as err:
            self.refuse(what, err)
            return None
        self._answered()
        return out

    def refuse(self, what: str, err: Fenced) -> None:
        """Stop writing: another daemon holds this host's lock (said once)."""
        if self.fenced is None:
            self.fenced = err
            log.error("%s: could not %s; this daemon stops writing and exits", err, what)
            self.on_fenced()

    def read(self, what: str, fn: Callable, *args):
        """`fn(*args)`, a call that only reads, or None when the UDB cannot be reached."""
        try:
            out = fn(*args)
        except UNREACHABLE as err:
            self._failed(what, err, writes=False)
            return None
        if not self.writes_failed:
            self._answered()
        return out

    def _answered(self) -> None:
        if self.unreachable_since is None:
            return
        said = self._logged >= self.unreachable_since  # this outage was said
        level = logging.INFO if said else logging.DEBUG
        log.log(
            level, "UDB reachable again after %.0f s", self.monotonic() - self.unreachable_since
        )
        self.unreachable_since = None
        self.writes_failed = False
        self.on_back()

    def _failed(self, what: str, err: Exception, writes: bool) -> None:
        now = self.monotonic()
        if self.unreachable_since is None:
            self.unreachable_since = now
        self.writes_failed |= writes
        if now - self._logged >= UNREACHABLE_LOG_EVERY:
            self._logged = now
            reason = str(getattr(err, "orig", err) or err).strip().splitlines()[0]
            log.warning(
                "UDB unreachable for %.0f s (could not %s: %s): scheduling from the last "
                "known state, the increments of %d lnodes kept until it answers",
                now - self.unreachable_since,
                what,
                reason,
                self.kept(),
            )
