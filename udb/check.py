"""The UDB consistency rules: one rule set shared by `udbgen -a` and `shrtree`.

`check_udb` walks the resgrp chains with plain dicts (udb knows nothing of
scheduling) and returns one `Problem` per fault found, each with a two-letter
code.  The guide's codes Nc and Zs are kept; the others are ours:

====  =======  ===========================================================
Code  Severity Meaning
====  =======  ===========================================================
Nc    warning  a resource group that no entry of the analysed tree references
Zs    warning  a user, group or account with zero shares (only Idle may have 0)
Rt    warning  a user or account attached directly to ROOT (resgrp 0)
Pw    warning  a group or account whose passwd is not ``*``
Ac    warning  an acid (in an acids list, or a shareholder's uid) not in the registry
Mg    error    resgrp names no UDB entry (a missing group)
Ng    error    resgrp names an entry that is not a resource group
Cy    error    the resgrp chain loops (a cycle)
Or    error    an ancestor is detached, so the chain never reaches ROOT
Dp    error    deeper than Maxgroups (ROOT is the first level)
Fl    error    shflags wrong for the entry's role
Id    error    the Idle entry (uid 11) is missing or misconfigured
Uk    error    no UnKnown/unknown entry, or it is a group or account
Na    error    Share by Account: a user with no acids
Sh    error    Share by Account: a user's default acid has no shareholder entry
====  =======  ===========================================================

Which entries form the tree depends on the mode, as in `fairshare.tree`: groups
and Idle always; users in Share by User mode ("user"); shareholder (account)
entries and the unknown entry in Share by Account mode ("account").  The tree
rules (Nc, Zs, Rt, Mg, Ng, Cy, Or, Dp) apply to those entries only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import inspect, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from udb import models
from udb.models import IDLE_UID, ROOT_UID, SHF_ACCOUNT, SHF_GROUP

#: Maxgroups when shradmin -G was never set: ROOT plus three levels below it.
DEFAULT_MAXLEVELS = 4

#: Names the guide accepts for the entry unknown uids are charged to.
UNKNOWN_NAMES = ("unknown", "UnKnown")

MODES = ("user", "account")

WARNING, ERROR = "warning", "error"


@dataclass(frozen=True)
class Code:
    """One problem code: its severity and its one-line description."""

    code: str
    severity: str
    description: str


#: Every code check_udb can report, in the order displays list them.
CODES: dict[str, Code] = {
    c.code: c
    for c in (
        Code("Nc", WARNING, "Group has no references"),
        Code("Zs", WARNING, "User, group or account has zero shares"),
        Code("Rt", WARNING, "User or account references ROOT directly"),
        Code("Pw", WARNING, "Group or account passwd is not *"),
        Code("Ac", WARNING, "Account ID is not registered"),
        Code("Mg", ERROR, "Resource group is missing"),
        Code("Ng", ERROR, "Resource group is not a group"),
        Code("Cy", ERROR, "Resource group chain loops"),
        Code("Or", ERROR, "Ancestor group is detached from ROOT"),
        Code("Dp", ERROR, "Deeper than Maxgroups"),
        Code("Fl", ERROR, "Shflags wrong for the entry's role"),
        Code("Id", ERROR, "Idle entry missing or misconfigured"),
        Code("Uk", ERROR, "UnKnown entry missing or misconfigured"),
        Code("Na", ERROR, "User has no account IDs"),
        Code("Sh", ERROR, "Default account has no shareholder entry"),
    )
}


@dataclass(frozen=True)
class Problem:
    """One fault in the UDB.

    `message` is the short description (the same text for every problem of one
    code and role, as displays count them, e.g. "Group has zero shares");
    `detail` says what exactly is wrong, or is empty.  `uid` is None when the
    problem is about an entry that does not exist (a missing Idle entry).
    """

    code: str
    severity: str  # "warning" or "error"
    name: str
    uid: int | None
    message: str
    detail: str = ""

    def __str__(self) -> str:
        who = self.name if self.uid is None else f"{self.name} (uid {self.uid})"
        tail = f" ({self.detail})" if self.detail else ""
        return f"{self.severity}: {who}: {self.code}: {self.message}{tail}"


class CheckedEntry(Protocol):
    """What the rules need of an entry (an Entry, or a Row with these columns)."""

    name: str
    uid: int
    resgrp: int
    shares: int
    shflags: int
    acids: list[int]
    passwd: str


# -- roles -----------------------------------------------------------------------------


def role(entry: CheckedEntry) -> str:
    """The entry's role from its shflags and uid: "group", "account", "idle" or "user"."""
    if entry.shflags & SHF_GROUP:
        return "group"
    if entry.shflags & SHF_ACCOUNT:
        return "account"
    if entry.uid == IDLE_UID:
        return "idle"
    return "user"


def in_tree(entry_role: str, name: str, mode: str) -> bool:
    """Whether an entry of `entry_role` called `name` is a node of the tree in `mode`."""
    if entry_role in ("group", "idle"):
        return True
    if mode == "user":
        return entry_role == "user"
    return entry_role == "account" or name in UNKNOWN_NAMES


# -- the chain walk ----------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where an entry sits: its level (ROOT is 0) or why it is detached.

    `fault` is "" when attached, else the code of the fault: Mg, Ng or Cy for
    the entry whose own resgrp is at fault, Or when an ancestor's is.
    """

    level: int | None
    fault: str = ""


def place_groups(groups: Mapping[int, int], all_uids: Iterable[int]) -> dict[int, Placement]:
    """The placement of every resource group, given group uid -> resgrp.

    Walks each chain once (memoised), so the cost is linear in the groups.
    """
    uids = set(all_uids)
    placed: dict[int, Placement] = {}
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
                base = Placement(0)
                break
            if parent in on_path:  # the chain closed on itself
                loop_start = on_path[parent]
                for member in path[loop_start:]:
                    placed[member] = Placement(None, "Cy")
                path = path[:loop_start]
                base = Placement(None, "Cy")
                break
            if parent not in groups:
                placed[g] = Placement(None, "Mg" if parent not in uids else "Ng")
                base = placed[g]
                path.pop()
                break
            g = parent
        # Assign from the top of the walked path down.
        for member in reversed(path):
            if base.level is None:
                base = Placement(None, "Or")
            else:
                base = Placement(base.level + 1)
            placed[member] = base
    return placed


def place(
    entry: CheckedEntry, groups: Mapping[int, int], placed: Mapping[int, Placement], uids: set
) -> Placement:
    """The placement of any entry, given the groups' placements."""
    if entry.uid in groups:
        return placed[entry.uid]
    parent = entry.resgrp
    if parent == ROOT_UID:
        return Placement(1)
    if parent not in groups:
        return Placement(None, "Mg" if parent not in uids else "Ng")
    above = placed[parent]
    return Placement(None, "Or") if above.level is None else Placement(above.level + 1)


# -- the rules ---------------------------------------------------------------------------

_FAULT_DETAIL = {
    "Mg": "resgrp {resgrp} names no UDB entry",
    "Ng": "resgrp {resgrp} names an entry that is not a resource group",
    "Cy": "resgrp {resgrp} leads back to this entry",
    "Or": "the chain above resgrp {resgrp} does not reach ROOT",
}


def check_udb(
    entries: Iterable[CheckedEntry],
    accounts: Mapping[int, str],
    mode: str = "user",
    maxlevels: int = DEFAULT_MAXLEVELS,
) -> list[Problem]:
    """Every problem in the UDB, analysed by UID (mode "user") or by account ("account").

    `entries` are UDB entries (name, uid, resgrp, shares, shflags, acids,
    passwd); `accounts` maps each registered acid to its name; `maxlevels` is
    Maxgroups (shradmin -G), counting ROOT as the first level, so an entry at
    level `maxlevels` or deeper (ROOT being level 0) is too deep.  Problems about
    the whole UDB (Idle, unknown missing) come first, then each entry's in the
    order given.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    entries = list(entries)
    roles = [role(e) for e in entries]
    uids = {e.uid for e in entries}
    groups = {e.uid: e.resgrp for e, r in zip(entries, roles, strict=True) if r == "group"}
    by_uid = {e.uid: (e, r) for e, r in zip(entries, roles, strict=True)}
    placed = place_groups(groups, uids)
    referenced = Counter(
        e.resgrp
        for e, r in zip(entries, roles, strict=True)
        if in_tree(r, e.name, mode) and e.uid != e.resgrp
    )

    problems = _global_problems(entries, by_uid)
    for e, r in zip(entries, roles, strict=True):
        problems.extend(
            _entry_problems(
                e, r, mode, maxlevels, accounts, by_uid, placed, groups, uids, referenced
            )
        )
    return problems


def _global_problems(entries: list[CheckedEntry], by_uid: dict) -> list[Problem]:
    out = []
    if IDLE_UID not in by_uid:
        out.append(
            Problem(
                "Id", ERROR, "Idle", None, "Idle entry is missing", f"no entry has uid {IDLE_UID}"
            )
        )
    if not any(e.name in UNKNOWN_NAMES for e in entries):
        out.append(
            Problem(
                "Uk",
                ERROR,
                "UnKnown",
                None,
                "UnKnown entry is missing",
                "no entry is called UnKnown or unknown",
            )
        )
    return out


def _entry_problems(e, r, mode, maxlevels, accounts, by_uid, placed, groups, uids, referenced):
    out: list[Problem] = []
    title = r.capitalize()

    def add(code: str, message: str, detail: str = "") -> None:
        out.append(Problem(code, CODES[code].severity, e.name, e.uid, message, detail))

    tree_node = in_tree(r, e.name, mode)
    if tree_node:
        where = place(e, groups, placed, uids)
        if where.fault:
            add(
                where.fault,
                CODES[where.fault].description,
                _FAULT_DETAIL[where.fault].format(resgrp=e.resgrp),
            )
        elif where.level >= maxlevels:
            add(
                "Dp",
                "Deeper than Maxgroups",
                f"level {where.level}, Maxgroups {maxlevels} allows levels 0..{maxlevels - 1}",
            )
        if r == "group" and not referenced.get(e.uid):
            add("Nc", "Group has no references")
        if r != "idle" and e.shares == 0:
            add("Zs", f"{title} has zero shares")
        if r in ("user", "account") and e.resgrp == ROOT_UID:
            add("Rt", f"{title} references ROOT directly")

    if e.shflags & SHF_GROUP and e.shflags & SHF_ACCOUNT:
        add(
            "Fl",
            "Shflags wrong for the entry's role",
            f"shflags {e.shflags:o} marks both a group (40000) and an account (1000000)",
        )
    elif r == "group" and e.shflags != SHF_GROUP:
        add(
            "Fl",
            "Shflags wrong for the entry's role",
            f"a group's shflags must be 40000, not {e.shflags:o}",
        )
    elif r == "account" and e.shflags != SHF_ACCOUNT:
        add(
            "Fl",
            "Shflags wrong for the entry's role",
            f"an account's shflags must be 1000000, not {e.shflags:o}",
        )

    if r in ("group", "account") and e.passwd != "*":
        add("Pw", f"{title} passwd is not *")

    if e.uid == IDLE_UID or e.name == "Idle":
        bad = _idle_faults(e)
        if bad:
            add("Id", "Idle entry is misconfigured", "; ".join(bad))
    if e.name in UNKNOWN_NAMES and r in ("group", "account"):
        add("Uk", "UnKnown entry is misconfigured", f"it is a {r}, not a user")

    unregistered = [a for a in e.acids if a not in accounts]
    if r == "account" and e.uid not in accounts:
        unregistered.insert(0, e.uid)
    if unregistered:
        add(
            "Ac",
            "Account ID is not registered",
            "acid " + ", ".join(str(a) for a in unregistered) + " not in the account registry",
        )

    if mode == "account" and r == "user" and e.name not in UNKNOWN_NAMES:
        if not e.acids:
            add("Na", "User has no account IDs")
        else:
            holder = by_uid.get(e.acids[0])
            if holder is None or holder[1] != "account":
                what = "no entry" if holder is None else f"{holder[0].name} is a {holder[1]}"
                add("Sh", "Default account has no shareholder entry", f"acid {e.acids[0]}: {what}")
    return out


def _idle_faults(e: CheckedEntry) -> list[str]:
    bad = []
    if e.uid != IDLE_UID:
        bad.append(f"uid must be {IDLE_UID}, not {e.uid}")
    if e.shares != 0:
        bad.append(f"shares must be 0, not {e.shares}")
    if e.resgrp != ROOT_UID:
        bad.append(f"resgrp must be 0, not {e.resgrp}")
    if e.acids:
        bad.append("acids must be empty")
    if e.shflags != 0:
        bad.append(f"shflags must be 0, not {e.shflags:o}")
    return bad


# -- counting and configuration ---------------------------------------------------------


def count_by_kind(problems: Iterable[Problem]) -> list[tuple[str, str, str, int]]:
    """(severity, code, message, count) per distinct code and message, warnings first,
    then in CODES order: the guide's ``Warning Count:`` / ``Error Count:`` lines."""
    counts = Counter((p.severity, p.code, p.message) for p in problems)
    order = {c: i for i, c in enumerate(CODES)}
    keys = sorted(counts, key=lambda k: (k[0] != WARNING, order.get(k[1], 99), k[2]))
    return [(s, c, m, counts[(s, c, m)]) for s, c, m in keys]


def configured_maxlevels(session: Session) -> int:
    """Maxgroups (shradmin -G): the number of levels the share tree may have, ROOT included.

    Read from the constants row named "maxlevels" when the UDB has that table;
    DEFAULT_MAXLEVELS (4) otherwise.  This is the one place udb reads it.
    """
    const = getattr(models, "Const", None)
    if const is None:
        return DEFAULT_MAXLEVELS
    try:
        if not inspect(session.get_bind()).has_table(const.__tablename__):
            return DEFAULT_MAXLEVELS
        value = session.execute(select(const.value).where(const.name == "maxlevels")).scalar()
    except SQLAlchemyError:
        return DEFAULT_MAXLEVELS
    return DEFAULT_MAXLEVELS if value is None else int(value)


def load_accounts(session: Session) -> dict[int, str]:
    """The account registry as acid -> account name."""
    return dict(session.execute(select(models.Account.acid, models.Account.name)).all())


#: The entry columns check_udb reads; `select(*CHECK_COLUMNS)` gives suitable rows.
CHECK_COLUMNS = (
    models.Entry.name,
    models.Entry.uid,
    models.Entry.resgrp,
    models.Entry.shares,
    models.Entry.shflags,
    models.Entry.acids,
    models.Entry.passwd,
)
