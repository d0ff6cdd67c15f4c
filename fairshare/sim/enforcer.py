"""The simulator as an enforcer: e_share becomes the simulated machine's weights
(fairshare.sim.machine.SimWorld), with the same weight models as shrsim; under the
cgroup model it hands the world the targets' groups, which it nests as the cgroup
enforcers do (fairshare.enforce.mapping.targets_tree)."""

from __future__ import annotations

from collections.abc import Sequence

from fairshare.enforce.base import Capabilities, LnodeTarget, arrays
from fairshare.sim.machine import SimOs


class SimEnforcer:
    """Sets per-lnode weights on the simulated machine of its SimOs actions."""

    name = "sim"

    def __init__(self, actions: SimOs) -> None:
        self.actions = actions
        self.world = actions.world
        # As the real enforcers: the UDB's nice is applied beside the cgroup model and
        # folded into the nice model's values (the world takes the larger nice); none
        # changes nothing.  The simulated processes keep their own nice values (the
        # model weighs them, it does not renice them), so they are charged as they are.
        self.capabilities = Capabilities(udb_nice=self.world.model != "none")

    def setup(self) -> None:
        """Nothing to prepare."""

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Weights for every target lnode from its e_share (the world's model), and
        under the cgroup model for every group above one."""
        e_share, nrun, background = arrays(targets)
        self.world.set_weights([t.name for t in targets], e_share, background, nrun)
        if self.world.model == "cgroup":
            self.world.set_tree(targets)

    def teardown(self) -> None:
        """Back to plain Linux: equal weight per process."""
        self.world.weight = {}
        self.world.paths = {}
