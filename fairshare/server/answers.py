"""What shrdaemon answers over its socket (fairshare.server.server), request by request.

Each request is a method taking the caller (`Peer`, as the kernel names it) and the
request's JSON object, and returning the reply's fields, or raising a UdbError (a
`BadRequest` when the request is not what shrdaemon-protocol(7) says) whose message
is the reply's error.  Who may make which request:

- `hello`: anyone; the daemon's protocol version, UDB, host and the caller as seen.
- `udb`: anyone; the UDB as the caller may see it (`udb.image`), for the readers.
- `cycle`: anyone; the published cycle number of a host (shrview waits with it).
- `priority`: anyone; every lnode of a host (default this daemon's) with its
  target-deviation tuple and flat priority, highest first (fairshare.store.priority;
  seed 001's fairshare priority factor callout, for a batch scheduler's plug-in).
- `shrdist`: anyone shrdist.auth lists for the group (root: any group); the same
  checks and the same one transaction as shrdist run by root, recorded under the
  caller's login.
- `newacct`: anyone, for a session they own and one of their own acids.
- `shrsync`: root only.
"""

from __future__ import annotations

import base64
import logging
import pwd
import socket
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from fairshare.admin.shrdist import (
    Caller,
    distribution_json,
    parse_assignments,
    preview,
    redistribute,
)
from fairshare.admin.shrsync import submit, wait
from fairshare.daemon.sessions import SessionAccounts, session_request
from fairshare.daemon.sync import KINDS
from fairshare.store.priority import published_priorities
from fairshare.store.published import LnodeStore
from udb.errors import UdbError
from udb.image import make_image
from udb.remote import VERSION
from udb.session import display_name, read_session, write_session

log = logging.getLogger("shrdaemon")


@dataclass(frozen=True)
class Peer:
    """The process at the other end of a connection, as the kernel says."""

    pid: int
    uid: int
    gid: int

    @property
    def login(self) -> str:
        """The uid's login name (its number when it has no passwd entry)."""
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)

    def __str__(self) -> str:
        return f"uid {self.uid} pid {self.pid}"


def peer_of(conn: socket.socket) -> Peer:
    """The peer's credentials (SO_PEERCRED)."""
    fmt = "3i"
    pid, uid, gid = struct.unpack(
        fmt, conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize(fmt))
    )
    return Peer(pid, uid, gid)


class BadRequest(UdbError):
    """A request that is not what the protocol says."""


class Answers:
    """The requests of one daemon: its UDB `engine`, `host` (the published table's
    key), newacct's `accounts` (None: this daemon keeps none) and shrdist's `auth`."""

    def __init__(
        self, engine: Engine, host: str, accounts: SessionAccounts | None, auth: Path
    ) -> None:
        self.engine, self.host, self.accounts, self.auth = engine, host, accounts, auth
        #: The other sites' usage by entry name, for the priority request (a grid; None:
        #: this site's alone): shrdaemon gives it its daemon's `fairshare.daemon.grid.remote_now`.
        self.remote: Callable[[], Mapping[str, float]] | None = None

    def handlers(self) -> dict[str, Callable[[Peer, dict], dict]]:
        """Each request's name and its method."""
        return {
            "hello": self.hello,
            "udb": self.udb,
            "cycle": self.cycle,
            "priority": self.priority,
            "shrdist": self.shrdist,
            "newacct": self.newacct,
            "shrsync": self.shrsync,
        }

    def hello(self, peer: Peer, req: dict) -> dict:
        return {
            "v": VERSION,
            "udb": display_name(str(self.engine.url)),
            "host": self.host,
            "uid": peer.uid,
            "gid": peer.gid,
            "pid": peer.pid,
            "login": peer.login,
        }

    def udb(self, peer: Peer, req: dict) -> dict:
        return {
            "uid": peer.uid,
            "udb": display_name(str(self.engine.url)),
            "image": base64.b64encode(make_image(self.engine, peer.uid)),
        }

    def cycle(self, peer: Peer, req: dict) -> dict:
        host = _text(req, "host", optional=True)
        return {"cycle": LnodeStore(self.engine, host or self.host).published_cycle()}

    def priority(self, peer: Peer, req: dict) -> dict:
        host = _text(req, "host", optional=True)
        remote = self.remote() if self.remote is not None and host is None else None
        return published_priorities(self.engine, host or self.host, remote).as_json()

    def shrdist(self, peer: Peer, req: dict) -> dict:
        group = _text(req, "group", optional=True)
        shares = req.get("shares", {})
        if not isinstance(shares, dict):
            raise BadRequest("shares: expected an object NAME: SHARES")
        items = [f"{k}={v}" for k, v in shares.items()]
        assignments = parse_assignments([",".join(items)] if items else [])
        caller = Caller(login=peer.login, uid=peer.uid, who=peer.login)
        if req.get("test"):
            with read_session(self.engine) as s:
                _v, d, warnings = preview(s, caller, group, assignments, auth=self.auth)
            return {"distribution": distribution_json(d, False), "warnings": warnings}
        with write_session(self.engine) as s:
            d, warnings = redistribute(
                s, caller, group, assignments, auth=self.auth, now=time.time()
            )
        log.info(
            "shrdist by %s (%s): %s in %s",
            peer,
            peer.login,
            ", ".join(f"{m.name} {m.old}->{m.shares}" for m in d.changed) or "no change",
            d.group,
        )
        return {"distribution": distribution_json(d, True), "warnings": warnings}

    def newacct(self, peer: Peer, req: dict) -> dict:
        if self.accounts is None:
            raise BadRequest("this daemon keeps no session accounts")
        account = _text(req, "account", optional=True)
        session = req.get("session")
        if session is not None and (not isinstance(session, int) or isinstance(session, bool)):
            raise BadRequest("session: expected a session id (a number)")
        with read_session(self.engine) as s:
            return session_request(
                s,
                self.accounts,
                peer.uid,
                peer.pid,
                account=account,
                to_default=bool(req.get("default")),
                session_id=session,
            )

    def shrsync(self, peer: Peer, req: dict) -> dict:
        if peer.uid != 0:
            raise UdbError(f"shrsync: only root may synchronise ({peer.login} is not)")
        kind = _text(req, "kind")
        if kind not in KINDS:
            raise BadRequest(f"kind: expected one of {', '.join(KINDS)}")
        timeout = req.get("timeout")
        rid, delta = submit(self.engine, self.host, kind, peer.login, time.time())
        limit = float(timeout) if isinstance(timeout, int | float) else 3 * delta + 2.0
        d = wait(self.engine, rid, min(limit, 60.0))
        return {
            "done": {"id": d.id, "kind": d.kind, "host": d.host, "done": d.done, "lnodes": d.lnodes}
        }


def _text(req: dict, key: str, optional: bool = False) -> str | None:
    value = req.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > 256:
        raise BadRequest(f"{key}: expected a string")
    return value
