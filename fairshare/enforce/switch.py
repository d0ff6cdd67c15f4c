"""The daemon's enforcement: its enforcer, on while the constants allow scheduling.

NOSCHED or NOSHARE (Consts.scheduling False) turns the enforcer off: everything it
did is undone (`teardown`) and the daemon only accounts; clearing them sets it up
again.  Where the enforcer's capabilities say so (Capabilities.udb_nice), the UDB's
nice of each lnode is applied to its processes beside it, as a floor
(fairshare.enforce.renice), and undone with it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fairshare.enforce.actions import OsActions, same_process
from fairshare.enforce.base import Enforcer, LnodeTarget
from fairshare.enforce.renice import Renicer

log = logging.getLogger("shrdaemon")


class Enforcement:
    """`enforcer`, switched on and off by the constants, and the UDB's nice beside it
    (changed through `actions`, the daemon's and the enforcer's one machine)."""

    def __init__(self, enforcer: Enforcer, actions: OsActions) -> None:
        self.enforcer = enforcer
        self.user_nice = Renicer(actions)  # the UDB's nice beside cgroup enforcement
        self.scheduling = True  # False while NOSCHED/NOSHARE keep the enforcer off
        self.set_up = False

    @property
    def name(self) -> str:
        """The enforcer in force: its name, "none" while scheduling is off."""
        return self.enforcer.name if self.scheduling else "none"

    def sync(self, scheduling: bool) -> None:
        """Keep the enforcer on while `scheduling` (no NOSCHED nor NOSHARE), off otherwise."""
        if scheduling and not self.set_up:
            self.enforcer.setup()
            self.set_up = True
            if not self.scheduling:
                log.info("NOSCHED/NOSHARE cleared: %s enforcement resumes", self.enforcer.name)
        elif not scheduling and self.set_up:
            self.undo()
            log.info("NOSCHED/NOSHARE set: accounting only, %s undone", self.enforcer.name)
        self.scheduling = scheduling

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Hand `targets` to the enforcer, then raise (or, from the default 0, set) every
        target process's nice to its lnode's UDB nice where the enforcer leaves that to
        the daemon."""
        self.enforcer.apply(targets)
        if not self.enforcer.capabilities.udb_nice:
            return
        self.user_nice.forget({pid for t in targets for pid in t.pids})
        actions = self.user_nice.actions
        for t in targets:
            for pid, started in t.processes():
                # UDB nice 0 changes nothing, unless we set this process before (the
                # entry's nice was reset since): then its own nice comes back.  A pid
                # sampled cycles ago may be another process's now: it is left alone.
                if not (t.nice or pid in self.user_nice.changed):
                    continue
                if same_process(actions, pid, started):
                    self.user_nice.renice(pid, udb_nice=t.nice)
                else:
                    self.user_nice.changed.pop(pid, None)

    def undo(self) -> None:
        """Undo everything the enforcer and the UDB's nice did (when set up)."""
        if self.set_up:
            self.enforcer.teardown()
            self.user_nice.restore()
            self.set_up = False
