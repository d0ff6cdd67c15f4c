"""The connections shrdaemon's socket holds (fairshare.server.server), and what each uid
may ask of it.

A `Client` is one connection the selector thread holds, reading its request or writing
its reply, each before a deadline.  `Held` counts the connections at once and per uid
and says why a new one is refused past the limits (shrdaemon-protocol(7): clients at
once, per uid other than root, and the room kept for uids holding none), and the work
each uid has under way (requests being answered, bytes of replies not yet taken), so
that no one user can take every connection, every worker or the daemon's memory.
`Pace` holds each uid other than root to a rate of new connections, so that a flood
is refused at the cost of an accept and a close; `PeerLog` logs at most a few lines
per uid in a window and then how many it left out, so that a flood cannot fill
root's log.  `expired` and `wait` are the deadlines' side: which clients are late,
and how long the selector may sleep.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from fairshare.daemon.service import CLIENT_FAULT
from fairshare.server.answers import Peer


@dataclass
class Client:
    """A connection the selector thread holds: reading its request, or writing its reply
    (`out`, from offset `sent`), each before `deadline` (monotonic s)."""

    conn: socket.socket
    peer: Peer
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    out: bytes = b""
    sent: int = 0
    request: str = "?"
    pending: int = 0  # bytes of `out` counted against the uid's unread replies


class Held:
    """The connections held, at once and per uid, against at most `max_clients` at once
    and `max_per_uid` for one uid other than root, the last `reserve` of them kept for
    a uid that holds none; and each uid's work under way, at most `max_busy` requests
    being answered and `max_unread` bytes of replies not yet taken (the selector
    thread's alone)."""

    def __init__(
        self,
        max_clients: int,
        max_per_uid: int,
        reserve: int = 0,
        max_busy: int = 0,
        max_unread: int = 0,
    ) -> None:
        self.max_clients, self.max_per_uid, self.reserve = max_clients, max_per_uid, reserve
        self.max_busy, self.max_unread = max_busy, max_unread
        self.count = 0
        self.per_uid: dict[int, int] = {}
        self.busy: dict[int, int] = {}
        self.unread: dict[int, int] = {}

    def refusal(self, uid: int) -> str | None:
        """Why a new connection of `uid` is refused (None: it may be held)."""
        mine = self.per_uid.get(uid, 0)
        if self.count >= self.max_clients:
            return f"{self.max_clients} clients already"
        if uid != 0 and mine >= self.max_per_uid:
            return f"{mine} connections of this uid already"
        if uid != 0 and mine and self.count >= self.max_clients - self.reserve:
            return (
                f"{mine} connections of this uid already, and the last {self.reserve} "
                "are kept for users holding none"
            )
        return None

    def hold(self, uid: int) -> None:
        """Count a new connection of `uid`."""
        self.count += 1
        self.per_uid[uid] = self.per_uid.get(uid, 0) + 1

    def release(self, uid: int) -> None:
        """Count a connection of `uid` closed."""
        self.count -= 1
        _add(self.per_uid, uid, -1)

    def busy_refusal(self, uid: int) -> str | None:
        """Why a complete request of `uid` is refused before any work is done on it
        (None: it may go to a worker)."""
        if uid == 0:
            return None
        if self.max_busy and self.busy.get(uid, 0) >= self.max_busy:
            return f"busy: {self.busy[uid]} requests of this uid being answered already, try again"
        if self.max_unread and self.unread.get(uid, 0) >= self.max_unread:
            return (
                f"busy: {self.unread[uid]} bytes of replies to this uid not taken yet "
                f"(at most {self.max_unread}): read them first"
            )
        return None

    def unread_refusal(self, uid: int, size: int) -> str | None:
        """Why a reply of `size` bytes to `uid` is not given (past its unread bytes; a
        uid with none unread may always have one): None when it is."""
        mine = self.unread.get(uid, 0)
        if uid != 0 and self.max_unread and mine and mine + size > self.max_unread:
            return f"busy: {mine} bytes of replies to this uid not taken yet: read them first"
        return None

    def work(self, uid: int, change: int) -> None:
        """Count a request of `uid` given to a worker (+1) or answered (-1)."""
        _add(self.busy, uid, change)

    def replies(self, uid: int, change: int) -> None:
        """Count `change` bytes of replies to `uid` not taken yet (negative: taken or dropped)."""
        _add(self.unread, uid, change)


def _add(counts: dict[int, int], uid: int, change: int) -> None:
    left = counts.get(uid, 0) + change
    if left > 0:
        counts[uid] = left
    else:
        counts.pop(uid, None)


class Pace:
    """New connections of each uid other than root held to `rate` a second on average,
    `burst` at once (a token bucket per uid; the selector thread's alone)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens: dict[int, tuple[float, float]] = {}  # uid: (tokens, when, monotonic s)

    def allow(self, uid: int, now: float) -> bool:
        """Whether `uid` may connect at `now` (monotonic s); counts the connection."""
        if uid == 0:
            return True
        tokens, when = self.tokens.get(uid, (self.burst, now))
        tokens = min(self.burst, tokens + (now - when) * self.rate)
        if tokens < 1.0:
            self.tokens[uid] = (tokens, now)
            return False
        self.tokens[uid] = (tokens - 1.0, now)
        if len(self.tokens) > 4096:  # forget the uids whose bucket has refilled
            full = [
                u for u, (t, w) in self.tokens.items() if t + (now - w) * self.rate >= self.burst
            ]
            for u in full:
                del self.tokens[u]
        return True


class PeerLog:
    """Warnings about one uid's clients: at most `burst` lines per uid in `interval` s,
    then one line saying how many were left out (any thread).  Each is marked as the
    client's fault (fairshare.daemon.service.CLIENT_FAULT), not the daemon's."""

    def __init__(self, log: logging.Logger, burst: int, interval: float) -> None:
        self.log, self.burst, self.interval = log, burst, interval
        self.windows: dict[int, list] = {}  # uid: [window start, lines logged, left out]
        self.lock = threading.Lock()

    def warning(self, uid: int, message: str, *args) -> None:
        """Log `message % args` at WARNING unless `uid` has had its lines in this window."""
        now = time.monotonic()
        with self.lock:
            w = self.windows.get(uid)
            if w is None or now - w[0] >= self.interval:
                self._close(uid, w)
                w = self.windows[uid] = [now, 0, 0]
            w[1] += 1
            if w[1] > self.burst:
                w[2] += 1
                return
        self.log.warning(message, *args, extra=CLIENT_FAULT)

    def flush(self) -> None:
        """Say what was left out in the windows that have ended (the selector thread
        calls it as it goes round)."""
        now = time.monotonic()
        with self.lock:
            for uid in [u for u, w in self.windows.items() if now - w[0] >= self.interval]:
                self._close(uid, self.windows.pop(uid))

    def _close(self, uid: int, w: list | None) -> None:
        if w is not None and w[2]:
            self.log.warning(
                "uid %d: %d more lines about its clients not logged in %g s",
                uid,
                w[2],
                self.interval,
                extra=CLIENT_FAULT,
            )


def expired(sel: selectors.BaseSelector, now: float) -> list[Client]:
    """The clients registered with `sel` whose deadline has passed at `now` (monotonic s)."""
    return [key.data for key in sel.get_map().values() if key.data and now > key.data.deadline]


def wait(sel: selectors.BaseSelector) -> float | None:
    """How long the selector may wait: until the nearest client's deadline, for ever with
    no client (a wake-up interrupts it), so an idle daemon's thread sleeps."""
    deadlines = [key.data.deadline for key in sel.get_map().values() if key.data]
    return max(min(deadlines) - time.monotonic(), 0.0) + 0.01 if deadlines else None
