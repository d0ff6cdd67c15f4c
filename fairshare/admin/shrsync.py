"""shrsync's library: bring the UDB and a running shrdaemon's lnodes into step (guide 4.7).

`submit` queues a request (a `SyncRequest` row) for the daemon of a host and `wait`
waits for the daemon to mark it done (fairshare.daemon.sync serves it once a cycle).

The guide's procedure for clearing an active user's quota is therefore
``shrsync -u; udbgen -c 'update:USER:cpuquotaused:0:'; shrsync -q``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from fairshare.daemon.sync import KINDS
from udb.errors import UdbError
from udb.models import LnodeCycle, SyncRequest
from udb.session import read_session, write_session


class NoDaemon(UdbError):
    """No running shrdaemon answered a request."""


@dataclass(frozen=True)
class Done:
    """A request the daemon handled: its id, kind, when it was handled (epoch s) and how
    many lnodes it touched."""

    id: int
    kind: str
    host: str
    done: float
    lnodes: int


def running_daemon(session: Session, host: str) -> LnodeCycle:
    """The published cycle header of the daemon running on `host`; NoDaemon if none is."""
    head = session.get(LnodeCycle, host)
    if head is None:
        raise NoDaemon(f"no shrdaemon has run on host {host} with this UDB")
    if not head.running:
        raise NoDaemon(f"the shrdaemon of host {host} is not running (it stopped)")
    return head


def submit(engine: Engine, host: str, kind: str, who: str, now: float) -> tuple[int, float]:
    """Ask the daemon of `host` for `kind` ("update" or "quota"); returns the request's
    id and the daemon's cycle length (s).  NoDaemon when no daemon runs there."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    with write_session(engine) as s:
        head = running_daemon(s, host)
        req = SyncRequest(host=host, kind=kind, who=who, requested=now)
        s.add(req)
        s.flush()
        return req.id, float(head.delta)


def wait(
    engine: Engine,
    request_id: int,
    timeout: float,
    poll: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Done:
    """Wait up to `timeout` seconds for the daemon to handle request `request_id`.

    Returns what it did.  On timeout the request is withdrawn (so a daemon started
    later does not act on it) and NoDaemon is raised.
    """
    deadline = clock() + timeout
    while True:
        with read_session(engine) as s:
            req = s.get(SyncRequest, request_id)
            if req is None:
                raise NoDaemon(f"request {request_id} vanished")
            if req.done is not None:
                return Done(req.id, req.kind, req.host, req.done, req.lnodes or 0)
            host = req.host
        if clock() >= deadline:
            break
        sleep(poll)
    with write_session(engine) as s:
        withdrawn = s.execute(
            delete(SyncRequest).where(SyncRequest.id == request_id, SyncRequest.done.is_(None))
        ).rowcount
        if not withdrawn:  # handled just now
            req = s.get(SyncRequest, request_id)
            return Done(req.id, req.kind, req.host, req.done, req.lnodes or 0)
    raise NoDaemon(
        f"no running shrdaemon on host {host} answered within {timeout:g} s (request withdrawn)"
    )


def pending(engine: Engine, host: str | None = None) -> list[SyncRequest]:
    """Requests not yet handled (of `host` when given), oldest first."""
    with read_session(engine) as s:
        q = select(SyncRequest).where(SyncRequest.done.is_(None)).order_by(SyncRequest.id)
        if host is not None:
            q = q.where(SyncRequest.host == host)
        rows = list(s.scalars(q))
        s.expunge_all()
    return rows
