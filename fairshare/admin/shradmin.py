"""shradmin's library: changing the constants with a history, and time-of-day schedules.

Every change goes through `set_constants`, which validates the whole result
(fairshare.core.consts.validate plus the UDB-dependent checks), stores it and
records one history row (udb.tables.const_changes) per constant that changed, in the caller's
transaction.  A schedule is a named set of overrides in force on some weekdays
during some hours (the guide's prime / non-prime settings, Kay-Lauder's peak
and off-peak charging); `effective_consts` picks the one in force at a given
local time; the daemon applies it every cycle to the constants and schedules it
read when their change serial last moved (every change here bumps it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Row, delete, insert, select, update

from fairshare.core.consts import FIELDS, Consts, consts_from_mapping
from fairshare.core.schedule import describe_days, describe_hours, parse_days, parse_hours
from fairshare.store.config import load_consts, save_consts
from udb import tables
from udb.check import check_stored
from udb.errors import OptionError
from udb.session import mark_consts_changed

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_schedule = tables.schedules.c
_change = tables.const_changes.c


#: Half-lives shorter than this draw the guide's warning (section 4.4.6.1).
MIN_ADVISED_HALFLIFE = 3600.0


@dataclass(frozen=True)
class Change:
    """One constant changed: `old` and `new` as stored (JSON-ready values)."""

    name: str
    old: object
    new: object
    schedule: str = ""


def _stored(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def deepest_allowed_check(session: Session, consts: Consts) -> None:
    """OptionError if the UDB's share tree is deeper than `consts.maxlevels` allows.

    Uses the Dp rule of udb.check, the one shrtree and udbgen -a report.
    """
    problems = check_stored(session, consts.mode, consts.maxlevels)
    deep = [p for p in problems if p.code == "Dp"]
    if deep:
        raise OptionError(
            f"maxlevels: -G {consts.maxlevels} is below the UDB's deepest chain "
            f"({len(deep)} entries too deep, e.g. {deep[0].name}); expected at least "
            f"{consts.maxlevels + 1} or a shallower tree"
        )


def set_constants(
    session: Session, changes: Mapping[str, object], *, who: str, now: float
) -> tuple[Consts, list[Change]]:
    """Apply `changes` (constant name -> value) to the stored constants.

    Validates the whole result (OptionError naming the constant otherwise),
    stores it and records one history row per constant that changed.
    Returns the new constants and the changes made.
    """
    old = load_consts(session)
    new = consts_from_mapping(changes, old)
    if new.maxlevels != old.maxlevels or new.mode != old.mode:
        deepest_allowed_check(session, new)
    save_consts(session, new)
    made = [
        Change(name, _stored(getattr(old, name)), _stored(getattr(new, name)))
        for name in FIELDS
        if getattr(old, name) != getattr(new, name)
    ]
    _record(session, made, who, now)
    return new, made


def set_schedule(
    session: Session,
    name: str,
    *,
    days: str | None,
    hours: str | None,
    changes: Mapping[str, object],
    who: str,
    now: float,
) -> list[Change]:
    """Create or update the schedule `name`: its days, hours and overrides.

    The overrides are validated against the base constants; a new schedule
    needs both `days` and `hours`.  Returns the changes recorded.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise OptionError(f"schedule: expected a name of letters, digits, _ . -, got {name!r}")
    row = _schedule_row(session, name)
    if row is None and (days is None or hours is None):
        raise OptionError(f"schedule {name!r} is new: give both --days and --hours")
    base = load_consts(session)
    settings = dict(row.settings) if row else {}
    for key, value in changes.items():
        settings[key] = value
    typed = consts_from_mapping(settings, base)
    stored = {key: _stored(getattr(typed, key)) for key in settings}
    new_days = parse_days(days) if days is not None else row.days
    new_hours = parse_hours(hours) if hours is not None else row.hours
    before = _schedule_value(row.days, row.hours, row.settings) if row else None
    values = {"days": new_days, "hours": new_hours, "settings": stored}
    if row is None:
        session.execute(insert(tables.schedules).values(name=name, **values))
    else:
        session.execute(update(tables.schedules).where(_schedule.name == name).values(**values))
    mark_consts_changed(session)
    after = _schedule_value(new_days, new_hours, stored)
    made = [Change("schedule", before, after, name)] if before != after else []
    _record(session, made, who, now)
    return made


def remove_schedule(session: Session, name: str, *, who: str, now: float) -> list[Change]:
    """Delete the schedule `name` (OptionError if there is none)."""
    row = _schedule_row(session, name)
    if row is None:
        raise OptionError(f"schedule {name!r}: no such schedule")
    made = [Change("schedule", _schedule_value(row.days, row.hours, row.settings), None, name)]
    session.execute(delete(tables.schedules).where(_schedule.name == name))
    mark_consts_changed(session)
    _record(session, made, who, now)
    return made


def _schedule_row(session: Session, name: str) -> Row | None:
    return session.execute(select(tables.schedules).where(_schedule.name == name)).first()


def _schedule_value(days: Sequence[int], hours: Sequence[int], settings: Mapping) -> dict:
    return {"days": describe_days(days), "hours": describe_hours(hours), "settings": dict(settings)}


def _record(session: Session, made: Sequence[Change], who: str, now: float) -> None:
    rows = [
        {
            "time": now,
            "who": who,
            "schedule": c.schedule,
            "name": c.name,
            "old": c.old,
            "new": c.new,
        }
        for c in made
    ]
    if rows:
        session.execute(insert(tables.const_changes), rows)
