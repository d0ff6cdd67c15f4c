"""The share tree and its normalisation into machine shares (pure: no OS, no database).

The tree is held as arrays indexed by node number so that normalising 100,000
leaves is a handful of numpy operations per level.  Node 0 is the root (uid
0, the guide's level 0); nodes are numbered breadth first, so every parent
comes before its children and `levels[k]` holds the nodes of level k.

Share by User (mode "user"): resource groups and users, linked by resgrp.
Share by Account (mode "account"): resource groups and shareholder (account)
entries, linked by resgrp; users reach their accounts through acids, so they
are not nodes, except the special Idle and unknown entries, which stay leaves
so that idle time and unknown uids have somewhere to be charged.

m_share (the guide's machine share, Kay-Lauder's m_share): from the root
down over active nodes only, m = m_parent x shares / (sum of the active
siblings' shares).  A group is active when any leaf below it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import numpy as np

from udb.models import IDLE_UID, ROOT_UID, SHF_ACCOUNT, SHF_GROUP

#: Names the guide accepts for the entry that unknown uids are charged to.
UNKNOWN_NAMES = ("unknown", "UnKnown")

MODES = ("user", "account")


class Kind(IntEnum):
    ROOT = 0
    GROUP = 1
    USER = 2
    ACCOUNT = 3
    IDLE = 4

    @property
    def label(self) -> str:
        return self.name.lower()


class TreeRow(Protocol):
    """What `build_tree` needs of an entry (an Entry, a Row of repository.TREE_COLUMNS, ...)."""

    name: str
    uid: int
    resgrp: int
    shares: int
    shflags: int


def entry_kind(row: TreeRow) -> Kind:
    """The role an entry plays in the tree, from its shflags and uid."""
    if row.shflags & SHF_GROUP:
        return Kind.GROUP
    if row.shflags & SHF_ACCOUNT:
        return Kind.ACCOUNT
    if row.uid == IDLE_UID:
        return Kind.IDLE
    return Kind.USER


@dataclass(frozen=True)
class Detached:
    """An entry that belongs in the tree but cannot be reached from the root."""

    name: str
    uid: int
    resgrp: int
    reason: str  # "missing-parent", "parent-not-group", "cycle" or "ancestor-detached"


@dataclass
class ShareTree:
    """The share hierarchy as arrays over nodes 0..n-1 (0 is the root)."""

    mode: str
    names: list[str]
    ids: np.ndarray  # uid of each node (the root's is 0)
    kinds: np.ndarray  # Kind per node, int8
    parent: np.ndarray  # parent node number, -1 for the root
    shares: np.ndarray  # allocated shares, float64
    level: np.ndarray  # depth: root 0, top-level groups 1, ...
    levels: list[np.ndarray]  # node numbers of each level
    detached: list[Detached] = field(default_factory=list)
    #: Position in the input rows of each node's entry (-1 for the root) and of each
    #: detached entry (in `detached` order): how callers join their own columns.
    source: np.ndarray | None = None
    detached_source: np.ndarray | None = None
    _by_name: dict[str, int] = field(default_factory=dict, repr=False)
    _by_id: dict[int, int] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def depth(self) -> int:
        """The deepest level in the tree (root is 0)."""
        return len(self.levels) - 1

    def node(self, name: str) -> int:
        """Node number of the entry called `name` (KeyError if not in the tree)."""
        return self._by_name[name]

    def node_of_id(self, uid: int) -> int:
        """Node number of the non-root entry with uid `uid` (KeyError if none)."""
        return self._by_id[uid]

    def find(self, name: str) -> int | None:
        return self._by_name.get(name)

    def find_id(self, uid: int) -> int | None:
        return self._by_id.get(uid)

    def kind(self, node: int) -> Kind:
        return Kind(int(self.kinds[node]))

    @property
    def leaf_mask(self) -> np.ndarray:
        """True for nodes that can carry processes (users, accounts, Idle, unknown)."""
        return self.kinds >= Kind.USER

    def children(self) -> list[list[int]]:
        """Children of every node, each list sorted by name."""
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for node in range(1, self.size):
            kids[self.parent[node]].append(node)
        for k in kids:
            k.sort(key=self.names.__getitem__)
        return kids

    def preorder(self, top: int = 0) -> list[int]:
        """Nodes of the subtree under `top` (itself first), depth first, siblings by name."""
        kids = self.children()
        out, stack = [], [top]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(kids[node]))
        return out

    def ancestors(self, node: int) -> list[int]:
        """The chain from `node`'s parent up to the root."""
        chain = []
        node = int(self.parent[node])
        while node >= 0:
            chain.append(node)
            node = int(self.parent[node])
        return chain

    # -- normalisation -----------------------------------------------------------------

    def active_nodes(self, active_leaves: np.ndarray) -> np.ndarray:
        """Boolean mask: the given active leaves plus every ancestor of one."""
        active = np.asarray(active_leaves, dtype=bool).copy()
        active[0] = True
        for lv in reversed(self.levels[1:]):
            below = lv[active[lv]]
            active[self.parent[below]] = True
        return active

    def subtree_sum(self, values: np.ndarray) -> np.ndarray:
        """Each node's value plus the values of all its descendants."""
        total = np.asarray(values, dtype=float).copy()
        for lv in reversed(self.levels[1:]):
            np.add.at(total, self.parent[lv], total[lv])
        return total

    def m_shares(self, active_leaves: np.ndarray | None = None) -> np.ndarray:
        """Machine share of every node (fractions of the machine, 0 when inactive).

        `active_leaves` is a boolean mask over nodes; None means every leaf is
        active, which gives the static entitlement shrtree shows.  Active
        leaves' m_shares sum to 1 unless every active leaf has zero shares.
        """
        if active_leaves is None:
            active_leaves = self.leaf_mask
        active = self.active_nodes(active_leaves)
        weight = np.where(active, self.shares, 0.0)
        sums = np.bincount(self.parent[1:], weights=weight[1:], minlength=self.size)
        m = np.zeros(self.size)
        m[0] = 1.0
        for lv in self.levels[1:]:
            p = self.parent[lv]
            s = sums[p]
            m[lv] = np.divide(m[p] * weight[lv], s, out=np.zeros(len(lv)), where=s > 0)
        return m

    def group_shares(self) -> np.ndarray:
        """Each node's shares as a fraction of all its siblings' shares (static)."""
        sums = np.bincount(self.parent[1:], weights=self.shares[1:], minlength=self.size)
        s = sums[self.parent]
        g = np.divide(self.shares, s, out=np.zeros(self.size), where=s > 0)
        g[0] = 1.0
        return g


def build_tree(rows: Iterable[TreeRow], mode: str = "user") -> ShareTree:
    """The share tree of `rows` (UDB entries) in Share by User or Share by Account mode.

    Entries that cannot be reached from the root (their resgrp names no entry,
    names an entry that is not a group, or they sit on a cycle) are left out
    of the tree and listed in `detached`.
    """
    names, uids, resgrps, shares, shflags = [], [], [], [], []
    for r in rows:
        names.append(r.name)
        uids.append(r.uid)
        resgrps.append(r.resgrp)
        shares.append(r.shares)
        shflags.append(r.shflags)
    return build_tree_columns(names, uids, resgrps, shares, shflags, mode)


def build_tree_columns(
    names: Sequence[str],
    uids: Sequence[int],
    resgrps: Sequence[int],
    shares: Sequence[float],
    shflags: Sequence[int],
    mode: str = "user",
) -> ShareTree:
    """`build_tree` over entry columns (one list per field, entries in the same order).

    Vectorised: a level's nodes are found with a few numpy operations per level,
    so 100,000 entries take tens of milliseconds.  Nodes are numbered breadth
    first; within a level by parent node, then by the entries' order.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    uid = np.asarray(uids, dtype=np.int64).reshape(-1)
    rg = np.asarray(resgrps, dtype=np.int64).reshape(-1)
    sf = np.asarray(shflags, dtype=np.int64).reshape(-1)
    kind = np.full(len(uid), Kind.USER, dtype=np.int8)
    kind[uid == IDLE_UID] = Kind.IDLE
    kind[(sf & SHF_ACCOUNT) != 0] = Kind.ACCOUNT
    kind[(sf & SHF_GROUP) != 0] = Kind.GROUP
    # The same membership rule as udb.check.in_tree (udb cannot import fairshare).
    if mode == "user":
        is_node = kind != Kind.ACCOUNT
    else:
        is_node = kind != Kind.USER
        for i, name in enumerate(names):
            if name in UNKNOWN_NAMES and kind[i] == Kind.USER:
                is_node[i] = True
    members = np.flatnonzero(is_node)
    m_uid, m_rg, m_kind = uid[members], rg[members], kind[members]

    # Each member's parent: the root, a group member (its position in members), or none (-1).
    groups = np.flatnonzero(m_kind == Kind.GROUP)
    by_uid = groups[np.argsort(m_uid[groups], kind="stable")]
    sorted_uids = m_uid[by_uid]
    m_parent = np.full(len(members), -1, dtype=np.int64)
    if len(by_uid):
        pos = np.minimum(np.searchsorted(sorted_uids, m_rg), len(sorted_uids) - 1)
        found = sorted_uids[pos] == m_rg
        m_parent[found] = by_uid[pos[found]]
    at_root = m_rg == ROOT_UID
    m_parent[at_root] = -1

    # Levels, top down: a member is placed once its parent group is.
    m_node = np.full(len(members), -1, dtype=np.int64)
    n_parent, n_member, n_level = [np.array([-1])], [np.array([-1])], [np.array([0])]
    levels: list[np.ndarray] = [np.array([0], dtype=np.int64)]
    next_node = 1
    this = np.flatnonzero(at_root)
    parent_node = np.zeros(len(this), dtype=np.int64)
    depth = 1
    while len(this):
        order = np.lexsort((this, parent_node))
        this, parent_node = this[order], parent_node[order]
        numbers = np.arange(next_node, next_node + len(this))
        m_node[this] = numbers
        n_parent.append(parent_node)
        n_member.append(this)
        n_level.append(np.full(len(this), depth))
        levels.append(numbers)
        next_node += len(this)
        depth += 1
        # Children of this level's groups.
        placed_groups = this[m_kind[this] == Kind.GROUP]
        if not len(placed_groups):
            break
        mark = np.zeros(len(members), dtype=bool)
        mark[placed_groups] = True
        cand = np.flatnonzero((m_parent >= 0) & (m_node < 0))
        this = cand[mark[m_parent[cand]]]
        parent_node = m_node[m_parent[this]]

    member_of_node = np.concatenate(n_member)
    entry_of_node = members[member_of_node[1:]]
    node_names = ["", *(names[i] for i in entry_of_node.tolist())]
    ids = np.concatenate(([ROOT_UID], uid[entry_of_node]))
    kinds = np.concatenate(([Kind.ROOT], kind[entry_of_node])).astype(np.int8)
    node_shares = np.concatenate(([0.0], np.asarray(shares, dtype=float)[entry_of_node]))

    all_uids = set(uid.tolist())
    group_parent = dict(zip(m_uid[groups].tolist(), m_rg[groups].tolist(), strict=True))
    detached = [
        Detached(
            names[e],
            int(uid[e]),
            int(rg[e]),
            _detach_reason(int(uid[e]), int(rg[e]), group_parent, all_uids),
        )
        for e in members[m_node < 0].tolist()
    ]

    tree = ShareTree(
        mode=mode,
        names=node_names,
        ids=ids.astype(np.int64),
        kinds=kinds,
        parent=np.concatenate(n_parent).astype(np.int64),
        shares=node_shares,
        level=np.concatenate(n_level).astype(np.int64),
        levels=[lv.astype(np.int64) for lv in levels],
        detached=detached,
        source=np.concatenate(([-1], entry_of_node)).astype(np.int64),
        detached_source=members[m_node < 0].astype(np.int64),
    )
    tree._by_name = dict(zip(node_names[1:], range(1, len(node_names)), strict=True))
    tree._by_id = dict(zip(ids[1:].tolist(), range(1, len(node_names)), strict=True))
    return tree


def _detach_reason(uid: int, resgrp: int, group_parent: dict[int, int], all_uids: set[int]) -> str:
    """Why an entry is not reachable from the root."""
    if resgrp not in all_uids:
        return "missing-parent"
    if resgrp not in group_parent:
        return "parent-not-group"
    seen = {uid}
    g = resgrp
    while g != ROOT_UID:
        if g in seen:
            return "cycle"
        seen.add(g)
        if g not in group_parent:
            return "ancestor-detached"
        g = group_parent[g]
    return "ancestor-detached"  # reached the root through a detached group: cannot happen
