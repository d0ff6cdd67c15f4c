"""shrsync's requests: bring the UDB and a running shrdaemon's lnodes into step (guide 4.7).

shrsync does not signal the daemon: it inserts a `SyncRequest` row for the daemon's
host and waits for the daemon to mark it done; the daemon looks for requests once a
cycle (`serve_requests`, called from `Daemon.step`), so this works the same on the real
machine and on the simulator, and as an unprivileged administrator.

- "update" (shrsync -u): what every active leaf lnode accrued since it was created (or
  last written) is added to its entry, as the daemon does every write-back interval:
  its usage increment to shusage (shextime = now), its charges to shcharge and its CPU
  seconds to cpuquotaused; the lnode is marked written and its checkpoint rows dropped,
  so nothing is counted twice (not at release, not after a crash).
- "quota" (shrsync -q): every active leaf lnode takes its entry's cpuquotaused as its
  new base for the CPU quota, so a quota cleared with udbgen acts at once.

The guide's procedure for clearing an active user's quota is therefore
``shrsync -u; udbgen -c 'update:USER:cpuquotaused:0:'; shrsync -q``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Engine, delete, select, update
from sqlalchemy.orm import Session

from udb.errors import UdbError
from udb.models import LnodeCycle, SyncRequest
from udb.session import read_session, write_session

#: Request kinds: shrsync -u and shrsync -q.
UPDATE = "update"
QUOTA = "quota"
KINDS = (UPDATE, QUOTA)


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


# -- the daemon's side ---------------------------------------------------------------------


def serve_requests(daemon, now: float) -> int:
    """Handle the pending requests for the daemon's host (called once a cycle by
    `fairshare.daemon.Daemon.step`; `now` epoch s).  Returns how many it handled."""
    host = daemon.store.host
    with read_session(daemon.engine) as s:
        pending = s.execute(
            select(SyncRequest.id, SyncRequest.kind)
            .where(SyncRequest.host == host, SyncRequest.done.is_(None))
            .order_by(SyncRequest.id)
        ).all()
    for rid, kind in pending:
        count = update_udb(daemon, now) if kind == UPDATE else reread_quotas(daemon)
        with write_session(daemon.engine) as s:
            s.execute(
                update(SyncRequest).where(SyncRequest.id == rid).values(done=now, lnodes=count)
            )
    return len(pending)


def _active_leaves(daemon) -> list[int]:
    ln = daemon.lnodes
    return np.flatnonzero(ln.table.active & ln.tree.leaf_mask).tolist()


def update_udb(daemon, now: float) -> int:
    """shrsync -u: add what every active leaf lnode accrued to the UDB without releasing
    it (fairshare.daemon.Daemon.write_back); returns how many lnodes were written."""
    return daemon.write_back(now, everything=False, release_gone=False)


def reread_quotas(daemon) -> int:
    """shrsync -q: every active leaf lnode takes its entry's cpuquotaused as its quota
    base; returns how many lnodes were refreshed."""
    nodes = _active_leaves(daemon)
    _reread_entries(daemon, nodes)
    ln = daemon.lnodes
    for n in nodes:
        st = ln.entry.get(n)
        t = ln.table
        if st is not None and st.cpuquotaused + float(t.cpu_seconds[n] - t.cpu_written[n]) < (
            st.cpuquota
        ):
            ln.warned.discard(n)  # under the quota again: warn again when it is reached
    return len(nodes)


def _reread_entries(daemon, nodes: list[int]) -> None:
    ln = daemon.lnodes
    states = daemon.store.entry_states(int(ln.tree.ids[n]) for n in nodes)
    for n in nodes:
        st = states.get(int(ln.tree.ids[n]))
        if st is not None:
            ln.entry[n] = st


def pending(engine: Engine, host: str | None = None) -> list[SyncRequest]:
    """Requests not yet handled (of `host` when given), oldest first."""
    with read_session(engine) as s:
        q = select(SyncRequest).where(SyncRequest.done.is_(None)).order_by(SyncRequest.id)
        if host is not None:
            q = q.where(SyncRequest.host == host)
        rows = list(s.scalars(q))
        s.expunge_all()
    return rows
