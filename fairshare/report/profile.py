"""shrinfo's report: one user's (or account's) fair-share profile and why it gets what
it gets, in the manner of the Kay-Lauder paper's Figure 7 (pure: no UDB, no clock).

`active_profile` builds it from the published lnode table (fairshare.report.lnodes'
`ViewLnode`s): shares, machine share (Rshr), effective share (Eshr) and usage; the chain
of groups above it with theirs; the ancestor group that limits it (the smallest
Eshr/Rshr ratio, when below 1); what it and each of those groups received over the
last cycle and minute against its fair target (fairshare.core.delivery), and which of
them is furthest behind its target over the last minute (`furthest_behind`); and how
long it would have to stay idle for its usage to decay to its fair level.
`entry_profile` is the same for an entry without an lnode (not logged in): its static
machine share (every leaf active) and its stored usage aged to now.  `every_leaf`
orders the active leaves for Figure 7 (shrinfo -a).

The fair level u* is the core's (fairshare.core.fair, asked through
fairshare.core.policies.fair_usage): the usage at which the lnode would get its due part
as the cycle splits the machine under the constants and the policy in force.  Under
UNICOS, with its demanding siblings j as they are, lnode i's part of its parent's share,
(m_i^2/u_i) / (m_i^2/u_i + S) with S = sum of m_j^2/u_j, equals its due part m = m_i /
(m_i + sum of m_j) when u* = m_i^2 (1 - m) / (m S) (without ADJGROUPS among every
demanding leaf, with idleshare even on the spread shares, and the siblings held within
their K5 and LIMSHARE bands).  A leaf without demanding siblings is weighed where its
lowest ancestor with some is (its usage is part of that group's).  Idle, usage decays as
0.5 ** (t / halflife), so it reaches u* after halflife x log2(u / u*) seconds.

Shares are fractions 0..1, usage in charge units, times in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from fairshare.core import policies
from fairshare.core.consts import Consts
from fairshare.core.fair import SplitFigures
from fairshare.report.lnodes import ViewLnode
from udb.errors import NotFound

#: A group counts as limiting when its Eshr/Rshr ratio is below 1 by more than this
#: (a cycle's rounding noise is far smaller).
LIMIT_TOLERANCE = 0.005
#: An lnode is behind its fair target when it received less than it over the last
#: minute by more than this (a fraction of the machine: 1 percentage point), the noise
#: of a minute's measure of an enforcer that delivers its target.
BEHIND_TOLERANCE = 0.01


@dataclass(frozen=True)
class GroupShare:
    """A group above the lnode: its name, Rshr (m_share) and Eshr (e_share); the
    fraction of the machine it received over the last minute (got_minute) and its fair
    target (target), None when the table does not have them (an older daemon's) or
    for an entry without an lnode."""

    name: str
    m_share: float
    e_share: float
    got_minute: float | None = None
    target: float | None = None


@dataclass(frozen=True)
class Profile:
    """One lnode's profile (see the module docstring for the meaning and units).

    active: it has an lnode (processes on the host); e_share None when it has none.
    groups: from the top-level group down to its parent.  limited_by / limit_ratio: the
    ancestor group with the smallest Eshr/Rshr below 1 - LIMIT_TOLERANCE, and that ratio.
    fair_usage: u* (None when it is the only lnode wanting CPU, or not active); idle_seconds: the
    time idle to decay to u* (0 when its usage is at or below it; None when unknown).
    background: past MAXUSAGE or without shares, it runs only on CPU nobody else wants.
    eshr_if_started: it did not demand CPU last cycle, so e_share is what it would get
    if it alone started, not a share it is getting.
    got, got_minute, target: the fraction of the machine it received over the last
    cycle and about the last minute, and its fair target (None without an lnode, or
    when the table does not have them).  behind / behind_points: the lnode among it
    and the groups above it that received, over the last minute, furthest below its
    fair target, by more than BEHIND_TOLERANCE (its name: the lnode's own when it is
    itself), and by how much (percentage points of the machine); None when none is,
    or the figures are not known.
    normalized_shares, normalized_usage, effective_usage, fairshare_factor: Slurm's
    classic figures from the usage stored in the UDB, whatever the policy
    (fairshare.report.sharetree.stored_sshare; None when not worked out).
    """

    name: str
    uid: int
    kind: str
    shares: float
    m_share: float
    e_share: float | None
    usage: float
    active: bool
    groups: tuple[GroupShare, ...]
    limited_by: str | None
    limit_ratio: float | None
    fair_usage: float | None
    idle_seconds: float | None
    halflife: float
    background: bool = False
    eshr_if_started: bool = False
    got: float | None = None
    got_minute: float | None = None
    target: float | None = None
    behind: str | None = None
    behind_points: float | None = None
    normalized_shares: float | None = None
    normalized_usage: float | None = None
    effective_usage: float | None = None
    fairshare_factor: float | None = None
    #: The group (or the entry itself) whose own usage half-life `halflife` is; "" for the
    #: global one, None when no entry sets its own (shrinfo then says nothing of it).
    halflife_from: str | None = None


def split_figures(
    lnodes: Sequence[ViewLnode], local_shares: Sequence[float] | None = None
) -> tuple[SplitFigures, np.ndarray]:
    """(the published lnodes as the core's split reads them, each lnode's position in
    them): fairshare.core.fair.SplitFigures.of_lnodes.  `local_shares` (one per lnode,
    in order): each one's shares over all its siblings' in the share tree, when the
    tree is at hand (Slurm's share ratio; else over the published siblings alone)."""

    def column(name: str, dtype: type) -> np.ndarray:
        return np.fromiter(map(attrgetter(name), lnodes), dtype, count=len(lnodes))

    kinds = np.array(list(map(attrgetter("kind"), lnodes)), dtype=object)
    return SplitFigures.of_lnodes(
        column("node", np.int64),
        column("parent", np.int64),
        (kinds == "group") | (kinds == "root"),
        column("shares", float),
        column("m_share", float),
        column("usage", float),
        column("demanding", bool),
        local_shares,
    )


def fair_usage(
    lnodes: Sequence[ViewLnode],
    me: ViewLnode,
    consts: Consts,
    local_shares: Sequence[float] | None = None,
) -> float | None:
    """u*, the usage (charge units) at which `me` would get its due share as the cycle
    splits the machine under `consts` (their flags, idleshare and policy): the core's
    figure (fairshare.core.policies.fair_usage) on the published `lnodes` (and their
    `local_shares`, see `split_figures`).  None if no other lnode (of another branch)
    wants CPU."""
    figures, pos = split_figures(lnodes, local_shares)
    at = next((int(p) for v, p in zip(lnodes, pos.tolist(), strict=True) if v is me), -1)
    if at < 0:
        return None
    return policies.fair_usage(figures, at, consts)


def idle_time(usage: float, fair: float | None, halflife: float) -> float | None:
    """Seconds idle until `usage` decays to `fair` (0 if already at or below it)."""
    if fair is None:
        return None
    if usage <= fair or fair <= 0:
        return 0.0
    return halflife * math.log2(usage / fair)


def active_profile(
    lnodes: Sequence[ViewLnode],
    name: str,
    consts: Consts,
    local_shares: Sequence[float] | None = None,
) -> Profile:
    """The profile of the published lnode `name` (NotFound if it has none) under the
    constants in force `consts` (the half-life, and how the cycle splits the machine,
    which the fair level follows; `local_shares` as `fair_usage` takes them)."""
    by_node = {v.node: v for v in lnodes}
    me = next((v for v in lnodes if v.name == name and v.parent >= 0), None)
    if me is None:
        raise NotFound(f"{name}: no active lnode of that name")
    chain = []
    p = by_node.get(me.parent)
    while p is not None and p.parent >= 0:
        chain.append(p)
        p = by_node.get(p.parent)
    chain.reverse()
    limited, ratio = None, None
    for g in chain:
        if g.m_share > 0:
            r = g.e_share / g.m_share
            if r < 1 - LIMIT_TOLERANCE and (ratio is None or r < ratio):
                limited, ratio = g.name, r
    fair = fair_usage(lnodes, me, consts, local_shares) if not me.is_group else None
    halflife = consts.halflife
    behind = furthest_behind([*chain, me])
    return Profile(
        name=me.name,
        uid=me.uid,
        kind=me.kind,
        shares=me.shares,
        m_share=me.m_share,
        e_share=me.e_share,
        usage=me.usage,
        active=True,
        groups=tuple(
            GroupShare(g.name, g.m_share, g.e_share, g.got_minute, g.target) for g in chain
        ),
        limited_by=limited,
        limit_ratio=ratio,
        fair_usage=fair,
        idle_seconds=idle_time(me.usage, fair, halflife),
        halflife=halflife,
        background=me.background,
        eshr_if_started=me.eshr_if_started,
        got=me.got,
        got_minute=me.got_minute,
        target=me.target,
        behind=None if behind is None else behind[0],
        behind_points=None if behind is None else behind[1],
    )


def furthest_behind(chain: Sequence[ViewLnode]) -> tuple[str, float] | None:
    """(name, percentage points) of the lnode of `chain` (top first) that received over
    the last minute furthest below its fair target, by more than BEHIND_TOLERANCE; of
    lnodes behind by as much within that tolerance, the highest (a group's shortfall
    is its members').  None when none is behind, or an lnode's figures are not known
    (a table published by an older daemon)."""
    best, most = None, 0.0
    for v in chain:
        if v.got_minute is None or v.target is None:
            return None
        short = v.target - v.got_minute
        if short > BEHIND_TOLERANCE and (best is None or short > most + BEHIND_TOLERANCE):
            best, most = v.name, short
    return None if best is None else (best, 100 * most)


def entry_profile(
    name: str,
    uid: int,
    kind: str,
    shares: float,
    static_m_share: float,
    aged_usage: float,
    groups: Sequence[tuple[str, float]],
    halflife: float,
) -> Profile:
    """The profile of an entry without an lnode: `static_m_share` is its machine share
    with every leaf active, `aged_usage` its shusage aged to now, `groups` the (name,
    static m_share) of the groups above it, top first."""
    return Profile(
        name=name,
        uid=uid,
        kind=kind,
        shares=shares,
        m_share=static_m_share,
        e_share=None,
        usage=aged_usage,
        active=False,
        groups=tuple(GroupShare(n, m, m) for n, m in groups),
        limited_by=None,
        limit_ratio=None,
        fair_usage=None,
        idle_seconds=None,
        halflife=halflife,
    )


def every_leaf(lnodes: Sequence[ViewLnode]) -> list[ViewLnode]:
    """Every active leaf lnode (users or accounts, Idle included) in Figure 7's order:
    highest usage first (names break ties)."""
    leaves = [v for v in lnodes if not v.is_group and v.parent >= 0]
    return sorted(leaves, key=lambda v: (-v.usage, v.name))
