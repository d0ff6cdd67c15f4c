"""The UDB's rules that need no database: flags, bounds, reserved uids and the share tree.

One place for what `udb.check` (udbgen -a, shrtree's problems), `udb.directives`
(udbgen's final-state check) and `fairshare.core.tree` (the daemon's share tree) must agree
on, so a fault has the same name everywhere:

- an entry's role (`role_of`) and which entries are nodes of the tree in each mode
  (`in_tree`, `TREE_ROLES`): groups and Idle always; users in Share by User mode
  ("user"); shareholder (account) entries and the unknown user in Share by Account
  mode ("account");
- the resgrp chain walk (`walk_groups`, `place_entry`) and its four faults, each with
  one code and one name (`FAULT_NAMES`): Mg "missing-parent" (resgrp names no entry),
  Ng "parent-not-group" (resgrp names an entry that is not a group), Cy "cycle" (the
  chain loops back to the entry) and Or "ancestor-detached" (a group above is at fault).

Pure: no SQLAlchemy, so fairshare's pure core can import it.  `udb.models` re-exports
the constants for the code that reads them beside the tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: shflags bit that marks a resource group entry.
SHF_GROUP = 0o40000
#: shflags bit that marks a shareholder (account) entry.
SHF_ACCOUNT = 0o1000000

# The range of every numeric field (udbgen checks them at input; shrdist and the
# constants use the same bounds).  They keep the scheduler's arithmetic finite.
#: Linux ids are 32 bits and (uid_t)-1 means "no id": uids, gids, acids in 0..2**32-2.
MAX_ID = 2**32 - 2
#: Shares are stored as 32-bit integers.
MAX_SHARES = 2**31 - 1
#: shflags: a 31-bit field.
MAX_SHFLAGS = 2**31 - 1
#: The largest usage or charge (charge units): far above what a site can accrue.
MAX_USAGE = 1e30
#: The latest shextime (epoch seconds; the year 5138).
MAX_EPOCH = 1e11
#: The largest CPU quota or quota used (CPU seconds; 30,000 CPU-years).
MAX_CPU_SECONDS = 1e12
#: The longest usage half-life an entry may set (s): ten years, as shradmin -K.
MAX_HALFLIFE = 3650 * 86400.0
#: The longest comment and password field (characters).
MAX_COMMENT = 1024
MAX_PASSWD = 256

#: uid reserved for the Idle entry (the guide, section 4.4.4.1).
IDLE_UID = 11
#: uid of the root of the share tree; resgrp 0 means "directly under root".
ROOT_UID = 0

#: Names the guide accepts for the entry that unknown uids are charged to.
UNKNOWN_NAMES = ("unknown", "UnKnown")

#: The two ways of building the tree: Share by User and Share by Account (SHAREBYACCT).
MODES = ("user", "account")

#: The roles whose entries are nodes of the tree in each mode (see also `in_tree`).
TREE_ROLES = {"user": ("group", "idle", "user"), "account": ("group", "idle", "account")}

#: The name of each chain fault, by its udbgen -a code.
FAULT_NAMES = {
    "Mg": "missing-parent",
    "Ng": "parent-not-group",
    "Cy": "cycle",
    "Or": "ancestor-detached",
}


def role_of(shflags: int, uid: int) -> str:
    """The role shflags and uid give an entry: "group", "account", "idle" or "user"."""
    if shflags & SHF_GROUP:
        return "group"
    if shflags & SHF_ACCOUNT:
        return "account"
    if uid == IDLE_UID:
        return "idle"
    return "user"


def in_tree(role: str, name: str, mode: str) -> bool:
    """Whether an entry of `role` called `name` is a node of the tree in `mode`: the
    roles of TREE_ROLES, and in Share by Account mode the unknown entry, which stays a
    leaf so that unknown uids have somewhere to be charged."""
    return role in TREE_ROLES[mode] or (mode == "account" and name in UNKNOWN_NAMES)


# -- the chain walk ----------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where an entry sits: its level (ROOT is 0) or why it is detached.

    `fault` is "" when attached, else the code of the fault (a key of FAULT_NAMES):
    Mg, Ng or Cy for the entry whose own resgrp is at fault, Or when an ancestor's is.
    """

    level: int | None
    fault: str = ""

    @property
    def fault_name(self) -> str:
        return FAULT_NAMES.get(self.fault, "")


@dataclass(frozen=True)
class GroupWalk:
    """Every resource group's placement, and the cycles among them (each a list of group
    uids, in the order the walk met them; `groups` order decides where each starts)."""

    placed: dict[int, Placement]
    cycles: list[list[int]]


_ROOT = Placement(0)
_LEVEL_ONE = Placement(1)
_ORPHAN = Placement(None, "Or")
_CYCLE = Placement(None, "Cy")
_MISSING = Placement(None, "Mg")
_NOT_GROUP = Placement(None, "Ng")


def walk_groups(groups: Mapping[int, int], all_uids: Iterable[int]) -> GroupWalk:
    """Place every resource group, given group uid -> resgrp and every entry's uid.

    Walks each chain once (memoised), so the cost is linear in the groups.
    """
    uids = set(all_uids)
    placed: dict[int, Placement] = {}
    cycles: list[list[int]] = []
    for start in groups:
        path: list[int] = []
        on_path: dict[int, int] = {}
        g = start
        while True:
            if g in placed:
                base = placed[g]
                break
            on_path[g] = len(path)
            path.append(g)
            parent = groups[g]
            if parent == ROOT_UID:
                base = _ROOT
                break
            if parent in on_path:  # the chain closed on itself
                loop_start = on_path[parent]
                cycles.append(path[loop_start:])
                for member in path[loop_start:]:
                    placed[member] = _CYCLE
                path = path[:loop_start]
                base = _CYCLE
                break
            if parent not in groups:
                placed[g] = _MISSING if parent not in uids else _NOT_GROUP
                base = placed[g]
                path.pop()
                break
            g = parent
        # Assign from the top of the walked path down.
        for member in reversed(path):
            base = _ORPHAN if base.level is None else Placement(base.level + 1)
            placed[member] = base
    return GroupWalk(placed, cycles)


def parent_fault(resgrp: int, groups: Mapping[int, int], all_uids: Iterable[int]) -> str:
    """The fault of a resgrp that is not ROOT and names no group: "Mg" or "Ng" ("" when
    it is ROOT or a group)."""
    if resgrp == ROOT_UID or resgrp in groups:
        return ""
    return "Mg" if resgrp not in all_uids else "Ng"


def place_entry(
    uid: int, resgrp: int, groups: Mapping[int, int], walk: GroupWalk, all_uids: Iterable[int]
) -> Placement:
    """Where the tree node with `uid` and `resgrp` sits, given the groups' walk."""
    if uid in groups:
        return walk.placed[uid]
    if resgrp == ROOT_UID:
        return _LEVEL_ONE
    if resgrp in groups:
        above = walk.placed[resgrp]
        return _ORPHAN if above.level is None else Placement(above.level + 1)
    return _MISSING if parent_fault(resgrp, groups, all_uids) == "Mg" else _NOT_GROUP
