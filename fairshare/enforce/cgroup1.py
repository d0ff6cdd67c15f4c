"""The cgroup v1 enforcer: ``cpu.shares`` in MOUNT/fairshare/+<group>/<lnode> (MOUNT is
the cpu hierarchy, e.g. /sys/fs/cgroup/cpu; the nesting: fairshare.enforce.cgroupfs),
each cgroup's among its siblings.  Background lnodes get the minimum, 2.

Each lnode's CPU is read from ``cpuacct.usage`` (ns) of its cgroup in the cpuacct
hierarchy: MOUNT itself where cpu and cpuacct are mounted together, else ACCT
(e.g. /sys/fs/cgroup/cpuacct), where the same nested cgroups are made too.  Without a
cpuacct hierarchy there is no counter and the daemon samples per process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fairshare.enforce.cgroupfs import CgroupEnforcer, parent_weight
from fairshare.enforce.mapping import CgroupTree, cgroup1_tree_shares

#: cpu.shares of a cgroup weighted like one nice-0 process (the kernel's default).
NICE0_SHARES = 1024


class Cgroup1Enforcer(CgroupEnforcer):
    """Nested cgroups weighted by cpu.shares (2..262144, proportional to e_share among
    siblings)."""

    name = "cgroup1"
    controller = "cpu"
    counter_file = "cpuacct.usage"
    counter_controller = "cpuacct"

    def prepare_parent(self) -> None:
        """Weigh MOUNT/fairshare at the root like one nice-0 process per CPU (see
        `parent_weight`)."""
        self.actions.write_file(self.parent / "cpu.shares", str(parent_weight(NICE0_SHARES)))

    def tree_weights(
        self, tree: CgroupTree, e_share: np.ndarray, background: np.ndarray
    ) -> list[tuple]:
        """(cpu.shares,) per cgroup of `tree`, among its siblings."""
        return [(int(s),) for s in cgroup1_tree_shares(tree, e_share, background)]

    def write_weight(self, cgroup: Path, values: tuple) -> None:
        """Write cpu.shares."""
        self.actions.write_file(cgroup / "cpu.shares", str(values[0]))

    def parse_counter(self, text: bytes) -> float:
        """CPU seconds from cpuacct.usage (nanoseconds)."""
        return int(text) / 1e9
