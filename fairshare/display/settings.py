"""The settings display: the constants in the manner of the guide's `shrinfo -v` excerpt,
with the time-of-day schedules.  Shared by shradmin (no options) and shrinfo -v."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rich.console import Console

from fairshare.core import nicetables
from fairshare.core.consts import ADJGROUPS, LIMSHARE, Consts, flag_names
from fairshare.core.schedule import Schedule, describe_days, describe_hours
from fairshare.display import columns


class ChangeRecord(Protocol):
    """A recorded change of a constant (fairshare.store.config.history)."""

    time: float
    who: str
    schedule: str
    name: str
    old: object
    new: object


_COSTS = (
    ("syscall", "cost_syscall"),
    ("bio", "cost_bio"),
    ("sio", "cost_sio"),
    ("tick", "cost_tick"),
    ("mem", "cost_mem"),
    ("tty", "cost_tty"),
)


def _g(value: float) -> str:
    return f"{value:g}"


def _decay(decay: float) -> str:
    """A decay factor per second with its half-life, as the guide's shrinfo -v prints it."""
    half = nicetables.halflife(float(decay))
    return f"{decay:.4f} " + (
        "(no half-life)" if half is None else f"(half-life of {half:.1f} seconds)"
    )


def settings_lines(consts: Consts, rows: Sequence[Schedule], in_force: str) -> list[str]:
    """The settings display as lines of plain text."""
    names = flag_names(consts.flags)
    decays = nicetables.priority_decay(consts.nice_decay)
    run = nicetables.run_rate_decay(consts.halflife)
    lines = [
        f"Scheduling flags = {', '.join(names) if names else '(none)'} ({consts.flags:03o})",
        f"Scheduling policy = {consts.policy}",
        "Feedback share nodes (--policy feedback): "
        f"K_c = {_g(consts.feedback_kc)} per cycle, "
        f"K_mu by level = {','.join(_g(k) for k in consts.feedback_kmu)}, "
        f"redistribution every {_g(consts.feedback_period)} s"
        + ("" if consts.policy == "feedback" else " (unused: another policy)"),
        f"Feedback redistribution (equation 10): v = {_g(consts.feedback_v)}, form = "
        f"{consts.feedback_form}: tshare = s x v x "
        + ("max(u) - u" if consts.feedback_form == "literal" else "max(u/s) - u"),
        "Slurm fair-share factor (--policy slurm): "
        f"dampening factor = {_g(consts.dampening)}"
        + ("" if consts.policy == "slurm" else " (unused: another policy)"),
        f"Idle share = {consts.idleshare}, split "
        + ("group by group (ADJGROUPS)" if consts.has(ADJGROUPS) else "flat over all lnodes"),
        f"Charging percentage = {_g(consts.percent)}%, speed factor = {_g(consts.speed)}"
        " (a CPU-second here is charged as that many)",
        f"Usage decay rate = {consts.K:.8f} per {_g(consts.delta)} s cycle "
        f"(half-life of {consts.halflife:.1f} seconds), shradmin -K {consts.halflife / 3600:g}"
        " (-K takes hours)",
        f"Write-back interval = {_g(consts.writeback)} s, "
        f"checkpoint interval = {_g(consts.checkpoint)} s",
    ]
    lines += columns(
        [["", *(label for label, _ in _COSTS)]],
        [["Costs:", *(_g(getattr(consts, field)) for _, field in _COSTS)]],
        [False] + [True] * len(_COSTS),
    )
    lines += [
        f"maxushare = {_g(consts.maxushare)}"
        + ("" if consts.has(LIMSHARE) else " (unused: LIMSHARE off)")
        + f", K5 = {_g(consts.k5)}"
        + (" (unused: LIMSHARE on)" if consts.has(LIMSHARE) else "")
        + f", mingshare = {_g(consts.mingshare)}"
        + ("" if consts.has(ADJGROUPS) else " (unused: ADJGROUPS off)")
        + f", sharemin = {_g(consts.sharemin)}",
        f"Max. value for normal usage (MAXUSAGE) = {consts.maxusage:e}",
        f"Maximum hierarchy levels = {consts.maxlevels}",
        'Process priority decay rate biased by "nice" (-D): '
        f"high priority (nice -20) {_decay(decays[0])}, "
        f"avg priority (nice 0) {_decay(decays[20])}, "
        f"low priority (nice 19) {_decay(decays[39])}; "
        "Linux ignores these rates (its CFS scheduler has no priority decay and weighs "
        "nice by fixed kernel weights)",
        f"Run rate decay rate = {run:.8f} per second "
        f"(half-life of {consts.halflife:.1f} seconds, the usage half-life)",
        f"CPU quota threshold = {_g(consts.quota_threshold)} s, warning signal = "
        f"{consts.quota_signal} (the warning is a message on the user's terminals)",
    ]
    if rows:
        lines.append("Schedules (the first in force, by name, replaces these settings):")
        table = [
            [
                ("* " if r.name == in_force else "  ") + r.name,
                describe_days(r.days),
                describe_hours(r.hours),
                " ".join(f"{k}={_json_text(v)}" for k, v in sorted(r.settings.items())),
            ]
            for r in rows
        ]
        lines += ["  " + line for line in columns([], table, [False] * 4)]
        lines.append(f"Schedule in force now: {in_force or '(none: base settings)'}")
    return lines


def _json_text(value: object) -> str:
    if isinstance(value, dict) and "days" in value:  # a schedule's definition
        settings = " ".join(f"{k}={_json_text(v)}" for k, v in sorted(value["settings"].items()))
        return f"{value['days']} {value['hours']} {settings}".rstrip()
    if isinstance(value, list):
        return ",".join(_json_text(v) for v in value)
    if isinstance(value, float):
        return _g(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return str(value)


def settings_json(consts: Consts, rows: Sequence[Schedule], in_force: str) -> dict:
    """The settings as a JSON-ready dict (shape documented in shradmin(8))."""
    values = {name: getattr(consts, name) for name in consts.__dataclass_fields__}
    values["nice_decay"] = list(consts.nice_decay)
    values["feedback_kmu"] = list(consts.feedback_kmu)
    return {
        "consts": values,
        "flags": flag_names(consts.flags),
        "schedules": [
            {
                "name": r.name,
                "days": describe_days(r.days),
                "hours": describe_hours(r.hours),
                "settings": dict(r.settings),
            }
            for r in rows
        ],
        "in_force": in_force or None,
    }


def render_settings(console: Console, consts: Consts, rows, in_force: str) -> None:
    """Print the settings display on `console`."""
    for line in settings_lines(consts, rows, in_force):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def history_json(changes: Sequence[ChangeRecord]) -> list[dict]:
    """The change history as --json records (shape documented in shradmin(8))."""
    return [
        {
            "time": c.time,
            "who": c.who,
            "schedule": c.schedule or None,
            "name": c.name,
            "old": c.old,
            "new": c.new,
        }
        for c in changes
    ]


def history_lines(changes: Sequence[ChangeRecord], when) -> list[str]:
    """The change history as lines: time, who, what, old -> new.  `when(epoch)` formats times."""
    table = [
        [
            when(c.time),
            c.who,
            f"{c.schedule}:{c.name}" if c.schedule else c.name,
            _json_text(c.old) if c.old is not None else "-",
            _json_text(c.new) if c.new is not None else "-",
        ]
        for c in changes
    ]
    return columns([["Time", "Who", "Constant", "Old", "New"]], table, [False] * 5)
