"""shradmin: set and show the fair-share constants (guide 4.4.6.1 and 4.6)."""

from __future__ import annotations

import time
from datetime import datetime

import click
from rich.console import Console

from fairshare.admin.shradmin import (
    MIN_ADVISED_HALFLIFE,
    remove_schedule,
    set_constants,
    set_schedule,
)
from fairshare.admin.shrdist import current_caller
from fairshare.core.consts import CHOICES, FLAG_NAMES, from_user, policy_names
from fairshare.display.settings import (
    history_json,
    history_lines,
    render_settings,
    settings_json,
)
from fairshare.store.config import history, load_consts, load_effective_consts, schedules
from udb.cli.common import (
    HELP,
    Command,
    complete_values,
    handle_errors,
    last_option,
    udb_option,
    version_option,
)
from udb.errors import OptionError
from udb.jsonout import echo_json
from udb.session import open_udb, read_session, write_session

#: (option, long name, constant, help) for every setting option, in the guide's letters.
SETTINGS = (
    (
        "-F",
        "--flags",
        "flags",
        "Flags: octal (006) or names (ADJGROUPS,LIMSHARE); GLOBALUSAGE (0200) makes the "
        "hosts sharing one UDB fair as one site.",
    ),
    (
        "-K",
        "--halflife",
        "halflife",
        "Usage half-life: a plain number is HOURS (-K 120 is 5 days); or 3600s, 90m, 8h, 5d. "
        "1 s to 3650 d.",
    ),
    ("-R", "--delta", "delta", "Scheduling cycle: 4s (plain number: seconds); 0.1 to 3600 s."),
    ("-t", "--tick", "cost_tick", "Cost per CPU tick (1/100 CPU second); 0 to 1e6."),
    ("-b", "--bio", "cost_bio", "Cost per block (logical) I/O request; 0 to 1e6."),
    ("-s", "--syscall", "cost_syscall", "Cost per system call (context switch); 0 to 1e6."),
    ("-m", "--mem", "cost_mem", "Cost per memory click (MiB-second resident); 0 to 1e6."),
    ("-y", "--tty", "cost_tty", "Tty cost: only 0, Linux counts no tty I/O per process."),
    (None, "--sio", "cost_sio", "Cost per stream I/O operation; 0 to 1e6."),
    (
        "-X",
        "--maxushare",
        "maxushare",
        "maxushare: with LIMSHARE the ceiling, the most Eshr a user may get as a multiple "
        "of its due share (and due / maxushare the floor); above 1 up to 1000.",
    ),
    (
        None,
        "--k5",
        "k5",
        "Kay-Lauder's K5: without LIMSHARE the ceiling, the most Eshr as a multiple of the "
        "due share (edge effects); 2; above 1 up to 1000.",
    ),
    ("-Y", "--mingshare", "mingshare", "mingshare (ADJGROUPS): between 0 and 1."),
    (
        None,
        "--speed",
        "speed",
        "Speed factor: a CPU-second on these hosts is charged as FACTOR CPU-seconds, so "
        "usage compares across a grid's sites (SGAS's scaling); 1; above 0 up to 1000.",
    ),
    ("-Z", "--sharemin", "sharemin", "sharemin: minimum machine share of an lnode, 0 to 0.99."),
    ("-U", "--maxusage", "maxusage", "MAXUSAGE: usage that puts a user on idle CPU, 1 to 1e30."),
    ("-G", "--maxlevels", "maxlevels", "Levels in the share tree (root is level 0), 2 to 64."),
    ("-D", "--nice-decay", "nice_decay", "Priority decay half-lives at nice 0 and 19: 2,60 s."),
    ("-n", "--writeback", "writeback", "Write-back interval: 60s; 0 to 1 d."),
    (None, "--checkpoint", "checkpoint", "Checkpoint interval: 300s; 0 to 1 d."),
    (None, "--quota-threshold", "quota_threshold", "CPU s past the quota before SIGKILL, <= 1 d."),
    (
        None,
        "--quota-signal",
        "quota_signal",
        "Signal sent at the CPU quota beside the terminal message: none (the default) or a "
        "name such as SIGURG; SIGXCPU ends a process that does not handle it.",
    ),
    (
        None,
        "--policy",
        "policy",
        f"Fair-share policy the cycle runs: {', '.join(policy_names())} (the first is "
        "the default; a site's own in the entry-point group fairshare.policies); 'list' "
        "lists them.",
    ),
    (None, "--feedback-kc", "feedback_kc", "Feedback: share nodes' filter K_c, above 0 to 1."),
    (
        None,
        "--feedback-kmu",
        "feedback_kmu",
        "Feedback: gains K_mu by level (0.25,0.5,0.75,1; deeper levels the last), 0 to 2.",
    ),
    (
        None,
        "--feedback-period",
        "feedback_period",
        "Feedback: redistribution period, 300s; 0 (every cycle) to 1 d.",
    ),
    (
        None,
        "--feedback-v",
        "feedback_v",
        "Feedback: equation 10's v, how far past the fair line the redistribution aims "
        "(2); above 1 up to 100.",
    ),
    (
        None,
        "--feedback-form",
        "feedback_form",
        f"Feedback: equation 10's form, {' or '.join(CHOICES['feedback_form'])}: "
        "max(u/s) (the default) or the seed's max(u).",
    ),
    (None, "--dampening", "dampening", "Slurm: the fair-share dampening factor d; 1 to 9999."),
    (
        None,
        "--idle-share",
        "idleshare",
        "Where an idle member's share goes: proportional (to its siblings' shares, the "
        "default) or even.",
    ),
)


#: What the shell completes for the settings that take names (-F, --policy, --idle-share).
COMPLETE = {const: complete_values(dict.fromkeys(values, "")) for const, values in CHOICES.items()}
COMPLETE["flags"] = complete_values(
    {n: f"{bit:#05o}" for n, bit in FLAG_NAMES.items()}, separator=","
)


def _settings_options(func):
    for short, long, const, help_ in reversed(SETTINGS):
        names = [n for n in (short, long) if n]
        func = click.option(
            *names, const, metavar="VALUE", help=help_, shell_complete=COMPLETE.get(const)
        )(func)
    return func


def _who() -> str:
    return current_caller().who


def _local(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


@click.command(cls=Command, context_settings=HELP)
@version_option
@udb_option
@_settings_options
@click.argument("percent", required=False)
@click.option("--schedule", metavar="NAME", help="Change the time-of-day schedule NAME instead.")
@click.option("--days", metavar="DAYS", help="With --schedule: mon-fri, sat,sun, weekdays, all.")
@click.option("--hours", metavar="HOURS", help="With --schedule: 8-18 (08:00-17:59), 18-8, all.")
@click.option("--remove", is_flag=True, help="With --schedule: delete the schedule.")
@click.option("--history", "show_history", is_flag=True, help="List the recorded changes.")
@last_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the display.")
@handle_errors
def main(udb, percent, schedule, days, hours, remove, show_history, last, as_json, **settings):
    """Set or show the fair-share constants (the guide's sh_consts).

    With no option, print the settings in force.  PERCENT is the percent
    multiplier applied to every cost (shradmin 20 charges 20%).  Every change
    is validated as a whole (nonsense is refused with exit status 2 and nothing
    is changed) and recorded with who made it; a running shrdaemon picks it up
    within one cycle.  With --schedule NAME the options define a named settings
    set in force on --days during --hours (local time), as the guide's prime
    and non-prime settings.
    """
    if (settings.get("policy") or "").strip().lower() == "list":
        from fairshare.core.policies import ORIGINS, POLICIES

        for name in POLICIES:
            click.echo(f"{name}  {ORIGINS.get(name, '')}")
        return
    changes = {const: value for const, value in settings.items() if value is not None}
    if percent is not None:
        changes["percent"] = percent
    changes = from_user(changes)  # a bare -K is hours; stored values are seconds
    engine = open_udb(udb)
    now = time.time()
    if show_history:
        with read_session(engine) as session:
            rows = history(session, last)
            if as_json:
                echo_json(history_json(rows), indent=True)
            else:
                for line in history_lines(rows, _local):
                    click.echo(line)
        return
    if schedule is None and (days or hours or remove):
        raise OptionError("--days, --hours and --remove go with --schedule NAME")
    if schedule is not None and remove and (changes or days or hours):
        raise OptionError("--remove takes no other setting")
    if changes or schedule is not None:
        with write_session(engine) as session:
            if schedule is None:
                set_constants(session, changes, who=_who(), now=now)
            elif remove:
                remove_schedule(session, schedule, who=_who(), now=now)
            else:
                set_schedule(
                    session,
                    schedule,
                    days=days,
                    hours=hours,
                    changes=changes,
                    who=_who(),
                    now=now,
                )
        _warn_halflife(changes)  # once the change is accepted
    with read_session(engine) as session:
        base = load_consts(session)
        rows = schedules(session)
        in_force = load_effective_consts(session, datetime.fromtimestamp(now))[1]
    if as_json:
        echo_json(settings_json(base, rows, in_force), indent=True)
    else:
        render_settings(Console(highlight=False), base, rows, in_force)


def _warn_halflife(changes: dict) -> None:
    if "halflife" not in changes:
        return
    halflife = changes["halflife"]
    if halflife < MIN_ADVISED_HALFLIFE:
        click.echo(
            f"shradmin: warning: a half-life of {halflife:g} s is under one hour; the guide "
            "advises at least 3600 s except for debugging",
            err=True,
        )


if __name__ == "__main__":
    main()
