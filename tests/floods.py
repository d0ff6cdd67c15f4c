"""Hostile clients of shrdaemon's socket and the honest user beside them, for
tests/system/test_floods.py and tests/bench/bench_floods.py: each runs in a forked
child as a real uid (tests/asuser.py), bounded in count and time.

`flood` connects and hangs up as fast as it can, as the campaign's one process that
made 221,394 connections in 10 s; `hold_idle` opens connections and says nothing;
`unread_udb` asks for the UDB on many connections and never reads a reply; `ask`
is the other user, timing each request.
"""

from __future__ import annotations

import json
import socket
import time

from udb.remote import connect


def flood(sock: str, seconds: float, limit: int = 2_000_000) -> int:
    """Connect to `sock` and hang up at once, for `seconds` or `limit` connections; the
    number of connections made."""
    made = 0
    end = time.monotonic() + seconds
    while made < limit and time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(1.0)
            s.connect(sock)
            made += 1
        except OSError:
            pass
        finally:
            s.close()
    return made


def ask(sock: str, count: int, gap: float, request: str = "hello") -> list[float | None]:
    """Ask `request` `count` times, `gap` s apart: the seconds each took from connecting
    to the whole reply, None for one that failed (refused, or no reply in 30 s)."""
    took: list[float | None] = []
    for _ in range(count):
        t0 = time.monotonic()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        try:
            connect(s, sock, 30)
            s.sendall(json.dumps({"v": 1, "request": request}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            ok = json.loads(data).get("ok") if data.endswith(b"\n") else False
            took.append(time.monotonic() - t0 if ok else None)
        except (OSError, ValueError):
            took.append(None)
        finally:
            s.close()
        time.sleep(gap)
    return took


def open_idle(sock: str, count: int) -> list[socket.socket]:
    """`count` connections to `sock` that say nothing (the caller closes them)."""
    held = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        connect(s, sock, 10)
        held.append(s)
    return held


def unread_udb(sock: str, count: int) -> list[socket.socket]:
    """`count` connections that each ask for the UDB and never read the reply (the
    caller closes them)."""
    held = open_idle(sock, count)
    for s in held:
        try:
            s.sendall(b'{"v": 1, "request": "udb"}\n')
        except OSError:
            pass  # refused and closed already
    return held
