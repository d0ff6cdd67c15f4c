"""The `none` enforcer: accounting and displays only.

Chosen when the daemon is not root, when NOSCHED or NOSHARE is set, or by
``--enforcer none``; the daemon still collects, charges, decays and publishes.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairshare.enforce.actions import OsActions
from fairshare.enforce.base import Capabilities, LnodeTarget


class NoEnforcer:
    """Leaves every process where it is, at the nice value it has (the UDB's nice too)."""

    name = "none"
    capabilities = Capabilities()

    def __init__(self, actions: OsActions) -> None:
        self.actions = actions  # never used: nothing is changed

    def setup(self) -> None:
        """Nothing to prepare."""

    def apply(self, targets: Sequence[LnodeTarget]) -> None:
        """Nothing to apply."""

    def teardown(self) -> None:
        """Nothing to undo."""
