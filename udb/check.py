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

Which entries form the tree, and the chain faults Mg, Ng, Cy and Or, are
`udb.rules`' (the same rules build `fairshare.core.tree`'s share tree): groups and Idle
always; users in Share by User mode ("user"); shareholder (account) entries and
the unknown entry in Share by Account mode ("account").  The tree rules (Nc, Zs,
Rt, Mg, Ng, Cy, Or, Dp) apply to those entries only.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import String, inspect, select, type_coerce
from sqlalchemy.exc import SQLAlchemyError

from udb import tables
from udb.rules import (
    IDLE_UID,
    MODES,
    ROOT_UID,
    SHF_ACCOUNT,
    SHF_GROUP,
    UNKNOWN_NAMES,
    Placement,
    in_tree,
    place_entry,
    role_of,
    walk_groups,
)
from udb.session import core

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

#: Maxgroups when shradmin -G was never set: ROOT plus three levels below it.
DEFAULT_MAXLEVELS = 4

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


# Neither frozen nor slots: a frozen dataclass's __init__ sets each field through
# object.__setattr__ (4 times as long: 0.08 s for the 100,000 problems of a site whose
# users are too deep), and orjson writes one with a __dict__ 5 times faster than one
# with slots (0.01 against 0.055 s for those 100,000).
@dataclass
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
    """The entry's role (see `role_of`)."""
    return role_of(entry.shflags, entry.uid)


# -- the rules ---------------------------------------------------------------------------

_FAULT_DETAIL = {
    "Mg": "resgrp {resgrp} names no UDB entry",
    "Ng": "resgrp {resgrp} names an entry that is not a resource group",
    "Cy": "resgrp {resgrp} leads back to this entry",
    "Or": "the chain above resgrp {resgrp} does not reach ROOT",
}


@dataclass(frozen=True)
class EntryColumns:
    """Entries as one list per field (entry i is element i of every list)."""

    name: Sequence[str]
    uid: Sequence[int]
    resgrp: Sequence[int]
    shares: Sequence[int]
    shflags: Sequence[int]
    acids: Sequence[Sequence[int]]
    passwd: Sequence[str]
    shusage: Sequence[float] = ()  # charge units; empty when not read
    shextime: Sequence[float] = ()  # seconds since the epoch; empty when not read
    halflife: Sequence[float] = ()  # s, the entry's own usage half-life (0: inherited)

    def __len__(self) -> int:
        return len(self.name)

    @classmethod
    def of(cls, entries: Iterable[CheckedEntry]) -> EntryColumns:
        """The columns of Entry-like objects (shusage/shextime 0 where they have none)."""
        entries = list(entries)
        return cls(
            [e.name for e in entries],
            [e.uid for e in entries],
            [e.resgrp for e in entries],
            [e.shares for e in entries],
            [e.shflags for e in entries],
            [e.acids or () for e in entries],
            [e.passwd for e in entries],
            [getattr(e, "shusage", 0.0) for e in entries],
            [getattr(e, "shextime", 0.0) for e in entries],
            [getattr(e, "halflife", 0.0) or 0.0 for e in entries],
        )


def load_entry_columns(session: Session | Connection) -> EntryColumns:
    """Every UDB entry as columns, read in one query without building ORM objects."""
    raw_acids = type_coerce(tables.entries.c.acids, String)  # parse only the non-empty lists
    query = select(*CHECK_COLUMNS[:5], raw_acids, *CHECK_COLUMNS[6:], *USAGE_COLUMNS)
    rows = core(session).execute(query.order_by(tables.entries.c.id)).all()  # Core rows
    if not rows:
        return EntryColumns([], [], [], [], [], [], [], [], [], [])
    cols = list(zip(*rows, strict=True))
    cols[5] = [_acids(a) for a in cols[5]]
    return EntryColumns(*cols)


def _acids(value: object) -> Sequence[int]:
    if value is None or value == "[]":
        return ()
    return json.loads(value) if isinstance(value, str) else value


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
    return check_columns(EntryColumns.of(entries), accounts, mode, maxlevels)


def check_columns(
    cols: EntryColumns,
    accounts: Mapping[int, str],
    mode: str = "user",
    maxlevels: int = DEFAULT_MAXLEVELS,
) -> list[Problem]:
    """`check_udb` over entry columns (the fast path for 100,000 entries)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    names, uids, resgrps = cols.name, cols.uid, cols.resgrp
    roles = list(map(role_of, cols.shflags, uids))
    nodes = list(map(in_tree, roles, names, repeat(mode)))
    all_uids = set(uids)
    groups = {u: g for u, g, r in zip(uids, resgrps, roles, strict=True) if r == "group"}
    walk = walk_groups(groups, all_uids)
    referenced = set(g for u, g, node in zip(uids, resgrps, nodes, strict=True) if node and u != g)
    if mode == "account":  # who a user's default acid names (Sh)
        role_of_uid = dict(zip(uids, roles, strict=True))
        name_of_uid = dict(zip(uids, names, strict=True))

    below: dict[int, list] = {}  # resgrp -> the tree faults of a leaf under it
    problems = _missing_entries(all_uids, names)
    columns = (names, uids, resgrps, cols.shares, cols.shflags, cols.acids, cols.passwd)
    for name, uid, resgrp, shares, flags, acids, passwd, r, node in zip(
        *columns, roles, nodes, strict=True
    ):
        found: list[tuple[str, str, str]] = []  # (code, message, detail)
        if node:
            if uid in groups:
                found += _tree_faults(walk.placed[uid], resgrp, maxlevels)
            else:  # a leaf's place depends on its resgrp only: work it out once per group
                faults = below.get(resgrp)
                if faults is None:
                    where = place_entry(uid, resgrp, groups, walk, all_uids)
                    faults = below[resgrp] = _tree_faults(where, resgrp, maxlevels)
                found += faults
            if r == "group" and uid not in referenced:
                found.append(("Nc", "Group has no references", ""))
            if shares == 0 and r != "idle":
                found.append(("Zs", f"{r.capitalize()} has zero shares", ""))
            if resgrp == ROOT_UID and (r == "user" or r == "account"):
                found.append(("Rt", f"{r.capitalize()} references ROOT directly", ""))
        if r == "group" or r == "account":
            found += _flag_faults(r, flags, passwd)
        if uid == IDLE_UID or name == "Idle":
            bad = _idle_faults(name, uid, resgrp, shares, flags, acids)
            if bad:
                found.append(("Id", "Idle entry is misconfigured", "; ".join(bad)))
        if name in UNKNOWN_NAMES and (r == "group" or r == "account"):
            found.append(("Uk", "UnKnown entry is misconfigured", f"it is a {r}, not a user"))
        if acids or r == "account":
            found += _acid_faults(r, uid, acids, accounts)
        if mode == "account" and r == "user" and name not in UNKNOWN_NAMES:
            found += _holder_faults(name, acids, role_of_uid, name_of_uid)
        for code, message, detail in found:
            problems.append(Problem(code, CODES[code].severity, name, uid, message, detail))
    return problems


def _missing_entries(all_uids: set[int], names: Sequence[str]) -> list[Problem]:
    """The problems about the whole UDB: no Idle entry, no unknown entry."""
    problems = []
    if IDLE_UID not in all_uids:
        problems.append(
            Problem(
                "Id", ERROR, "Idle", None, "Idle entry is missing", f"no entry has uid {IDLE_UID}"
            )
        )
    if not any(n in UNKNOWN_NAMES for n in names):
        problems.append(
            Problem(
                "Uk",
                ERROR,
                "UnKnown",
                None,
                "UnKnown entry is missing",
                "no entry is called UnKnown or unknown",
            )
        )
    return problems


def _tree_faults(where: Placement, resgrp: int, maxlevels: int) -> list[tuple[str, str, str]]:
    """A tree node's chain fault (Mg, Ng, Cy, Or) or its depth fault (Dp)."""
    if where.fault:
        detail = _FAULT_DETAIL[where.fault].format(resgrp=resgrp)
        return [(where.fault, CODES[where.fault].description, detail)]
    if where.level >= maxlevels:
        detail = f"level {where.level}, Maxgroups {maxlevels} allows levels 0..{maxlevels - 1}"
        return [("Dp", "Deeper than Maxgroups", detail)]
    return []


def _flag_faults(r: str, flags: int, passwd: str) -> list[tuple[str, str, str]]:
    """A group's or account's shflags (Fl) and passwd (Pw) faults."""
    found = []
    if flags & SHF_GROUP and flags & SHF_ACCOUNT:
        detail = f"shflags {flags:o} marks both a group (40000) and an account (1000000)"
        found.append(("Fl", CODES["Fl"].description, detail))
    elif r == "group" and flags != SHF_GROUP:
        detail = f"a group's shflags must be 40000, not {flags:o}"
        found.append(("Fl", CODES["Fl"].description, detail))
    elif r == "account" and flags != SHF_ACCOUNT:
        detail = f"an account's shflags must be 1000000, not {flags:o}"
        found.append(("Fl", CODES["Fl"].description, detail))
    if passwd != "*":
        found.append(("Pw", f"{r.capitalize()} passwd is not *", ""))
    return found


def _acid_faults(r: str, uid: int, acids, accounts: Mapping[int, str]) -> list:
    """Acids (and a shareholder's own uid) missing from the account registry (Ac)."""
    unregistered = [a for a in acids if a not in accounts]
    if r == "account" and uid not in accounts:
        unregistered.insert(0, uid)
    if not unregistered:
        return []
    listed = ", ".join(str(a) for a in unregistered)
    return [("Ac", "Account ID is not registered", f"acid {listed} not in the account registry")]


def _holder_faults(name: str, acids, role_of_uid: dict, name_of_uid: dict) -> list:
    """Share by Account: a user with no acids (Na) or no shareholder entry (Sh)."""
    if not acids:
        return [("Na", "User has no account IDs", "")]
    holder = acids[0]
    if role_of_uid.get(holder) == "account":
        return []
    what = (
        "no entry"
        if holder not in role_of_uid
        else f"{name_of_uid[holder]} is a {role_of_uid[holder]}"
    )
    return [("Sh", "Default account has no shareholder entry", f"acid {holder}: {what}")]


def _idle_faults(name, uid, resgrp, shares, shflags, acids) -> list[str]:
    bad = []
    if uid != IDLE_UID:
        bad.append(f"uid must be {IDLE_UID}, not {uid}")
    if shares != 0:
        bad.append(f"shares must be 0, not {shares}")
    if resgrp != ROOT_UID:
        bad.append(f"resgrp must be 0, not {resgrp}")
    if acids:
        bad.append("acids must be empty")
    if shflags != 0:
        bad.append(f"shflags must be 0, not {shflags:o}")
    return bad


# -- counting and configuration ---------------------------------------------------------


def count_by_kind(problems: Iterable[Problem]) -> list[tuple[str, str, str, int]]:
    """(severity, code, message, count) per distinct code and message: the guide's
    ``Warning Count:`` / ``Error Count:`` lines.  Warnings first, then in CODES order;
    within a code, users before groups before accounts, as the guide lists them."""
    counts = Counter((p.severity, p.code, p.message) for p in problems)
    order = {c: i for i, c in enumerate(CODES)}
    roles = {"User": 0, "Group": 1, "Account": 2}

    def key(k: tuple[str, str, str]):
        return (k[0] != WARNING, order.get(k[1], 99), roles.get(k[2].split()[0], 3), k[2])

    keys = sorted(counts, key=key)
    return [(s, c, m, counts[(s, c, m)]) for s, c, m in keys]


def configured_maxlevels(session: Session | Connection) -> int:
    """Maxgroups (shradmin -G): the number of levels the share tree may have, ROOT included.

    Read from the constants row named "maxlevels" when the UDB has that table;
    DEFAULT_MAXLEVELS (4) otherwise.  This is the one place udb reads it.
    """
    const = tables.consts
    try:
        conn = core(session)
        if not inspect(conn).has_table(const.name):
            return DEFAULT_MAXLEVELS
        value = conn.execute(select(const.c.value).where(const.c.name == "maxlevels")).scalar()
    except SQLAlchemyError:
        return DEFAULT_MAXLEVELS
    return DEFAULT_MAXLEVELS if value is None else int(value)


def check_stored(session: Session | Connection, mode: str, maxlevels: int) -> list[Problem]:
    """`check_udb`'s answer for the UDB behind `session` (udbgen -a, shradmin -G)."""
    return check_columns(load_entry_columns(session), load_accounts(session), mode, maxlevels)


def load_accounts(session: Session | Connection) -> dict[int, str]:
    """The account registry as acid -> account name."""
    return dict(session.execute(select(tables.accounts.c.acid, tables.accounts.c.name)).all())


#: The entry columns check_udb reads; `select(*CHECK_COLUMNS)` gives suitable rows.
CHECK_COLUMNS = (
    tables.entries.c.name,
    tables.entries.c.uid,
    tables.entries.c.resgrp,
    tables.entries.c.shares,
    tables.entries.c.shflags,
    tables.entries.c.acids,
    tables.entries.c.passwd,
)
#: The stored usage columns (shusage, shextime) that shrtree adds to CHECK_COLUMNS.
USAGE_COLUMNS = (tables.entries.c.shusage, tables.entries.c.shextime, tables.entries.c.halflife)
