"""New sessions placed between cycles, the moment they appear.

With an enforcer that places processes (Capabilities.places: the cgroup enforcers) and
the kernel's process events (fairshare.enforce.events), a process that has just become
a user's is put in its lnode's cgroup at once (`Placing.place_new`, called on the
events' thread), so it does not run unplaced until the next cycle.  Share by User only:
in Share by Account the session's account is known from the next sample.  Once the
processes already running are placed (by the first two cycles since, which list every
process: children forked while their parent was being moved are found by the second),
the collector need not look for unplaced processes every cycle (`Placing.skim`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from fairshare.collect import ProcessSample
from fairshare.daemon.accounts import AccountLookup
from fairshare.daemon.charges import leaf_of
from fairshare.daemon.state import Lnodes
from fairshare.enforce.switch import Enforcement


class ProcessEvents(Protocol):
    """New processes as they become a user's (fairshare.enforce.events.ProcessEvents)."""

    #: Whether the events are being heard now.
    listening: bool

    def start(self, on_uid: Callable[[int, int], None]) -> bool:
        """Call `on_uid(pid, uid)` for each process that becomes uid's."""
        ...

    def stop(self) -> None:
        """Stop listening."""
        ...


class Placing:
    """New processes placed through `enforcement`'s enforcer as `events` (None: no
    events) report them; processes of uids below `min_uid` are never moved;
    `accounts`: the daemon's account lookup."""

    def __init__(
        self,
        events: ProcessEvents | None,
        enforcement: Enforcement,
        min_uid: int,
        accounts: AccountLookup | None,
    ) -> None:
        self.events = events
        self.enforcement = enforcement
        self.min_uid = min_uid
        self.accounts = accounts
        self._lnodes: Callable[[], Lnodes | None] = lambda: None  # the daemon's, once started
        self._cycles = 0  # cycles since every new session has been placed as it appears

    def start(self, lnodes: Callable[[], Lnodes | None]) -> None:
        """Listen for new processes when the enforcer places them; `lnodes` gives the
        daemon's lnodes at the time a process is reported."""
        self._lnodes = lnodes
        if self.events is not None and self.enforcement.enforcer.capabilities.places:
            self.events.start(self.place_new)

    def stop(self) -> None:
        """Stop listening."""
        if self.events is not None:
            self.events.stop()

    def skim(self, ln: Lnodes) -> bool:
        """Whether this cycle's sample may skip looking for unplaced processes (called
        once a cycle, before the sample, with the daemon's lnodes): from the third cycle
        that new sessions have been placed as they appear, unless the enforcer weighs
        every process by its own nice value (nice): it must see each one, and how
        many are runnable, every cycle (a make -j8's compilers, born and gone between
        full samples, were never seen, and the build looked as if it wanted only what
        it got)."""
        caps = self.enforcement.enforcer.capabilities
        self._cycles = self._cycles + 1 if self._at_once(ln) and not caps.sets_nice else 0
        return self._cycles > 2

    def _at_once(self, ln: Lnodes) -> bool:
        """Whether `place_new` puts every new session of `ln` in place as it appears."""
        return (
            self.events is not None
            and self.events.listening
            and self.enforcement.enforcer.capabilities.places
            and self.enforcement.scheduling
            and ln.tree.mode != "account"
        )

    def place_new(self, pid: int, uid: int) -> None:
        """Put process `pid`, which has just become uid `uid`'s, in its lnode's cgroup now
        (called from the process-events thread)."""
        ln = self._lnodes()
        if ln is None or not self.enforcement.scheduling or uid < self.min_uid:
            return
        if ln.tree.mode == "account":
            return
        node = leaf_of(ln, ProcessSample(pid=pid, create_time=0.0, uid=uid), self.accounts)
        if node is not None:
            names = ln.tree.names
            groups = [names[g] for g in ln.tree.ancestors(node)[-2::-1]]  # top first
            self.enforcement.enforcer.place(pid, names[node], groups)
