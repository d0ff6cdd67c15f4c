"""Printing the UDB as udbgen directives and JSON, and udbsee's queries.

`format_entry` writes an entry back as the directive that makes it (a password hash
is never shown), `entry_record` as a JSON-able record; `parse_field_list` reads
udbsee's ``-f`` list; `select_entries` and `select_accounts` read what udbsee shows.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from udb.errors import NotFound
from udb.fields import FIELD_OF, FIELDS, shown_passwd
from udb.models import Account, Entry


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
        if f in ("halflife", "scope", "pooled") and fields is None and not value:
            continue  # inherited or off (the default): listed only where a node sets it
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
        name = FIELD_OF.get(item)
        if name not in FIELDS:  # unknown, or an operator (acids+): not a field to show
            raise ValueError(f"unknown field {item!r} (fields: {', '.join(FIELDS)})")
        if name not in fields:
            fields.append(name)
    return verb, fields


def join_field_list(text: str, words: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """udbsee's ``-f`` list as the guide prints it, with blanks after the commas (4.4.9:
    ``udbsee -a -fupdate, uid, resgrp, shares, shusage, shcharge``): the shell splits it
    into ``-fupdate,`` and the words ``uid,`` ``resgrp,`` ...  While the list ends with a
    comma (or the next word starts with one) the next word continues it; no entry name
    holds a comma, so the words left are names.  Returns (the list, the names left)."""
    rest = list(words)
    while rest and (text.rstrip().endswith(",") or rest[0].startswith(",")):
        text += rest.pop(0)
    return text, tuple(rest)


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


def entries_with_uid(session: Session, uid: int) -> list[Entry]:
    """The entries whose uid is `uid`, in UDB order (read by uid: not every entry)."""
    return list(session.scalars(select(Entry).where(Entry.uid == uid).order_by(Entry.id)))


def select_accounts(session: Session) -> list[tuple[str, int]]:
    """The account registry as (name, acid) pairs, by acid."""
    return [tuple(r) for r in session.execute(select(Account.name, Account.acid).order_by("acid"))]
