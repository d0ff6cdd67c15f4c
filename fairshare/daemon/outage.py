"""The daemon's calls to the UDB, which may not answer (server down, network, lock
timeout).

`UdbCalls.call(what, fn, *args)` runs one call; when the UDB cannot be reached it
returns None, logs one line a minute ("could not `what`", how long, how many
write-backs are kept) and the daemon goes on scheduling from what it knows.  When
the UDB answers again it says so once and calls `on_back` (the daemon then writes
back what it kept).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.exc import InterfaceError, OperationalError

log = logging.getLogger("shrdaemon")

#: While the UDB cannot be reached, say so at most once per this many seconds.
UNREACHABLE_LOG_EVERY = 60.0
#: The errors that mean the UDB cannot be reached (server down, network, lock timeout).
UNREACHABLE = (OperationalError, InterfaceError)


class UdbCalls:
    """Calls to the UDB that survive its absence.  `monotonic`: the clock (s);
    `kept`: how many write-backs are waiting (for the log); `on_back`: called when the
    UDB answers again."""

    def __init__(
        self, monotonic: Callable[[], float], kept: Callable[[], int], on_back: Callable[[], None]
    ) -> None:
        self.monotonic, self.kept, self.on_back = monotonic, kept, on_back
        self.unreachable_since: float | None = None  # monotonic s; None while it answers
        self._logged = 0.0

    def call(self, what: str, fn: Callable, *args):
        """`fn(*args)`, or None when the UDB cannot be reached (logged once a minute)."""
        try:
            out = fn(*args)
        except UNREACHABLE as err:
            self._failed(what, err)
            return None
        if self.unreachable_since is not None:
            log.info("UDB reachable again after %.0f s", self.monotonic() - self.unreachable_since)
            self.unreachable_since = None
            self._logged = 0.0
            self.on_back()
        return out

    def _failed(self, what: str, err: Exception) -> None:
        now = self.monotonic()
        if self.unreachable_since is None:
            self.unreachable_since = now
        if self._logged == 0.0 or now - self._logged >= UNREACHABLE_LOG_EVERY:
            self._logged = now
            reason = str(getattr(err, "orig", err) or err).strip().splitlines()[0]
            log.warning(
                "UDB unreachable for %.0f s (could not %s: %s): scheduling from the last "
                "known state, %d write-backs kept until it answers",
                now - self.unreachable_since,
                what,
                reason,
                self.kept(),
            )
