"""Planning a run of directives: replay them over the UDB's state in memory, check the
final state as a whole, work out the changes and write them in a few statements.

`Plan` reads every entry and account once, applies each `Directive` (udb.fields) to its copy
(resolving names in resgrp and acids), `validate`s the final state with the share-tree
rules of `udb.rules` (unique names and uids, every resgrp 0 or a group, no cycle of
groups, every acid registered), diffs it against the original (`Changes`) and writes
the diff with one executemany per kind of change.  `udb.directives.apply` drives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from udb import tables
from udb.errors import DirectiveError, OptionError
from udb.fields import BASE_FIELD, DEFAULTS, FIELDS, MAXVIDS, VERBS, Directive, shown_passwd
from udb.listing import format_entry
from udb.models import SHF_ACCOUNT, SHF_GROUP, Account
from udb.mounts import read_only
from udb.rules import parent_fault, walk_groups

_ENTRIES = tables.entries
_ACCOUNTS = tables.accounts


@dataclass
class FieldChange:
    """One field of one entry changed by a run: its value before and after."""

    field: str
    old: object
    new: object


@dataclass
class Changes:
    """What a run of directives changed (or, in test mode, would change)."""

    created: list[dict] = field(default_factory=list)  # full rows of new entries
    updated: list[tuple[str, list[FieldChange]]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    accounts_added: list[tuple[str, int]] = field(default_factory=list)
    accounts_removed: list[tuple[str, int]] = field(default_factory=list)
    #: The guide's warnings (not errors: the run is written), one line each, in input order.
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line counting the changes."""
        return (
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.deleted)} deleted, {len(self.accounts_added)} accounts added, "
            f"{len(self.accounts_removed)} accounts removed"
        )

    def as_directives(self) -> Iterator[str]:
        """The changes written as directives, old values in a trailing comment."""
        for name, acid in self.accounts_added:
            yield f"acid:{name}:{acid}:"
        for name in self.deleted:
            yield f"delete:{name}:"
        for row in self.created:
            yield format_entry(row, [f for f in FIELDS if f == "uid" or row[f] != DEFAULTS[f]])
        for name, changes in self.updated:
            new = {c.field: c.new for c in changes}
            old = {c.field: c.old for c in changes}
            text = format_entry({"name": name, **new}, list(new), verb="update")
            was = format_entry({"name": name, **old}, list(old), verb="update")
            yield f"{text}  # was {was.split(':', 2)[2]}"
        for name, acid in self.accounts_removed:
            yield f"delacid:{name}:  # was {acid}"

    def as_json(self) -> dict:
        """The changes as plain JSON-able values (password hashes hidden)."""

        def safe(f: str, v: object) -> object:
            return shown_passwd(v) if f == "passwd" else v

        return {
            "created": [{k: safe(k, v) for k, v in r.items() if k != "id"} for r in self.created],
            "updated": [
                {
                    "name": n,
                    "fields": {c.field: [safe(c.field, c.old), safe(c.field, c.new)] for c in cs},
                }
                for n, cs in self.updated
            ],
            "deleted": list(self.deleted),
            "accounts_added": [{"name": n, "acid": a} for n, a in self.accounts_added],
            "accounts_removed": [{"name": n, "acid": a} for n, a in self.accounts_removed],
        }


_COLUMNS = ("id", "name", "uid", *DEFAULTS)
_NEW_ROW = {"name": None, "uid": None, **DEFAULTS}
#: Fields whose value may name an entry or an account.
_BY_NAME = frozenset({"resgrp", "acids", "acids+", "acids-"})
#: Entries nobody logs in as: the guide's resource groups (4.4.2: "the default encrypted
#: password is the character *") and, as udbgen -a's Pw rule asks, shareholders.
_NO_LOGIN = SHF_GROUP | SHF_ACCOUNT


def _uids_and_groups(entries: dict[str, dict], touched: dict[str, Directive], blame):
    """The entries' names by uid and the groups' resgrp by uid; `blame` told of every uid
    used twice (the later-touched entry blamed)."""
    by_uid: dict[int, str] = {}
    groups: dict[int, int] = {}
    for name, row in entries.items():
        uid = row["uid"]
        other = by_uid.get(uid)
        if other is not None:
            first, second = sorted(
                (other, name), key=lambda n: touched[n].key if n in touched else -1
            )
            blame(second, f"uid {uid} is already used by {first}")
        by_uid[uid] = name
        if row["shflags"] & SHF_GROUP:
            groups[uid] = row["resgrp"]
    return by_uid, groups


class Plan:
    """The UDB's state while a run's directives are replayed over it, in memory."""

    def __init__(self, session: Session, replace: bool = False):
        cols = [_ENTRIES.c[c] for c in _COLUMNS]
        self.original: dict[str, dict] = {}
        for row in session.execute(select(*cols).order_by(_ENTRIES.c.id)):
            self.original[row[1]] = dict(zip(_COLUMNS, row, strict=True))
        self.accounts0 = dict(session.execute(select(Account.name, Account.acid)).all())
        #: Mounted entries and mount points (udb.mounts): read-only to this run.
        self.ro = read_only(session)
        # With replace, the run starts from nothing: every old row reads as deleted, but
        # the mounted ones, which are the policy fetcher's, not the directives'.
        kept = {n: r for n, r in self.original.items() if n in self.ro.mounted}
        self.entries: dict[str, dict] = kept if replace else dict(self.original)
        self.replace = replace
        self.accounts: dict[str, int] = {} if replace else dict(self.accounts0)
        self.touched: dict[str, Directive] = {}  # entry name -> last directive touching it
        self.uid_gone: dict[int, Directive] = {}  # uid a directive removed or re-flagged
        self.acid_gone: dict[int, Directive] = {}  # account number a delacid removed
        self._acids_seen: dict[int, tuple[list, list[int]]] = {}
        self._verbs = {v: getattr(self, "_" + v) for v in VERBS}

    # -- replay ------------------------------------------------------------------------

    def apply(self, d: Directive) -> None:
        self._verbs[d.verb](d)

    def _create(self, d: Directive) -> None:
        if self.replace and d.name in self.ro.mounted:
            return  # a backup's copy of a mounted entry (udbsee -a): the fetched one stays
        if d.name in self.entries:
            raise d.error(f"an entry named {d.name} already exists")
        row = _NEW_ROW.copy()
        row["name"] = d.name
        self._set(d, row)
        if row["uid"] is None:
            raise d.error("a new entry needs a uid field")
        self.ro.refuse_parent(d, row, self.entries)
        if row["shflags"] & _NO_LOGIN and not any(f[0] == "passwd" for f in d.fields):
            row["passwd"] = "*"
        self.entries[d.name] = row
        self.touched[d.name] = d

    def _update(self, d: Directive) -> None:
        row = self.entries.get(d.name)
        if row is None:
            raise d.error(f"no entry named {d.name}")
        self.ro.refuse(d)
        if d.name not in self.touched:
            row = self.entries[d.name] = dict(row)
        old_uid, old_flags, old_resgrp = row["uid"], row["shflags"], row["resgrp"]
        self._set(d, row)
        if row["resgrp"] != old_resgrp:
            self.ro.refuse_parent(d, row, self.entries)
        if row["uid"] != old_uid:
            self.ro.refuse_point(d, "its uid holds the mounted subtree")
        if row["uid"] != old_uid or row["shflags"] != old_flags:
            self.uid_gone[old_uid] = d
        self.touched[d.name] = d

    def _delete(self, d: Directive) -> None:
        self.ro.refuse(d)
        if d.name in self.entries:
            self.ro.refuse_point(d, "unmount it first (shrgrid --unmount)")
        row = self.entries.pop(d.name, None)
        if row is None:
            raise d.error(f"no entry named {d.name}")
        self.touched.pop(d.name, None)
        self.uid_gone[row["uid"]] = d

    def keep_mount_points(self) -> None:
        """OptionError when a replacement run leaves out a mount point (udb.mounts)."""
        self.ro.check_kept(self.entries, self.original)

    def _acid(self, d: Directive) -> None:
        number = d.fields[0][1]
        if d.name in self.accounts:
            raise d.error(f"account {d.name} is already registered as {self.accounts[d.name]}")
        for other, acid in self.accounts.items():
            if acid == number:
                raise d.error(f"account number {number} is already registered as {other}", 2)
        self.accounts[d.name] = number
        self._acids_seen.clear()

    def _delacid(self, d: Directive) -> None:
        number = self.accounts.pop(d.name, None)
        if number is None:
            raise d.error(f"no account named {d.name} in the registry")
        self.acid_gone[number] = d
        self._acids_seen.clear()

    def _set(self, d: Directive, row: dict) -> None:
        for fname, value, token in d.fields:
            if value.__class__ is not int and fname in _BY_NAME:
                value = self._resolve(d, BASE_FIELD[fname], value, token)
            if fname[-1] in "+-":
                value = _operate(d, fname, row, value, token)
                fname = BASE_FIELD[fname]
            row[fname] = value

    def _resolve(self, d: Directive, fname: str, value, token: int):
        """resgrp and acids with names in them, as numbers (from the state at this point)."""
        if fname == "resgrp":
            parent = self.entries.get(value)
            if parent is None:
                raise d.error(f"resgrp: no entry named {value}", token)
            return parent["uid"]
        hit = self._acids_seen.get(id(value))  # parsed lists are shared: resolve each once
        if hit is not None and hit[0] is value:
            return hit[1]
        resolved = []
        for a in value:
            if a.__class__ is str:
                if a not in self.accounts:
                    raise d.error(
                        f"acids: no account named {a} (register it with acid:{a}:NUMBER:)", token
                    )
                a = self.accounts[a]
            resolved.append(a)
        self._acids_seen[id(value)] = (value, resolved)
        return resolved

    # -- the final state ---------------------------------------------------------------

    def validate(self) -> None:
        """Raise the first (in input order) error of the final state, if any."""
        errors: list[tuple[int, DirectiveError]] = []
        touched = self.touched

        def blame(name: str, message: str, *causes: int, acid: bool = False) -> None:
            d = touched.get(name)
            if d is None:  # untouched: blame whatever removed what it refers to
                gone = self.acid_gone if acid else self.uid_gone
                ds = [gone[c] for c in causes if c in gone]
                if not ds:
                    return  # a fault the UDB had before this run: not ours to refuse
                d = max(ds, key=lambda x: x.key)
            errors.append((d.key, d.error(message)))

        by_uid, groups = _uids_and_groups(self.entries, touched, blame)
        registered = set(self.accounts.values())
        for name, row in self.entries.items():
            flags, resgrp = row["shflags"], row["resgrp"]
            if flags & SHF_GROUP and flags & SHF_ACCOUNT:
                blame(name, "shflags cannot mark both a group (040000) and an account (01000000)")
            fault = parent_fault(resgrp, groups, by_uid)
            if fault:
                what = "names no entry" if fault == "Mg" else "is not a resource group"
                blame(name, f"resgrp {resgrp} {what} (a resgrp must be 0 or a group's uid)", resgrp)
            if flags & SHF_ACCOUNT and row["uid"] not in registered:
                blame(
                    name,
                    f"a shareholder's uid must be a registered account, {row['uid']} is not",
                    row["uid"],
                    acid=True,
                )
            acids = row["acids"]
            if acids:
                missing = [a for a in acids if a not in registered]
                if missing:
                    blame(
                        name,
                        f"acids: account {missing[0]} is not registered "
                        f"(register it with acid:NAME:{missing[0]}:)",
                        *missing,
                        acid=True,
                    )

        for cycle in walk_groups(groups, by_uid).cycles:
            names = [by_uid[u] for u in cycle]
            culprits = [n for n in names if n in touched]
            if culprits:
                last = max(culprits, key=lambda n: touched[n].key)
                chain = " -> ".join(names + names[:1])
                errors.append((touched[last].key, touched[last].error(f"resgrp cycle: {chain}")))
        if errors:
            raise min(errors, key=lambda e: e[0])[1]

    # -- writing -----------------------------------------------------------------------

    def changes(self) -> Changes:
        """What the run changes, from the original and the final state."""
        ch = Changes()
        for name, acid in self.accounts.items():
            if self.accounts0.get(name) != acid:
                ch.accounts_added.append((name, acid))
        for name, acid in self.accounts0.items():
            if self.accounts.get(name) != acid:
                ch.accounts_removed.append((name, acid))
        for name, row in self.original.items():
            new = self.entries.get(name)
            if new is None or new.get("id") != row["id"]:
                ch.deleted.append(name)
        for name, row in self.entries.items():
            if "id" not in row:
                ch.created.append(row)
            elif name in self.touched:
                old = self.original[name]
                diffs = [FieldChange(f, old[f], row[f]) for f in FIELDS if old[f] != row[f]]
                if diffs:
                    ch.updated.append((name, diffs))
        return ch

    def write(self, session: Session, ch: Changes) -> None:
        """Write the changes with one statement (executemany) per kind."""
        conn = session.connection()
        if ch.accounts_removed:
            conn.execute(
                delete(_ACCOUNTS).where(_ACCOUNTS.c.name == bindparam("b_name")),
                [{"b_name": n} for n, _ in ch.accounts_removed],
            )
        if ch.deleted:
            ids = [self.original[n]["id"] for n in ch.deleted]
            conn.execute(
                delete(_ENTRIES).where(_ENTRIES.c.id == bindparam("b_id")),
                [{"b_id": i} for i in ids],
            )
        updates = [(self.entries[name], diffs) for name, diffs in ch.updated]
        moved = [row["id"] for row, diffs in updates if any(c.field == "uid" for c in diffs)]
        if moved:  # park moved uids first so that swapping two uids breaks no constraint
            conn.execute(
                update(_ENTRIES)
                .where(_ENTRIES.c.id == bindparam("b_id"))
                .values(uid=-bindparam("b_id") - 1),
                [{"b_id": i} for i in moved],
            )
        by_shape: dict[tuple[str, ...], list[dict]] = {}
        for row, diffs in updates:
            shape = tuple(c.field for c in diffs)
            by_shape.setdefault(shape, []).append(
                {"b_id": row["id"], **{f"b_{f}": row[f] for f in shape}}
            )
        for shape, params in by_shape.items():
            stmt = (
                update(_ENTRIES)
                .where(_ENTRIES.c.id == bindparam("b_id"))
                .values({f: bindparam(f"b_{f}") for f in shape})
            )
            conn.execute(stmt, params)
        if ch.accounts_added:
            conn.execute(insert(_ACCOUNTS), [{"acid": a, "name": n} for n, a in ch.accounts_added])
        if ch.created:
            conn.execute(insert(_ENTRIES), ch.created)


def _operate(d: Directive, fname: str, row: dict, value, token: int):
    """The new value of the field `fname` (``acids+``, ``acids-``, ``shflags+``,
    ``shflags-``) changes, from its value in `row` and the directive's `value`."""
    if fname == "shflags+":
        return row["shflags"] | value
    if fname == "shflags-":
        return row["shflags"] & ~value
    old: list[int] = row["acids"]
    if fname == "acids-":
        return [a for a in old if a not in value]
    new = old + [a for a in dict.fromkeys(value) if a not in old]
    if len(new) > MAXVIDS:
        raise d.error(
            f"acids+: at most {MAXVIDS} account IDs (MAXVIDS), this makes {len(new)}", token
        )
    return new


def no_gid_warnings(plan: Plan, ch: Changes) -> list[str]:
    """The guide's warning (4.4.2: "at least one GID must be specified, or warning messages
    will occur"), one line per entry the run creates with no gids or whose gids it empties,
    in input order."""
    emptied = {n for n, cs in ch.updated if any(c.field == "gids" and not c.new for c in cs)}
    names = [r["name"] for r in ch.created if not r["gids"]] + sorted(emptied)
    out = []
    for name in sorted(names, key=lambda n: plan.touched[n].key):
        d = plan.touched[name]
        out.append(
            f"{d.source}:{d.line}:{d.col()}: {d.verb}:{name}: "
            "no gids (at least one GID must be specified)"
        )
    return out


def refuse_emptying(plan: Plan, ch: Changes) -> None:
    def people(entries: Iterable[dict]) -> int:
        return sum(1 for row in entries if not row["shflags"] & SHF_ACCOUNT)

    if people(plan.original.values()) and not people(plan.entries.values()):
        raise OptionError(
            f"--replace with this input would delete every group and user: "
            f"{len(ch.deleted)} entries and {len(ch.accounts_removed)} accounts would go; "
            "give --force if that is what you want"
        )
