"""The commands' side of shrdaemon's socket (protocol in shrdaemon-protocol(7)).

Every command finds the daemon by `--socket PATH`, else $FAIRSHARE_SOCKET, else
/run/fairshare/shrdaemon.sock.  `call` sends one request and returns the reply.

Which way a command reaches the UDB (`reach`):

- directly, as ever, when the caller may change it: root, or a SQLite UDB file
  (and its directory) the caller may write, such as a personal one;
- else through the daemon, when one answers at the socket: readers get the UDB as
  the caller may see it (`udb.image`), writers send their change for the daemon to
  check and apply;
- else, for readers, a readable SQLite file read-only (a database server: as the
  caller's credentials allow), saying on stderr that it shows the stored state;
- else one line naming the UDB and the socket, exit status 2.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import click
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from udb.errors import UdbError
from udb.image import open_image
from udb.session import display_name, open_readonly, open_udb, resolve_url

#: Where shrdaemon listens unless --socket or FAIRSHARE_SOCKET says otherwise.
DEFAULT_SOCKET = "/run/fairshare/shrdaemon.sock"
#: The protocol version this side speaks.
VERSION = 1
#: Seconds a command waits for the daemon's reply (a shrsync request waits longer).
TIMEOUT = 30.0

socket_option = click.option(
    "--socket",
    "socket_",
    metavar="PATH",
    envvar="FAIRSHARE_SOCKET",
    show_envvar=True,
    help=f"shrdaemon's socket (default {DEFAULT_SOCKET}); used when you cannot "
    "change the UDB yourself.",
)


class NoDaemon(UdbError):
    """No shrdaemon answers at the socket (missing, refused, silent)."""


class Refused(UdbError):
    """The daemon answered with an error (not allowed, bad input)."""


def socket_path(option: str | None = None) -> str:
    """The daemon's socket: `option`, else $FAIRSHARE_SOCKET, else the default."""
    return option or os.environ.get("FAIRSHARE_SOCKET") or DEFAULT_SOCKET


def connect(s: socket.socket, path: str, wait: float) -> None:
    """Connect `s` to `path`; a full listen queue (EAGAIN on a socket with a timeout)
    is retried for up to `wait` seconds, as a blocking connect would wait."""
    deadline = time.monotonic() + wait
    while True:
        try:
            s.connect(path)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError from None
            time.sleep(0.01)


def call(path: str, request: str, wait: float = TIMEOUT, **fields) -> dict:
    """Send `request` with `fields` to the daemon at `path`; its reply (a dict), waited
    for at most `wait` seconds.

    NoDaemon when nothing answers there, Refused when the daemon says no.
    """
    line = json.dumps({"v": VERSION, "request": request, **fields}).encode() + b"\n"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(wait)
    try:
        connect(s, path, wait)
        s.sendall(line)
        chunks = []
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                break
    except FileNotFoundError:
        raise NoDaemon(f"{path}: no such socket: is shrdaemon running? (--socket)") from None
    except ConnectionRefusedError:
        raise NoDaemon(f"{path}: connection refused: shrdaemon is not running") from None
    except PermissionError:
        raise NoDaemon(f"{path}: permission denied: ask root to check the socket") from None
    except TimeoutError:
        raise NoDaemon(f"{path}: shrdaemon did not answer within {wait:g} s") from None
    except OSError as err:
        raise NoDaemon(f"{path}: {err.strerror or err}: is shrdaemon running?") from None
    finally:
        s.close()
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        raise NoDaemon(f"{path}: the daemon's reply was cut short or not JSON") from None
    if not reply.get("ok"):
        raise Refused(f"shrdaemon: {reply.get('error', 'request refused')}")
    return reply


def may_write(url: str) -> bool:
    """Whether the caller may change the UDB at `url` itself: root, or a SQLite file
    that exists and that the caller, and its directory, may write."""
    if os.geteuid() == 0:
        return True
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return False
    if u.database in (None, "", ":memory:"):
        return True
    path = Path(u.database)
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


@dataclass
class Reach:
    """How a command reaches the UDB: `socket` is the daemon's (None: directly)."""

    url: str
    socket: str | None

    @property
    def direct(self) -> bool:
        return self.socket is None


def reach(udb: str | None, socket_: str | None) -> Reach:
    """The way to the UDB named by `udb` for a command that writes (see the module
    docstring): directly when the caller may change it, else the daemon's socket."""
    url = resolve_url(udb)
    return Reach(url, None if may_write(url) else socket_path(socket_))


class Reader:
    """The UDB for a reading command: `engine` is the UDB itself, the daemon's image of
    it for the caller, or the file opened read-only; `refresh` fetches a new image."""

    def __init__(self, udb: str | None, socket_: str | None) -> None:
        self.via = reach(udb, socket_)
        self.stored = False  # True: read-only, no daemon behind it
        self.viewer = os.getuid()
        self._fresh = True  # the copy just fetched has not been handed out yet
        if self.via.direct:
            self.engine = open_udb(self.via.url)
            return
        try:
            self._fetch()
        except NoDaemon as err:
            sqlite = make_url(self.via.url).get_backend_name() == "sqlite"
            if sqlite and not self._readable():
                raise NoDaemon(f"cannot read UDB {display_name(self.via.url)} and {err}") from None
            self.via.socket = None
            self.stored = True
            # A database server decides itself whether the caller may read it.
            self.engine = open_readonly(self.via.url) if sqlite else open_udb(self.via.url)
            click.echo(
                f"{click.get_current_context().info_name}: {err}; showing the stored state "
                f"of UDB {display_name(self.via.url)} (read-only)",
                err=True,
            )

    def _readable(self) -> bool:
        database = make_url(self.via.url).database
        return database not in (None, "", ":memory:") and os.access(database, os.R_OK)

    def refresh(self) -> Engine:
        """A fresh copy from the daemon (directly: the same engine); returns it."""
        if self.via.direct or self._fresh:
            self._fresh = False
            return self.engine
        return self._fetch()

    def _fetch(self) -> Engine:
        reply = call(self.via.socket, "udb")
        self.engine = open_image(base64.b64decode(reply["image"]))
        self.viewer = int(reply["uid"])
        self._name = reply.get("udb")  # the daemon's UDB (an older daemon does not say)
        return self.engine

    @property
    def name(self) -> str:
        """The UDB read, as displays name it: the daemon's when read through it."""
        return getattr(self, "_name", None) or display_name(self.via.url)

    @property
    def through_daemon(self) -> bool:
        return not self.via.direct

    def cycle(self, host: str | None) -> int | None:
        """The published cycle number of `host`, asked of the daemon (a cheap question,
        for waiting)."""
        return call(self.via.socket, "cycle", host=host).get("cycle")
