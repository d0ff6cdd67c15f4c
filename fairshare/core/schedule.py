"""Time-of-day schedules (shradmin -S; the guide's prime and non-prime settings, Kay-Lauder's
peak and off-peak charging), pure: parsing and describing days and hours, and which
schedule is in force at a local time.

A schedule is a named set of constant overrides in force on some weekdays during some
hours; `effective_consts` applies the one in force (the first by name) to the stored
constants.  The rows come from the UDB (fairshare.store.config.schedules).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from fairshare.core.consts import Consts, consts_from_stored
from udb.errors import OptionError


class Schedule(Protocol):
    """A stored schedule (a row of udb.tables.schedules): its name, weekdays (0 is
    Monday), hours (0-23) and the constants it overrides (as stored)."""

    name: str
    days: Sequence[int]
    hours: Sequence[int]
    settings: Mapping[str, object]


DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_WORDS = {
    "all": range(7),
    "daily": range(7),
    "weekdays": range(5),
    "weekends": range(5, 7),
}


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


def schedule_in_force(rows: Sequence[Schedule], when: datetime) -> Schedule | None:
    """The first schedule (by name) whose days and hours contain local time `when`."""
    for row in sorted(rows, key=lambda r: r.name):
        if when.weekday() in row.days and when.hour in row.hours:
            return row
    return None


def effective_consts(base: Consts, rows: Sequence[Schedule], when: datetime) -> tuple[Consts, str]:
    """The constants in force at local time `when`: `base` with the schedule in force
    applied, and that schedule's name ("" when none is)."""
    row = schedule_in_force(rows, when)
    if row is None:
        return base, ""
    return consts_from_stored(row.settings, base), row.name
