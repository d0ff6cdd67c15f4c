"""The cgroup v2 enforcer: ``cpu.weight`` and ``cpu.idle`` in
MOUNT/fairshare/+<group>/<lnode> (the nesting: fairshare.enforce.cgroupfs), each
cgroup's weight among its siblings.

The cpu controller must be enabled in the subtree_control of the mount root,
of MOUNT/fairshare and of every group's cgroup before their children can be
weighted; processes live only in the lnode cgroups (leaves), never in
MOUNT/fairshare itself nor in a group's.
Background lnodes (past MAXUSAGE) get ``cpu.idle = 1``: they run only on CPU
no one else wants, whatever their weight.  Each lnode's CPU is read from its
``cpu.stat`` (usage_usec).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from fairshare.enforce.actions import OsActions
from fairshare.enforce.cgroupfs import CgroupEnforcer, parent_weight
from fairshare.enforce.mapping import CgroupTree, cgroup2_tree_weights

#: cpu.weight of a cgroup weighted like one nice-0 process (the kernel's default).
NICE0_WEIGHT = 100

log = logging.getLogger("shrdaemon")


def enable_cpu(cgroup: Path, actions: OsActions) -> None:
    """Enable the cpu controller for `cgroup`'s children through `actions` (no-op when
    already on)."""
    control = cgroup / "cgroup.subtree_control"
    if not control.exists() or "cpu" not in control.read_text().split():
        actions.write_file(control, "+cpu")


class Cgroup2Enforcer(CgroupEnforcer):
    """Nested cgroups weighted by cpu.weight (1..10000, proportional to e_share among
    siblings)."""

    name = "cgroup2"
    controller = None
    counter_file = "cpu.stat"

    def prepare_parent(self) -> None:
        """Turn the cpu controller on down to the lnode cgroups; weigh MOUNT/fairshare
        like one nice-0 process per CPU (see `parent_weight`)."""
        enable_cpu(self.mount, self.actions)
        enable_cpu(self.parent, self.actions)
        self.actions.write_file(self.parent / "cpu.weight", str(parent_weight(NICE0_WEIGHT)))

    def tree_weights(
        self, tree: CgroupTree, e_share: np.ndarray, background: np.ndarray
    ) -> list[tuple]:
        """(cpu.weight, cpu.idle) per cgroup of `tree`, the weight among its siblings."""
        w = cgroup2_tree_weights(tree, e_share, background)
        return [(int(x), int(b)) for x, b in zip(w, background, strict=True)]

    def prepare_group(self, cgroup: Path) -> None:
        """Turn the cpu controller on for a group's children."""
        enable_cpu(cgroup, self.actions)

    def parse_counter(self, text: bytes) -> float:
        """CPU seconds from cpu.stat's usage_usec line."""
        for line in text.splitlines():
            key, _, value = line.partition(b" ")
            if key == b"usage_usec":
                return int(value) / 1e6
        raise ValueError("cpu.stat has no usage_usec")

    def write_weight(self, cgroup: Path, values: tuple) -> None:
        """Write cpu.weight and cpu.idle (kernels before 5.15 have no cpu.idle)."""
        weight, idle = values
        self.actions.write_file(cgroup / "cpu.weight", str(weight))
        idle_file = cgroup / "cpu.idle"
        if idle_file.exists():
            self.actions.write_file(idle_file, str(idle))
        elif idle:
            log.warning("%s: this kernel has no cpu.idle; background runs at weight 1", cgroup)
