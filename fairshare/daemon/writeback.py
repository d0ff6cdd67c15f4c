"""What the daemon owes the UDB, and when it pays.

Every `writeback` seconds (shradmin -W) the daemon adds what every active leaf
lnode accrued to its entry (fairshare.daemon.state.leave: increments, so hosts sharing
one UDB never erase each other's charges) and releases the lnodes whose processes
have all gone; every `checkpoint` seconds it checkpoints every active lnode's
unwritten increment, from which the next start recovers after a crash
(fairshare.store.published).  Increments the UDB does not take (it cannot be reached) are
kept in `pending` and written with the next write-back that it takes.
"""

from __future__ import annotations

import logging

from fairshare.core.consts import Consts
from fairshare.core.lnode import WriteBack
from fairshare.daemon.outage import UdbCalls
from fairshare.daemon.state import Lnodes, leave
from fairshare.store.published import LnodeStore

log = logging.getLogger("shrdaemon")


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
        self, ln: Lnodes, now: float, halflife: float, everything: bool, release_gone: bool
    ) -> int | None:
        """Write what the lnodes of `ln` accrued up to `now` (epoch s) and what was kept,
        releasing as fairshare.daemon.state.leave says; returns how many lnodes were written,
        None when the UDB did not take them (they are kept)."""
        out = leave(ln, now, everything, release_gone)
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
