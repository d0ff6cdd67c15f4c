"""The daemon's side of shrsync (guide 4.7): the requests shrsync queued for this host,
served once a cycle (fairshare.admin.shrsync is the client's side).

shrsync does not signal the daemon: it inserts a `SyncRequest` row for the daemon's
host and waits for the daemon to mark it done; `serve`, called from the daemon's cycle
when its poll saw requests waiting, finds them with one cheap statement
(`serve_requests`, a handler per kind), so this works the same on the real machine and
on the simulator, and as an unprivileged administrator.  The handlers work on the
daemon's lnode state (fairshare.daemon.state).

- UPDATE (shrsync -u): what every active leaf lnode accrued since it was created (or
  last written) is added to its entry, as the daemon does every write-back interval
  but releasing none (the daemon's write-back in fairshare.daemon.writeback's SYNC
  mode): its usage increment to shusage (shextime = now), its charges to shcharge and
  its CPU seconds to cpuquotaused; the lnode is marked written and its checkpoint rows
  dropped, so nothing is counted twice (not at release, not after a crash).
- QUOTA (shrsync -q): every active leaf lnode takes its entry's cpuquotaused as its
  new base for the CPU quota (`reread_quotas`), so a quota cleared with udbgen acts at
  once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from sqlalchemy import Engine, bindparam, select, update

from fairshare.daemon.state import EntryReader, Lnodes, refresh_entries
from fairshare.store.published import LnodeStore
from udb.models import SyncRequest
from udb.session import read_session, write_session

#: Request kinds: shrsync -u and shrsync -q.
UPDATE = "update"
QUOTA = "quota"
KINDS = (UPDATE, QUOTA)


_PENDING = (
    select(SyncRequest.id, SyncRequest.kind)
    .where(SyncRequest.host == bindparam("host"), SyncRequest.done.is_(None))
    .order_by(SyncRequest.id)
)


def serve(
    engine: Engine, store: LnodeStore, ln: Lnodes, now: float, write_back: Callable[[], int]
) -> int:
    """Serve the requests waiting for the host of `store` at `now` (epoch s): UPDATE by
    `write_back` (the daemon's, in the SYNC mode), QUOTA by `reread_quotas` on `ln`.
    Returns how many it handled."""
    quota = partial(reread_quotas, ln, store)
    return serve_requests(engine, store.host, now, {UPDATE: write_back, QUOTA: quota})


def serve_requests(
    engine: Engine, host: str, now: float, handlers: Mapping[str, Callable[[], int]]
) -> int:
    """Handle the pending requests for `host` (`now` epoch s): each by its kind's handler
    in `handlers`, which returns how many lnodes it touched.  Returns how many it
    handled."""
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
