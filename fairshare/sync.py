"""shrsync's requests: bring the UDB and a running shrdaemon's lnodes into step (guide 4.7).

shrsync does not signal the daemon: it inserts a `SyncRequest` row for the daemon's
host and waits for the daemon to mark it done; the daemon looks for requests once a
cycle (`serve_requests`, called from `Daemon.step` with a handler per kind), so this
works the same on the real machine and on the simulator, and as an unprivileged
administrator.  The handlers work on the daemon's lnode state (fairshare.state.Lnodes)
through its store.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlalchemy import Engine, bindparam, delete, select, update
from sqlalchemy.orm import Session

from fairshare.state import EntryReader, Lnodes, refresh_entries
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


_PENDING = (
    select(SyncRequest.id, SyncRequest.kind)
    .where(SyncRequest.host == bindparam("host"), SyncRequest.done.is_(None))
    .order_by(SyncRequest.id)
)


def serve_requests(
    engine: Engine, host: str, now: float, handlers: Mapping[str, Callable[[], int]]
) -> int:
    """Handle the pending requests for `host` (called once a cycle by
    `fairshare.daemon.Daemon.step`; `now` epoch s): each by its kind's handler in
    `handlers`, which returns how many lnodes it touched (UPDATE: the daemon's
    write-back without release; QUOTA: `reread_quotas`).  Returns how many it handled."""
    with read_session(engine) as s:  # every cycle: Core, one statement built once
        pending = s.connection().execute(_PENDING, {"host": host}).all()
    for rid, kind in pending:
        count = handlers[kind]()
        with write_session(engine) as s:
            s.execute(
                update(SyncRequest).where(SyncRequest.id == rid).values(done=now, lnodes=count)
            )
    return len(pending)


def reread_quotas(ln: Lnodes, store: EntryReader) -> int:
    """shrsync -q: every active leaf lnode of `ln` takes its entry's cpuquotaused (read
    through `store`) as its quota base; returns how many lnodes were refreshed."""
    nodes = ln.active_leaves()
    refresh_entries(ln, store, nodes)
    t = ln.table
    for n in nodes:
        st = ln.entry.get(n)
        if st is not None and st.cpuquotaused + float(t.cpu_seconds[n] - t.cpu_written[n]) < (
            st.cpuquota
        ):
            ln.warned.discard(n)  # under the quota again: warn again when it is reached
    return len(nodes)


def pending(engine: Engine, host: str | None = None) -> list[SyncRequest]:
    """Requests not yet handled (of `host` when given), oldest first."""
    with read_session(engine) as s:
        q = select(SyncRequest).where(SyncRequest.done.is_(None)).order_by(SyncRequest.id)
        if host is not None:
            q = q.where(SyncRequest.host == host)
        rows = list(s.scalars(q))
        s.expunge_all()
    return rows
