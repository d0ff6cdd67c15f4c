"""The connections shrdaemon's socket holds (fairshare.server.server), and their count.

A `Client` is one connection the selector thread holds, reading its request or writing
its reply, each before a deadline.  `Held` counts the connections at once and per uid
and says why a new one is refused past the limits (shrdaemon-protocol(7): clients at
once, and per uid other than root), so that no one user can take every connection.
`expired` and `wait` are the deadlines' side: which clients are late, and how long the
selector may sleep.
"""

from __future__ import annotations

import selectors
import socket
import time
from dataclasses import dataclass, field

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


class Held:
    """The connections held, at once and per uid, against at most `max_clients` at once
    and `max_per_uid` for one uid other than root (the selector thread's alone)."""

    def __init__(self, max_clients: int, max_per_uid: int) -> None:
        self.max_clients, self.max_per_uid = max_clients, max_per_uid
        self.count = 0
        self.per_uid: dict[int, int] = {}

    def refusal(self, uid: int) -> str | None:
        """Why a new connection of `uid` is refused (None: it may be held)."""
        mine = self.per_uid.get(uid, 0)
        if self.count >= self.max_clients:
            return f"{self.max_clients} clients already"
        if uid != 0 and mine >= self.max_per_uid:
            return f"{mine} connections of this uid already"
        return None

    def hold(self, uid: int) -> None:
        """Count a new connection of `uid`."""
        self.count += 1
        self.per_uid[uid] = self.per_uid.get(uid, 0) + 1

    def release(self, uid: int) -> None:
        """Count a connection of `uid` closed."""
        self.count -= 1
        left = self.per_uid.get(uid, 1) - 1
        if left:
            self.per_uid[uid] = left
        else:
            self.per_uid.pop(uid, None)


def expired(sel: selectors.BaseSelector, now: float) -> list[Client]:
    """The clients registered with `sel` whose deadline has passed at `now` (monotonic s)."""
    return [key.data for key in sel.get_map().values() if key.data and now > key.data.deadline]


def wait(sel: selectors.BaseSelector) -> float | None:
    """How long the selector may wait: until the nearest client's deadline, for ever with
    no client (a wake-up interrupts it), so an idle daemon's thread sleeps."""
    deadlines = [key.data.deadline for key in sel.get_map().values() if key.data]
    return max(min(deadlines) - time.monotonic(), 0.0) + 0.01 if deadlines else None
