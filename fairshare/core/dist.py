"""A redistribution of shares inside one resource group (shrdist), as plain records:
each member's old and new shares with the group and machine shares they give
(fairshare.admin.shrdist plans and writes it; fairshare.display.dist shows it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemberShare:
    """One member of the group after the change: `shares` new, `old` before (shares),
    `group_share` its fraction of the group's shares and `m_share` its machine share
    (fraction of the machine with every leaf active, the static entitlement)."""

    name: str
    uid: int
    kind: str
    old: int
    shares: int
    group_share: float
    m_share: float

    @property
    def changed(self) -> bool:
        return self.old != self.shares


@dataclass(frozen=True)
class Distribution:
    """The group's members after the change and the group's own machine share (fraction)."""

    group: str
    m_share: float
    members: list[MemberShare]

    @property
    def changed(self) -> list[MemberShare]:
        return [m for m in self.members if m.changed]

    @property
    def total(self) -> int:
        return sum(m.shares for m in self.members)
