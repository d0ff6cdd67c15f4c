"""The udbgen directive language: parse it, apply it to the UDB in one transaction, print it.

A directive file holds directives, several on a line or one per line, and
``#`` comments::

    # resource groups (the guide, section 4.4.2)
    create:Maint:uid:999:gids:10:passwd:*:shflags:040000:shares:100:resgrp:0:
    update:u1:resgrp:Maint:shares:25:   delete:u17:
    acid:proj1:2001:                    # register an account (the guide's /etc/acid)
    delacid:proj9:                      # and remove one

``create:NAME:field:value:...:`` makes an entry (``uid`` is required, every
other field defaults to 0 or empty), ``update:NAME:field:value:...:`` changes
the given fields of an existing entry, ``delete:NAME:`` removes one.
``acid:NAME:NUMBER:`` adds an account to the registry, ``delacid:NAME:``
removes one.  A directive ends on the line it starts on.  Values cannot hold
``:`` (it separates tokens); ``#`` starts a comment only where a directive or
a field name is expected, so a comment value may contain it.

Applying is all or nothing: `parse` turns the whole text into `Directive`
records first, `apply` replays them over the UDB's current state in memory,
checks the final state as a whole (unique names and uids, every resgrp a
resource group, no cycle of groups, every acid registered) and only then
writes, with one executemany per kind of change.  Any error raises
`DirectiveError` at the position of the directive that caused it.
"""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy import Engine, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from udb.errors import DirectiveError, NotFound, OptionError
from udb.models import (
    MAX_COMMENT,
    MAX_CPU_SECONDS,
    MAX_EPOCH,
    MAX_ID,
    MAX_PASSWD,
    MAX_SHARES,
    MAX_SHFLAGS,
    MAX_USAGE,
    SHF_ACCOUNT,
    SHF_GROUP,
    Account,
    Entry,
)
from udb.rules import parent_fault, walk_groups
from udb.session import mark_entries_changed, write_session

#: The verbs a directive can start with.
VERBS = ("create", "update", "delete", "acid", "delacid")

#: The guide's MAXVIDS: the most account IDs one entry may list.
MAXVIDS = 64

#: Entry and account names: no blanks, no ``:`` or ``,`` (the separators), not starting with #.
NAME_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@$+-]{0,63}")

_ENTRIES = Entry.__table__
_ACCOUNTS = Account.__table__

# -- fields -----------------------------------------------------------------------------


def _bounded(text: str, lo: int, hi: int, what: str = "a whole number") -> int:
    s = text.strip()
    digits = s[1:] if s[:1] in "+-" and lo < 0 else s
    # Too many digits is out of range before int() (which refuses over 4300 digits).
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 20:
        raise ValueError(f"expected {what} from {lo} to {hi}")
    value = int(s)
    if not lo <= value <= hi:
        raise ValueError(f"expected {what} from {lo} to {hi}")
    return value


def _uint(text: str) -> int:
    """A uid, gid or account number: 0 to MAX_ID."""
    return _bounded(text, 0, MAX_ID)


def _shares(text: str) -> int:
    return _bounded(text, 0, MAX_SHARES)


def _nice(text: str) -> int:
    return _bounded(text, -20, 19, "a nice value")


def _ufloat_upto(hi: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 <= value <= hi:  # NaN and infinities too
            raise ValueError(f"expected a number from 0 to {hi:g}")
        return value

    return parse


def _octal(text: str) -> int:
    s = text.strip()
    if not s or not s.isascii() or s.strip("01234567") or int(s, 8) > MAX_SHFLAGS:
        raise ValueError(
            f"expected an octal number such as 040000 or 01000000, at most 0{MAX_SHFLAGS:o}"
        )
    return int(s, 8)


def _uint_list(text: str) -> list[int]:
    if not text.strip():
        return []
    try:
        return [_uint(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"expected comma-separated whole numbers from 0 to {MAX_ID}") from None


def _acid_list(text: str) -> list[int | str]:
    """Account IDs as numbers or registered names; names are resolved when applied."""
    if not text.strip():
        return []
    out: list[int | str] = []
    for part in text.split(","):
        s = part.strip()
        if s.isascii() and s.isdigit():
            try:
                out.append(_uint(s))
            except ValueError:
                raise ValueError(f"expected account numbers from 0 to {MAX_ID}") from None
        elif NAME_RE.fullmatch(s):
            out.append(s)
        else:
            raise ValueError("expected comma-separated account numbers or names")
    if len(out) > MAXVIDS:
        raise ValueError(f"at most {MAXVIDS} account IDs (MAXVIDS)")
    return out


def _uid_or_name(text: str) -> int | str:
    s = text.strip()
    if s.isascii() and s.isdigit():
        return _uint(s)
    if NAME_RE.fullmatch(s):
        return s
    raise ValueError("expected a resource group's uid or name")


def _text_upto(limit: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if len(text) > limit or not text.isprintable():
            raise ValueError(f"expected printable text of at most {limit} characters")
        return text

    return parse


def _fmt_list(values: list[int]) -> str:
    return ",".join(map(str, values))


def _fmt_octal(value: int) -> str:
    return f"0{value:o}" if value else "0"


@dataclass(frozen=True)
class Field:
    """One UDB field of the directive language: how to read and write its value."""

    name: str
    parse: Callable[[str], object]
    format: Callable[[object], str]
    default: object
    doc: str


#: Every field a directive may set, in the order udbsee prints them.
FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("uid", _uint, str, None, "user ID (for a shareholder, its account number)"),
        Field("gids", _uint_list, _fmt_list, [], "group IDs, comma-separated"),
        Field("acids", _acid_list, _fmt_list, [], "account IDs or names; the first is default"),
        Field("resgrp", _uid_or_name, str, 0, "uid or name of the parent resource group"),
        Field("shares", _shares, str, 0, "allocated shares"),
        Field("shflags", _octal, _fmt_octal, 0, "octal: 040000 group, 01000000 account"),
        Field("shusage", _ufloat_upto(MAX_USAGE), repr, 0.0, "decayed usage (charge units)"),
        Field("shcharge", _ufloat_upto(MAX_USAGE), repr, 0.0, "long-term charge (charge units)"),
        Field("shextime", _ufloat_upto(MAX_EPOCH), repr, 0.0, "time the user last left (epoch s)"),
        Field("cpuquota", _ufloat_upto(MAX_CPU_SECONDS), repr, 0.0, "CPU quota (CPU s, 0 = none)"),
        Field("cpuquotaused", _ufloat_upto(MAX_CPU_SECONDS), repr, 0.0, "CPU s used of the quota"),
        Field("nice", _nice, str, 0, "default nice value, -20..19"),
        Field("passwd", _text_upto(MAX_PASSWD), str, "", "password hash; * means no login"),
        Field("comment", _text_upto(MAX_COMMENT), str, "", "free text (printable)"),
    )
}

#: Other spellings the guide uses for a field.
ALIASES = {"gid": "gids"}

_FIELD_OF = {**{n: n for n in FIELDS}, **ALIASES}

_DEFAULTS = {n: f.default for n, f in FIELDS.items() if n != "uid"}


def shown_passwd(passwd: str) -> str | None:
    """The passwd as udbsee may show it: ``*`` or empty as they are, None for a hash."""
    return passwd if passwd in ("", "*") else None


# -- parsing ----------------------------------------------------------------------------


@dataclass(slots=True)
class Directive:
    """One parsed directive and where it came from.

    `fields` holds (field name, value, token index) triples with values already
    converted (resgrp and acids may still hold names, resolved when applied);
    for ``acid`` the number is `fields[0]`'s value.  `text` is the whole source
    line, kept so that columns are only worked out for an error.
    """

    verb: str
    name: str
    fields: list[tuple[str, object, int]]
    source: str
    line: int
    token: int
    text: str
    seq: int = 0  # its place in the run, set when applied; orders errors

    def col(self, token: int | None = None) -> int:
        """The 1-based column of token `token` of the line (the verb by default)."""
        return _col(self.text, self.token if token is None else token)

    def error(self, message: str, token: int | None = None) -> DirectiveError:
        """A DirectiveError at this directive (or one of its tokens), naming it."""
        return DirectiveError(
            self.source, self.line, self.col(token), f"{self.verb}:{self.name}: {message}"
        )

    @property
    def key(self) -> int:
        """Sort key: its place in the run (files, then -c, then --passwd, in order)."""
        return self.seq


_VERB_LIST = ", ".join(VERBS)
_FIELD_LIST = "fields: " + ", ".join(FIELDS)
#: Text fields: the value is the token itself.
_TEXT = frozenset({"passwd", "comment"})
_TEXT_LIMIT = {"passwd": MAX_PASSWD, "comment": MAX_COMMENT}
_PARSERS = {n: f.parse for n, f in FIELDS.items()}
#: Each distinct value text is parsed once per run, so value objects (lists too) are
#: shared between directives and must never be mutated.
_MISS = object()


def _col(text: str, token: int) -> int:
    parts = text.split(":")
    col = sum(len(p) + 1 for p in parts[:token]) + 1
    if token < len(parts):
        part = parts[token]
        col += len(part) - len(part.lstrip())
    return col


@contextmanager
def _bulk() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many acyclic objects.

    Parsing 100,000 directives allocates about a million tuples, lists and
    records; without this the collector's repeated full scans take longer than
    the parsing itself.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse(text: str, source: str) -> list[Directive]:
    """Every directive in `text` (the contents of `source`), in order.

    Raises DirectiveError ``SOURCE:LINE:COL: message`` for the first token that
    is not valid: unknown verb or field, bad name, bad value, missing ``:``.
    """
    with _bulk():
        return _parse(text, source)


def _parse(text: str, source: str) -> list[Directive]:
    out: list[Directive] = []
    field_of = _FIELD_OF
    parsers = _PARSERS
    caches: dict[str, dict[str, object]] = {n: {} for n in FIELDS if n not in _TEXT}
    name_ok = NAME_RE.fullmatch
    # Only "\n" ends a line (splitlines would also split a comment at \x85 or \u2028).
    for lineno, line in enumerate(text.split("\n"), 1):
        parts = line.split(":")
        n = len(parts)
        # The fast path: one create or update on the line, written without blanks.
        if n & 1 and parts[-1] == "" and (parts[0] == "create" or parts[0] == "update"):
            fields: list[tuple[str, object, int]] = []
            token = 2
            it = iter(parts[2 : n - 1])
            for tok, raw in zip(it, it, strict=False):  # n is odd: pairs exactly
                fname = field_of.get(tok)
                if fname is None:
                    break  # a blank, a comment, a second directive or an error
                if fname in _TEXT:
                    if not raw.isprintable() or len(raw) > _TEXT_LIMIT[fname]:
                        break  # the general path reports it
                    value: object = raw
                else:
                    cache = caches[fname]
                    value = cache.get(raw, _MISS)
                    if value is _MISS:
                        try:
                            value = cache[raw] = parsers[fname](raw)
                        except ValueError:
                            break  # the general path reports it
                fields.append((fname, value, token + 1))
                token += 2
            else:
                if name_ok(parts[1]):
                    out.append(Directive(parts[0], parts[1], fields, source, lineno, 0, line))
                    continue
        stripped = line.lstrip()
        if stripped and stripped[0] != "#":
            _parse_line(parts, line, lineno, source, caches, out)
    return out


def _parse_line(
    parts: list[str], line: str, lineno: int, source: str, caches: dict, out: list[Directive]
) -> None:
    """Parse any line (several directives, blanks, comments) and append its directives."""
    n = len(parts)
    i = 0

    def fail(token: int, message: str) -> DirectiveError:
        return DirectiveError(source, lineno, _col(line, token), message)

    while i < n:
        verb = parts[i].strip()
        if not verb:
            if i == n - 1:
                break
            raise fail(i, f"expected a directive ({_VERB_LIST}), found ':'")
        if verb[0] == "#":
            break
        if verb not in VERBS:
            raise fail(i, f"expected a directive ({_VERB_LIST}), not {verb!r}")
        start = i
        if i + 2 > n - 1:
            raise fail(i, f"{verb}: expected NAME followed by ':'")
        name = parts[i + 1].strip()
        if not NAME_RE.fullmatch(name):
            raise fail(i + 1, f"{verb}: expected a name (letters, digits, _ . @ $ + -)")
        i += 2
        fields: list[tuple[str, object, int]] = []
        if verb == "acid":
            if i > n - 2:
                raise fail(i, f"acid:{name}: expected the account NUMBER followed by ':'")
            try:
                fields.append(("acid", _uint(parts[i]), i))
            except ValueError:
                msg = f"acid:{name}: expected an account number from 0 to {MAX_ID}"
                raise fail(i, msg) from None
            i += 1
        elif verb != "delete" and verb != "delacid":
            while i < n:
                tok = parts[i].strip()
                fname = _FIELD_OF.get(tok)
                if fname is None:
                    if not tok or tok[0] == "#" or tok in VERBS:
                        break
                    raise fail(i, f"{verb}:{name}: unknown field {tok!r} ({_FIELD_LIST})")
                if i > n - 3:
                    raise fail(i, f"{verb}:{name}: {tok}: expected a value followed by ':'")
                raw = parts[i + 1]
                if fname in _TEXT:
                    try:
                        value: object = _PARSERS[fname](raw)
                    except ValueError as err:
                        raise fail(i + 1, f"{verb}:{name}: {tok}: {err}") from None
                else:
                    value = caches[fname].get(raw, _MISS)
                    if value is _MISS:
                        try:
                            value = caches[fname][raw] = _PARSERS[fname](raw)
                        except ValueError as err:
                            msg = f"{verb}:{name}: {tok}: {err}, not {raw!r}"
                            raise fail(i + 1, msg) from None
                fields.append((fname, value, i + 1))
                i += 2
        out.append(Directive(verb, name, fields, source, lineno, start, line))


# -- applying ---------------------------------------------------------------------------


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
            yield format_entry(row, [f for f in FIELDS if f == "uid" or row[f] != _DEFAULTS[f]])
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


_COLUMNS = ("id", "name", "uid", *_DEFAULTS)
_NEW_ROW = {"name": None, "uid": None, **_DEFAULTS}
#: Fields whose value may name an entry or an account.
_BY_NAME = frozenset({"resgrp", "acids"})


class _Plan:
    """The UDB's state while a run's directives are replayed over it, in memory."""

    def __init__(self, session: Session, replace: bool = False):
        cols = [_ENTRIES.c[c] for c in _COLUMNS]
        self.original: dict[str, dict] = {}
        for row in session.execute(select(*cols).order_by(_ENTRIES.c.id)):
            self.original[row[1]] = dict(zip(_COLUMNS, row, strict=True))
        self.accounts0 = dict(session.execute(select(Account.name, Account.acid)).all())
        # With replace, the run starts from nothing: every old row reads as deleted.
        self.entries: dict[str, dict] = {} if replace else dict(self.original)
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
        if d.name in self.entries:
            raise d.error(f"an entry named {d.name} already exists")
        row = _NEW_ROW.copy()
        row["name"] = d.name
        self._set(d, row)
        if row["uid"] is None:
            raise d.error("a new entry needs a uid field")
        self.entries[d.name] = row
        self.touched[d.name] = d

    def _update(self, d: Directive) -> None:
        row = self.entries.get(d.name)
        if row is None:
            raise d.error(f"no entry named {d.name}")
        if d.name not in self.touched:
            row = self.entries[d.name] = dict(row)
        old_uid, old_flags = row["uid"], row["shflags"]
        self._set(d, row)
        if row["uid"] != old_uid or row["shflags"] != old_flags:
            self.uid_gone[old_uid] = d
        self.touched[d.name] = d

    def _delete(self, d: Directive) -> None:
        row = self.entries.pop(d.name, None)
        if row is None:
            raise d.error(f"no entry named {d.name}")
        self.touched.pop(d.name, None)
        self.uid_gone[row["uid"]] = d

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
                value = self._resolve(d, fname, value, token)
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

        by_uid: dict[int, str] = {}
        groups: dict[int, int] = {}
        for name, row in self.entries.items():
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


def apply(
    session: Session,
    directives: Iterable[Directive],
    *,
    replace: bool = False,
    force: bool = False,
) -> Changes:
    """Replay `directives` over the UDB in `session`, check the result, write it.

    With `replace`, the run starts from an empty UDB (every entry and account is
    removed in the same transaction); unless `force`, a replacement that would leave
    no group or user of a UDB that had some is refused (OptionError saying how many
    entries would go), as an empty input given by mistake would do that.  Returns what
    changed; raises DirectiveError (and writes nothing) at the first directive in error.
    """
    with _bulk():
        plan = _Plan(session, replace=replace)
        for seq, d in enumerate(directives):
            d.seq = seq
            plan.apply(d)
        plan.validate()
        ch = plan.changes()
        if replace and not force:
            _refuse_emptying(plan, ch)
        plan.write(session, ch)
    return ch


def _refuse_emptying(plan: _Plan, ch: Changes) -> None:
    def people(entries: Iterable[dict]) -> int:
        return sum(1 for row in entries if not row["shflags"] & SHF_ACCOUNT)

    if people(plan.original.values()) and not people(plan.entries.values()):
        raise OptionError(
            f"--replace with this input would delete every group and user: "
            f"{len(ch.deleted)} entries and {len(ch.accounts_removed)} accounts would go; "
            "give --force if that is what you want"
        )


class _TestMode(Exception):
    def __init__(self, changes: Changes):
        self.changes = changes


def run(
    engine: Engine,
    directives: Sequence[Directive],
    *,
    test: bool = False,
    replace: bool = False,
    force: bool = False,
) -> Changes:
    """Apply `directives` to the UDB in one write transaction and return the changes.

    In `test` mode everything is checked and written the same way, then rolled
    back: the UDB is left exactly as it was.
    """
    try:
        with write_session(engine) as session:
            ch = apply(session, directives, replace=replace, force=force)
            mark_entries_changed(session)
            if test:
                raise _TestMode(ch)
    except _TestMode as t:
        return t.changes
    return ch


# -- printing (udbsee) ------------------------------------------------------------------


def format_entry(row, fields: Sequence[str] | None = None, verb: str = "create") -> str:
    """`row` (an Entry or a mapping) as one directive ``VERB:NAME:field:value:...:``.

    `fields` defaults to every field.  A passwd that is a hash is left out, so
    the output never shows one (``*`` and empty are shown as they are).
    """
    get = row.__getitem__ if isinstance(row, dict) else row.__getattribute__
    parts = [verb, get("name")]
    for f in FIELDS if fields is None else fields:
        value = get(f)
        if f == "passwd" and shown_passwd(value) is None:
            continue
        parts += (f, FIELDS[f].format(value))
    return ":".join(parts) + ":"


def format_account(name: str, acid: int) -> str:
    """A registry entry as the directive that adds it."""
    return f"acid:{name}:{acid}:"


def entry_record(entry: Entry, fields: Sequence[str] | None = None) -> dict:
    """`entry` as a JSON-able dict keyed by field name (passwd: ``*``, ``""`` or null)."""
    out: dict = {"name": entry.name}
    for f in FIELDS if fields is None else fields:
        value = getattr(entry, f)
        out[f] = shown_passwd(value) if f == "passwd" else value
    return out


def parse_field_list(text: str) -> tuple[str, list[str]]:
    """udbsee's ``-f`` list: (verb, fields).  A leading ``create`` or ``update`` sets the verb.

    Raises ValueError naming the first unknown field.
    """
    items = [s.strip() for s in text.split(",") if s.strip()]
    verb = "create"
    if items and items[0] in ("create", "update"):
        verb = items.pop(0)
    fields = []
    for item in items:
        name = _FIELD_OF.get(item)
        if name is None:
            raise ValueError(f"unknown field {item!r} (fields: {', '.join(FIELDS)})")
        if name not in fields:
            fields.append(name)
    return verb, fields


def select_entries(session: Session, names: Sequence[str] | None = None) -> list[Entry]:
    """The entries called `names`, in that order (all entries, in UDB order, for None).

    Raises NotFound for the first name the UDB does not hold.
    """
    if names is None:
        return list(session.scalars(select(Entry).order_by(Entry.id)))
    found = {e.name: e for e in session.scalars(select(Entry).where(Entry.name.in_(names)))}
    for n in names:
        if n not in found:
            raise NotFound(f"no entry named {n}")
    return [found[n] for n in names]


def select_accounts(session: Session) -> list[tuple[str, int]]:
    """The account registry as (name, acid) pairs, by acid."""
    return [tuple(r) for r in session.execute(select(Account.name, Account.acid).order_by("acid"))]
