"""Counting without scheduling: per-lnode cgroups of an accounting-only controller
beside the nice and none enforcers.

The nice and none enforcers leave each process in the cgroups it has, so the daemon
would know only what it samples per process: a child that outlives its parent (a
double-forked orphan, reparented to init and reaped there) was never charged, which
let a user run almost all their work off the books.  So where the daemon is root and
the machine offers one, the processes of every lnode are also put in a cgroup of their
lnode in a hierarchy that only counts: cgroup v1's cpuacct controller
(``MOUNT/fairshare/+<group>/<lnode>/cpuacct.usage``, MOUNT e.g. /sys/fs/cgroup/cpuacct)
where it is mounted apart from cpu, else cgroup v2, whose ``cpu.stat`` (usage_usec)
every cgroup has without the cpu controller.  Neither weighs anything: the CPU each
process gets is still the nice enforcer's doing (or nobody's).  A child inherits its
parent's cgroup, so the kernel counts every CPU second of the lnode's processes,
however short-lived and whoever reaps them, exactly once; `Counted` hands these
counters to the collector (fairshare.collect.procfs) as the cgroup enforcers do theirs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fairshare.collect import GroupReading
from fairshare.enforce.actions import OsActions
from fairshare.enforce.base import Enforcer, LnodeTarget
from fairshare.enforce.cgroupfs import CgroupEnforcer
from fairshare.enforce.mapping import CgroupTree


class AccountingCgroups(CgroupEnforcer):
    """Nested lnode cgroups that weigh nothing, only count: in cgroup v1's cpuacct
    hierarchy (`v1`) or in cgroup v2 (cpu.stat's usage_usec)."""

    name = "accounting"

    def __init__(self, mount: Path, actions: OsActions, v1: bool, proc: str = "/proc") -> None:
        self.controller = "cpuacct" if v1 else None
        self.counter_file = "cpuacct.usage" if v1 else "cpu.stat"
        super().__init__(mount, actions, proc=proc, acct=Path(mount) if v1 else None)

    def tree_weights(self, tree: CgroupTree, e_share: np.ndarray, background: np.ndarray):
        """No knob: an empty tuple per cgroup."""
        return [()] * len(tree.keys)

    def write_weight(self, cgroup: Path, values: tuple) -> None:
        """Nothing to write."""

    def parse_counter(self, text: bytes) -> float:
        """CPU seconds from cpuacct.usage (ns) or cpu.stat's usage_usec."""
        if self.controller is not None:
            return int(text) / 1e9
        for line in text.splitlines():
            key, _, value = line.partition(b" ")
            if key == b"usage_usec":
                return int(value) / 1e6
        raise ValueError("cpu.stat has no usage_usec")


class Counted:
    """`enforcer` (nice or none) with `acct`'s lnode cgroups beside it: the same name
    and actions, its capabilities plus `places` and `counts` (the accounting cgroups')."""

    def __init__(self, enforcer: Enforcer, acct: AccountingCgroups) -> None:
        self.inner, self.acct = enforcer, acct
        self.name = enforcer.name
        self.actions = enforcer.actions
        self.capabilities = dataclasses.replace(enforcer.capabilities, places=True, counts=True)

    def setup(self) -> None:
        """Set up the accounting cgroups, then the enforcer."""
        self.acct.setup()
        self.inner.setup()

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """The enforcer's settings, then every target's processes in its lnode's
        accounting cgroup."""
        self.inner.apply(targets)
        self.acct.apply(targets)

    def place(self, pid: int, lnode: str, groups: Sequence[str] = ()) -> None:
        """Put a new process in its lnode's accounting cgroup now (the enforcer's
        settings come with the next cycle)."""
        self.acct.place(pid, lnode, groups)

    def read_groups(self, members: bool = True) -> dict[str, GroupReading]:
        """The accounting cgroups' counters (CgroupEnforcer.read_groups)."""
        return self.acct.read_groups(members)

    def group_of(self, pid: int) -> str:
        """The lnode cgroup `pid` is in ("" none)."""
        return self.acct.group_of(pid)

    def teardown(self) -> None:
        """Undo the enforcer, then move the processes out and remove the cgroups."""
        self.inner.teardown()
        self.acct.teardown()
