"""The udbgen directive language: parse it and apply it to the UDB in one transaction.

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

The fields and their parsers are `udb.fields`'; the replay, the final-state check and
the writing are `udb.plan`'s; printing entries back as directives (udbsee) is
`udb.listing`'s.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from udb.errors import DirectiveError
from udb.fields import (
    BASE_FIELD,
    FIELD_OF,
    FIELDS,
    NAME_RE,
    PARSERS,
    VERBS,
    Directive,
    parse_uint,
    token_column,
)
from udb.plan import Changes, Plan, no_gid_warnings, refuse_emptying
from udb.rules import MAX_COMMENT, MAX_ID, MAX_PASSWD
from udb.session import mark_entries_changed, write_session

# -- parsing ----------------------------------------------------------------------------


_VERB_LIST = ", ".join(VERBS)
_FIELD_LIST = "fields: " + ", ".join(FIELDS)
#: Text fields: the value is the token itself.
_TEXT = frozenset({"passwd", "comment"})
_TEXT_LIMIT = {"passwd": MAX_PASSWD, "comment": MAX_COMMENT}
_PARSERS = PARSERS
#: Each distinct value text is parsed once per run, so value objects (lists too) are
#: shared between directives and must never be mutated.
_MISS = object()


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
    field_of = FIELD_OF
    parsers = _PARSERS
    caches: dict[str, dict[str, object]] = {n: {} for n in PARSERS if n not in _TEXT}
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
                if name_ok(parts[1]) and (len(fields) < 2 or _distinct(fields)):
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
        return DirectiveError(source, lineno, token_column(line, token), message)

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
            raise fail(i + 1, _bad_name(verb, name))
        i += 2
        fields: list[tuple[str, object, int]] = []
        if verb == "acid":
            if i > n - 2:
                raise fail(i, f"acid:{name}: expected the account NUMBER followed by ':'")
            try:
                fields.append(("acid", parse_uint(parts[i]), i))
            except ValueError:
                msg = f"acid:{name}: expected an account number from 0 to {MAX_ID}"
                raise fail(i, msg) from None
            i += 1
        elif verb != "delete" and verb != "delacid":
            given: dict[str, int] = {}  # field -> the token that gave it
            while i < n:
                tok = parts[i].strip()
                fname = FIELD_OF.get(tok)
                if fname is None:
                    if not tok or tok[0] == "#" or tok in VERBS:
                        break
                    raise fail(i, f"{verb}:{name}: unknown field {tok!r} ({_FIELD_LIST})")
                if i > n - 3:
                    raise fail(i, f"{verb}:{name}: {tok}: expected a value followed by ':'")
                base = BASE_FIELD[fname]
                if base in given:
                    first = token_column(line, given[base])
                    msg = (
                        f"{verb}:{name}: {base} given twice in one directive "
                        f"(columns {first} and {token_column(line, i)})"
                    )
                    raise fail(i, msg)
                given[base] = i
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
                            msg = f"{verb}:{name}: {tok}: {err}, not {raw!r}{_colon_hint(raw)}"
                            raise fail(i + 1, msg) from None
                fields.append((fname, value, i + 1))
                i += 2
        out.append(Directive(verb, name, fields, source, lineno, start, line))


def _distinct(fields: list[tuple[str, object, int]]) -> bool:
    """Whether no UDB field is given twice (``acids`` and ``acids+`` are the same field)."""
    return len({BASE_FIELD[f[0]] for f in fields}) == len(fields)


def _bad_name(verb: str, name: str) -> str:
    """What is wrong with a directive's NAME token: most often a ':' left out after it
    (``create:Grp uid:5000:`` reads as the name "Grp uid")."""
    words = name.split()
    if len(words) > 1 and NAME_RE.fullmatch(words[0]):
        return f"{verb}: expected ':' after the name {words[0]}, found a blank before {words[1]!r}"
    if not name:
        return f"{verb}: expected a name (letters, digits, _ . @ $ + -) before ':'"
    return f"{verb}: expected a name (letters, digits, _ . @ $ + -), not {name!r}"


def _colon_hint(raw: str) -> str:
    """A hint when a bad value is a value and a field name run together (a ':' left out)."""
    words = raw.split()
    if len(words) > 1 and words[1] in FIELD_OF:
        return f" (a ':' missing before {words[1]!r}?)"
    return ""


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
        plan = Plan(session, replace=replace)
        for seq, d in enumerate(directives):
            d.seq = seq
            plan.apply(d)
        plan.validate()
        if replace:
            plan.keep_mount_points()
        ch = plan.changes()
        if replace and not force:
            refuse_emptying(plan, ch)
        plan.write(session, ch)
    ch.warnings = no_gid_warnings(plan, ch)
    return ch


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
