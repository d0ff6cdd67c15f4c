"""Per-process nice values the daemon sets, remembered so they can be undone.

Two things set a process's nice: the nice enforcer (a value from the lnode's
e_share) and the UDB's `nice` field of the process's user or account (its default
nice, see man/shrdaemon.8).  Both combine them with the nice the process had before
the daemon touched it by `user_floor`, and both keep their books in a `Renicer`: the
daemon's applies the UDB's nice beside the cgroup enforcers
(fairshare.enforce.switch); the nice enforcer's folds it into its own values and also
follows children that inherited a value it set (its `original` hook):

- the user's floor (`user_floor`): a process still at the default nice 0 gets the
  UDB's nice (which may be negative, a boost); a process at any other nice (the
  user, or its parent, chose it) keeps it, raised to the UDB's nice if that is higher;
  a UDB nice of 0 (the default: none given) leaves every process's own nice as it is;
- the value set is the larger of the enforcer's target and that floor, so neither
  the daemon nor the UDB ever lowers a nice the user chose;
- `restore` puts back the original of every process whose nice is still the one
  set here (a user who reniced since keeps their own), and the kernel's default time
  slice of every process given another (the nice enforcer's long slices, see
  fairshare.enforce.nice).

Every change goes through the OsActions object (fairshare.enforce.actions).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from fairshare.enforce.actions import OsActions

log = logging.getLogger("shrdaemon")

#: The strongest nice value: a target of NICE_LOWEST means "only the user's floor".
NICE_LOWEST = -20


def user_floor(own: int, udb_nice: int) -> int:
    """The lowest nice the daemon may give a process whose own nice is `own`, for a
    user (or account) whose UDB nice is `udb_nice`: `own` when `udb_nice` is the
    default 0, the UDB nice when `own` is the default 0, else the larger of the two."""
    if udb_nice == 0:
        return own
    return udb_nice if own == 0 else max(own, udb_nice)


@dataclass
class Changed:
    """A nice value the daemon changed: what it was before, what we set last, and every
    value we set other than the original (a child forked since inherited one of them)."""

    original: int
    ours: int
    given: set[int] = field(default_factory=set)
    slice_ns: int = 0  # the time slice we set (0: the kernel's default, untouched)


def _as_found(pid: int, current: int) -> Changed:
    return Changed(original=current, ours=current)


class Renicer:
    """Sets per-process nice values through `actions`, remembering the originals.

    `first_seen(pid, current)` says what a process first seen at nice `current` had
    before the daemon (default: `current` and the default slice; the nice enforcer's
    knows what a child inherited from a parent it changed)."""

    def __init__(
        self, actions: OsActions, first_seen: Callable[[int, int], Changed] = _as_found
    ) -> None:
        self.actions = actions
        self.first_seen = first_seen
        self.changed: dict[int, Changed] = {}  # pid -> its change
        self.slices = True  # False once the kernel refused a time slice

    def renice(
        self, pid: int, target: int = NICE_LOWEST, udb_nice: int = 0, slice_ns: int | None = None
    ) -> int | None:
        """Give `pid` the larger of `target` and its user floor (`user_floor` of its
        original nice and `udb_nice`), and the time slice `slice_ns` unless None;
        returns the nice it has now, None if gone."""
        try:
            current = self.actions.get_nice(pid)
        except OSError:
            self.changed.pop(pid, None)
            return None
        ch = self.changed.get(pid)
        if ch is None:
            ch = self.first_seen(pid, current)
        elif current != ch.ours:  # the user changed it since
            ch = Changed(original=current, ours=current, slice_ns=ch.slice_ns)
        value = max(target, user_floor(ch.original, udb_nice))
        if slice_ns is not None and slice_ns != ch.slice_ns and self.slices:
            if not self._set_slice(pid, value, slice_ns, ch):
                return current
        elif value != current:
            try:
                self.actions.set_nice(pid, value)
            except OSError:
                return current
        ch.ours = value
        if value != ch.original:
            ch.given.add(value)
        self.changed[pid] = ch
        return value

    def _set_slice(self, pid: int, nice: int, slice_ns: int, ch: Changed) -> bool:
        """Set nice and time slice in one call; a kernel without the call stops the
        slices (logged once) and sets the nice alone."""
        try:
            self.actions.set_slice(pid, nice, slice_ns)
            ch.slice_ns = slice_ns
            return True
        except OSError as err:
            if err.errno not in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
                return False
            self.slices = False
            log.warning("nice: the kernel refused a time slice (%s); setting nice values only", err)
        try:
            self.actions.set_nice(pid, nice)
            return True
        except OSError:
            return False

    def forget(self, alive: set[int]) -> None:
        """Drop what we remember of processes not in `alive` (they are gone)."""
        for pid in [p for p in self.changed if p not in alive]:
            del self.changed[pid]

    def restore(self) -> None:
        """Put back the original nice of every process still at the value we set, and the
        default time slice of every process we gave another."""
        for pid, ch in self.changed.items():
            try:
                nice = self.actions.get_nice(pid)
                if ch.ours != ch.original and nice == ch.ours:
                    nice = ch.original
                    if not ch.slice_ns:
                        self.actions.set_nice(pid, nice)
                if ch.slice_ns:
                    self.actions.set_slice(pid, nice, 0)
            except OSError:
                pass
        self.changed.clear()
