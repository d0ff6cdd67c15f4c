"""What shrinfo shows, read and built: the settings, the published table, one entry's
profile (fairshare.report.profile), the active counts and its usage on other hosts.

`load_info` reads the constants (base, schedules, in force) and the published table of
a host (None when nothing was published).  `load_profile` finds the entry (the caller's
by default; in Share by Account mode a user's default account) and returns its
profile: from its lnode when it has one (its fair level from the core, with the share
tree's share ratios, `tree_share_ratios`), else from the share tree and its stored usage.
`active_counts` gives the -v line's counts; `site_usage` what GLOBALUSAGE makes other
hosts' usage count here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import Engine

from fairshare.core.consts import GLOBALUSAGE, Consts
from fairshare.core.lnode import aged_usage, decayed_usage
from fairshare.core.site import SiteLnode
from fairshare.core.sshare import share_ratios
from fairshare.core.tree import ShareTree, build_tree_columns
from fairshare.report.lnodes import ViewLnode, view_lnodes
from fairshare.report.profile import Profile, active_profile, entry_profile
from fairshare.report.published import (
    Snapshot,
    default_account,
    find_entry,
    load_published,
)
from fairshare.report.sharetree import entry_halflives, stored_sshare
from fairshare.store.config import load_consts, load_effective_consts, schedules
from fairshare.store.site import published_hosts, read_site
from udb.check import EntryColumns, load_entry_columns
from udb.errors import NotFound
from udb.rules import SHF_ACCOUNT, SHF_GROUP
from udb.session import read_connection


@dataclass(frozen=True)
class Info:
    """The constants (`base`, the `schedules` rows, the schedule `in_force`, the
    `consts` in force now) and the published table (None if nothing was published)."""

    base: Consts
    schedules: list
    in_force: str
    consts: Consts
    snap: Snapshot | None

    @property
    def settings(self) -> tuple:
        """The arguments of fairshare.display.settings' renderers."""
        return self.base, self.schedules, self.in_force


def load_info(engine: Engine, host: str | None, now: float) -> Info:
    """The settings and `host`'s published table (see `load_published`) at `now` (epoch s)."""
    with read_connection(engine) as s:
        base = load_consts(s)
        rows = schedules(s)
        consts, in_force = load_effective_consts(s, datetime.fromtimestamp(now))
    snap = None
    if host is not None or published_hosts(engine):
        snap = load_published(engine, host, now, consts)
    return Info(base, rows, in_force, consts, snap)


def own_lnodes(snap: Snapshot | None) -> list[ViewLnode]:
    """The published lnodes of `snap` (none without one), the caller's marked by uid."""
    return view_lnodes(snap.lnodes, frozenset({os.getuid()})) if snap else []


def load_profile(
    engine: Engine, info: Info, user: str | None, now: float
) -> tuple[Profile, list[str], ShareTree, list[ViewLnode]]:
    """The profile of `user` (default: the caller), notes on how it was chosen, the
    share tree and the published lnodes.  NotFound for an unknown entry or one not in
    the share tree."""
    snap, consts = info.snap, info.consts
    mode = snap.mode if snap is not None else consts.mode
    notes = []
    with read_connection(engine) as s:
        entry = find_entry(s, user)
        if mode == "account" and not entry.shflags & (SHF_ACCOUNT | SHF_GROUP):
            account = default_account(s, entry)
            notes.append(f"{entry.name} is charged to its default account {account.name}")
            entry = account
        cols = load_entry_columns(s)  # the entries read once, for the tree and the figures
    tree = build_tree_columns(
        cols.name, cols.uid, cols.resgrp, cols.shares, cols.shflags, mode,
        halflives=cols.halflife or None,
    )  # fmt: skip
    lnodes = own_lnodes(snap)
    slurm = stored_figures(tree, cols, entry.name, consts, now)
    node = tree.find(entry.name)
    if node is not None and tree.own_halflives:  # this node's own half-life, or its group's
        slurm |= _node_halflife(tree, node, consts.halflife)
        consts = consts.replace(halflife=slurm["halflife"])
    if any(v.name == entry.name and v.parent >= 0 for v in lnodes):
        local = tree_share_ratios(tree, lnodes)
        profile = active_profile(lnodes, entry.name, consts, local)
        return dataclasses.replace(profile, **slurm), notes, tree, lnodes
    if node is None:
        raise NotFound(f"{entry.name}: the entry is not in the share tree (see shrtree -e)")
    static = tree.m_shares(None)
    profile = entry_profile(
        name=entry.name,
        uid=entry.uid,
        kind=tree.kind(node).label,
        shares=float(entry.shares),
        static_m_share=float(static[node]),
        aged_usage=aged_usage(entry.shusage, entry.shextime, now, consts),
        groups=[(tree.names[a], float(static[a])) for a in reversed(tree.ancestors(node)[:-1])],
        halflife=consts.halflife,
    )
    return dataclasses.replace(profile, **slurm), notes, tree, lnodes


def _node_halflife(tree: ShareTree, node: int, default: float) -> dict:
    """Profile's fields for node's usage half-life (s): `halflife`, and `halflife_from`,
    the nearest of it and its groups that sets one ("" when none does: the global)."""
    chain = [node, *tree.ancestors(node)]
    source = next((n for n in chain if n > 0 and tree.halflife[n] > 0), None)
    return {
        "halflife": float(tree.halflives(default)[node]),
        "halflife_from": "" if source is None else tree.names[source],
    }


def tree_share_ratios(tree: ShareTree, lnodes: Sequence[ViewLnode]) -> np.ndarray | None:
    """Each published lnode's shares over all its siblings' in `tree` (Slurm's share
    ratio, fairshare.core.sshare.share_ratios; the root's 1), in the order of `lnodes`;
    None when the tree read now does not number them as the daemon's did (an entry
    added, moved or removed since it published)."""
    node = np.fromiter((v.node for v in lnodes), np.int64, count=len(lnodes))
    parent = np.fromiter((v.parent for v in lnodes), np.int64, count=len(lnodes))
    inner = parent >= 0
    if len(node) and (node.max() >= tree.size or node.min() < 0):
        return None
    names = [tree.names[n] for n in node[inner].tolist()]
    if names != [v.name for v, up in zip(lnodes, inner.tolist(), strict=True) if up]:
        return None
    if not np.array_equal(tree.parent[node[inner]], parent[inner]):
        return None
    local, _ = share_ratios(tree.index, tree.shares)
    return np.where(inner, local[node], 1.0)


def stored_figures(
    tree: ShareTree, cols: EntryColumns, name: str, consts: Consts, now: float
) -> dict:
    """Slurm's sshare figures of entry `name` in `tree` (built from the entries `cols`,
    which carry shusage and shextime) from the usage stored in the UDB, aged to `now`
    (fairshare.report.sharetree.stored_sshare; the dampening factor in force), as
    Profile's fields; {} when the entry is not in the share tree."""
    node = tree.find(name)
    if node is None:
        return {}
    aged = decayed_usage(
        cols.shusage, cols.shextime, now, entry_halflives(tree, cols, consts.halflife)
    )
    f, _ = stored_sshare(tree, cols, aged, tree.detached_source, consts.dampening)
    return {
        "normalized_shares": float(f.normalized_shares[node]),
        "normalized_usage": float(f.normalized_usage[node]),
        "effective_usage": float(f.effective_usage[node]),
        "fairshare_factor": float(f.fairshare_factor[node]),
    }


def active_counts(lnodes: Sequence[ViewLnode], tree: ShareTree) -> tuple[int, int, int]:
    """(active leaf lnodes, leaves of the share tree, active groups)."""
    leaves = sum(1 for v in lnodes if not v.is_group)
    return leaves, int(tree.leaf_mask.sum()), sum(v.kind == "group" for v in lnodes)


def site_usage(engine: Engine, name: str, info: Info, now: float) -> SiteLnode | None:
    """With GLOBALUSAGE, the site-wide lnode of leaf `name` when it also runs on a host
    other than the published table's; None otherwise."""
    snap = info.snap
    if snap is None or not info.consts.flags & GLOBALUSAGE:
        return None
    _hosts, lnodes = read_site(engine, now, info.consts.halflife)
    me = next((v for v in lnodes if v.name == name and v.kind not in ("root", "group")), None)
    if me is None or not any(h != snap.host for h in me.cpus):
        return None
    return me
