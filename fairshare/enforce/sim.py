"""The simulator as an enforcer: e_share becomes the simulated machine's weights
(fairshare.collect.sim.SimWorld), with the same weight models as shrsim."""

from __future__ import annotations

from collections.abc import Sequence

from fairshare.collect.sim import SimWorld
from fairshare.enforce.base import LnodeTarget, arrays


class SimEnforcer:
    """Sets per-lnode weights on the simulated machine."""

    name = "sim"

    def __init__(self, world: SimWorld) -> None:
        self.world = world

    def setup(self) -> None:
        """Nothing to prepare."""

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Weights for every target lnode from its e_share (the world's model)."""
        e_share, nrun, background = arrays(targets)
        self.world.set_weights([t.name for t in targets], e_share, background, nrun)

    def teardown(self) -> None:
        """Back to plain Linux: equal weight per process."""
        self.world.weight = {}
