"""What the daemon owes the UDB, and when it pays.

A write-back adds what every active leaf lnode accrued to its entry (`leave`:
increments, so hosts sharing one UDB never erase each other's charges; the CPU seconds
written move into the entry's cpuquotaused) and releases some lnodes, as its
`WriteBackMode` says:

- PERIODIC, every `writeback` seconds (shradmin -W): the lnodes whose processes have
  all gone are released (never Idle);
- SYNC, shrsync -u (fairshare.daemon.sync): every active lnode is written, none released;
- SHUTDOWN, when the daemon stops: every lnode is written and released.

Every `checkpoint` seconds the daemon checkpoints every active lnode's unwritten
increment, from which the next start recovers after a crash (fairshare.store.published).
Increments the UDB does not take (it cannot be reached) are kept in `pending` and
written with the next write-back that it takes.
"""

from __future__ import annotations

import dataclasses
import enum
import logging

import numpy as np

from fairshare.core.consts import Consts
from fairshare.core.lnode import WriteBack, accrued, release
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.state import Lnodes
from fairshare.store.published import LnodeStore

log = logging.getLogger("shrdaemon")


class WriteBackMode(enum.Enum):
    """Which lnodes a write-back releases, and whether the entries are read after it."""

    PERIODIC = "periodic"  # the write-back interval: release the gone, read again
    SYNC = "sync"  # shrsync -u: release none, read again
    SHUTDOWN = "shutdown"  # the daemon stops: release every one, read nothing


def leave(ln: Lnodes, now: float, mode: WriteBackMode) -> list[tuple[int, WriteBack]]:
    """What every active leaf lnode accrued up to `now` (epoch s), by uid, releasing
    those `mode` releases: with no processes (PERIODIC; never Idle), none (SYNC), all
    (SHUTDOWN).  The CPU seconds of a lnode kept move into its entry's cpuquotaused, as
    the UDB will hold them once written."""
    t = ln.table
    leaves = t.active & ln.tree.leaf_mask
    if mode is WriteBackMode.SHUTDOWN:
        gone = leaves
    elif mode is WriteBackMode.PERIODIC:
        gone = leaves & (t.refs == 0)
        if ln.idle is not None:
            gone[ln.idle] = False
    else:
        gone = np.zeros_like(leaves)
    out = []
    for n in np.flatnonzero(leaves).tolist():
        uid = int(ln.tree.ids[n])
        if gone[n]:
            out.append((uid, release(t, n, now)))
            ln.entry.pop(n, None)
            ln.warned.discard(n)
            continue
        wb = accrued(t, n, now)
        out.append((uid, wb))
        st = ln.entry.get(n)
        if st is not None:
            ln.entry[n] = dataclasses.replace(st, cpuquotaused=st.cpuquotaused + wb.cpu_seconds)
    return out


class WriteBacks:
    """The write-back and checkpoint timers (monotonic s), the increments not yet
    written, and how many lnodes were written and checkpoints taken since start."""

    def __init__(self, store: LnodeStore, udb: UdbCalls) -> None:
        self.store, self.udb = store, udb
        self.pending: list[tuple[int, WriteBack]] = []  # by uid, the UDB has not taken
        self.writebacks = 0
        self.checkpoints = 0
        self.next_writeback = 0.0
        self.next_checkpoint = 0.0

    def start(self, mono: float, consts: Consts) -> None:
        """The first write-back and checkpoint come one interval after `mono`."""
        self.next_writeback = mono + consts.writeback
        self.next_checkpoint = mono + consts.checkpoint

    def writeback_due(self, mono: float, consts: Consts) -> bool:
        """Whether the write-back is due at `mono` (then the next is one interval on)."""
        if mono < self.next_writeback:
            return False
        self.next_writeback = mono + consts.writeback
        return True

    def write_back(
        self, ln: Lnodes, now: float, halflife: float, mode: WriteBackMode
    ) -> int | None:
        """Write what the lnodes of `ln` accrued up to `now` (epoch s) and what was kept,
        releasing as `mode` says (`leave`); returns how many lnodes were written, None
        when the UDB did not take them (they are kept)."""
        out = leave(ln, now, mode)
        self.pending.extend(out)
        if self.udb.call("write back", self.store.write_back, self.pending, halflife) is None:
            return None
        written, self.pending = len(self.pending), []
        self.writebacks += written
        if out:
            log.debug("wrote back %d lnodes", written)
        return written

    def checkpoint_if_due(self, ln: Lnodes, mono: float, now: float, consts: Consts) -> None:
        """Checkpoint every active lnode of `ln` at `now` (epoch s) when the checkpoint
        is due at `mono`."""
        if mono < self.next_checkpoint:
            return
        self.next_checkpoint = mono + consts.checkpoint
        n = self.udb.call("checkpoint", self.store.checkpoint, ln.tree, ln.table, now)
        if n is not None:
            self.checkpoints += 1
        log.debug("checkpointed %s lnodes", n)

    def log_unwritten(self) -> None:
        """Say what the UDB did not take before the daemon stopped (if anything)."""
        if self.pending:
            log.error(
                "UDB unreachable at exit: the increments of %d lnodes (usage %.6g, charge "
                "%.6g) were not written back",
                len(self.pending),
                sum(wb.shusage for _u, wb in self.pending),
                sum(wb.charge for _u, wb in self.pending),
            )
