"""shradmin's library: changing the constants with a history, and time-of-day schedules.

Every change goes through `set_constants`, which validates the whole result
(fairshare.consts.validate plus the UDB-dependent checks), stores it and
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
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Row, delete, insert, select, update

from fairshare.consts import FIELDS, Consts, consts_from_mapping, consts_from_stored
from fairshare.repository import load_consts, save_consts
from udb import tables
from udb.check import check_stored
from udb.errors import OptionError
from udb.session import mark_consts_changed

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

_schedule = tables.schedules.c
_change = tables.const_changes.c

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_WORDS = {
    "all": range(7),
    "daily": range(7),
    "weekdays": range(5),
    "weekends": range(5, 7),
}

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


def parse_days(text: str) -> list[int]:
    """Weekday numbers (0 = Monday) from "mon-fri", "sat,sun", "weekdays", "all"..."""
    days: set[int] = set()
    for part in (p.strip().lower() for p in text.split(",")):
        if part in _DAY_WORDS:
            days.update(_DAY_WORDS[part])
            continue
        m = re.fullmatch(r"([a-z]{3})(?:-([a-z]{3}))?", part)
        if not m or any(d and d not in DAY_NAMES for d in m.groups()):
            raise OptionError(
                f"days: expected day names like mon-fri or sat,sun or weekdays, got {text!r}"
            )
        first = DAY_NAMES.index(m.group(1))
        last = DAY_NAMES.index(m.group(2) or m.group(1))
        span = range(first, last + 1) if first <= last else [*range(first, 7), *range(last + 1)]
        days.update(span)
    return sorted(days)


def parse_hours(text: str) -> list[int]:
    """Hours of the day (0..23) from "8-18" (08:00 to 17:59), "18-8" (overnight) or "all"."""
    text = text.strip().lower()
    if text in ("all", "0-24"):
        return list(range(24))
    hours: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d{1,2})\s*(?:-\s*(\d{1,2}))?\s*", part)
        if not m:
            raise OptionError(f"hours: expected ranges like 8-18 or 18-8, got {text!r}")
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) is not None else start + 1
        if not (0 <= start <= 23 and 0 <= end <= 24) or start == end:
            raise OptionError(f"hours: expected ranges like 8-18 or 18-8, got {text!r}")
        span = range(start, end) if start < end else [*range(start, 24), *range(end)]
        hours.update(span)
    return sorted(hours)


def describe_days(days: Sequence[int]) -> str:
    """Weekdays as text: "mon-fri", "sat,sun", "all"."""
    return _describe_ranges(days, 7, lambda d: DAY_NAMES[d], "all")


def describe_hours(hours: Sequence[int]) -> str:
    """Hours as text: "08-18" means 08:00 to 17:59."""
    return _describe_ranges(hours, 24, lambda h: f"{h:02d}", "all", end_exclusive=True)


def _describe_ranges(values, size, label, everything, end_exclusive=False) -> str:
    values = sorted(set(values))
    if len(values) == size:
        return everything
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    if len(runs) > 1 and runs[0][0] == 0 and runs[-1][-1] == size - 1:
        runs = [runs[-1] + runs[0], *runs[1:-1]]  # a run across midnight / the week's end
    parts = []
    for run in runs:
        if end_exclusive:
            parts.append(f"{label(run[0])}-{label((run[-1] + 1) % size)}")
        elif len(run) == 1:
            parts.append(label(run[0]))
        else:
            parts.append(f"{label(run[0])}-{label(run[-1])}")
    return ",".join(parts)


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


def history(session: Session | Connection, limit: int | None = None) -> list[Row]:
    """Recorded changes (rows of udb.tables.const_changes), oldest first (the last
    `limit` when given)."""
    query = select(tables.const_changes).order_by(_change.id.desc())
    if limit:
        query = query.limit(limit)
    return list(reversed(session.execute(query).all()))


def schedules(session: Session | Connection) -> list[Row]:
    """Every schedule (rows of udb.tables.schedules), by name (the order in which they
    are tried)."""
    return list(session.execute(select(tables.schedules).order_by(_schedule.name)))


def schedule_in_force(rows: Sequence[Row], when: datetime) -> Row | None:
    """The first schedule (by name) whose days and hours contain local time `when`."""
    for row in sorted(rows, key=lambda r: r.name):
        if when.weekday() in row.days and when.hour in row.hours:
            return row
    return None


def effective_consts(base: Consts, rows: Sequence[Row], when: datetime) -> tuple[Consts, str]:
    """The constants in force at local time `when`: `base` with the schedule in force
    applied, and that schedule's name ("" when none is)."""
    row = schedule_in_force(rows, when)
    if row is None:
        return base, ""
    return consts_from_stored(row.settings, base), row.name


def load_effective_consts(session: Session | Connection, when: datetime) -> tuple[Consts, str]:
    """The stored constants with the schedule in force at `when` applied, and its name."""
    return effective_consts(load_consts(session), schedules(session), when)
