"""The cgroup v1 enforcer: ``cpu.shares`` in MOUNT/fairshare/<lnode> (MOUNT is the
cpu hierarchy, e.g. /sys/fs/cgroup/cpu).  Background lnodes get the minimum, 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fairshare.enforce.cgroupfs import CgroupEnforcer
from fairshare.enforce.mapping import cgroup1_shares


class Cgroup1Enforcer(CgroupEnforcer):
    """Lnode cgroups weighted by cpu.shares (2..262144, proportional to e_share)."""

    name = "cgroup1"
    v2 = False

    def weights(self, e_share: np.ndarray, background: np.ndarray) -> list[tuple]:
        """(cpu.shares,) per lnode."""
        return [(int(s),) for s in cgroup1_shares(e_share, background)]

    def write_weight(self, cgroup: Path, values: tuple) -> None:
        """Write cpu.shares."""
        (cgroup / "cpu.shares").write_text(str(values[0]))
