"""The fair-share constants (the guide's sh_consts, set with shradmin) and their storage.

Every command and the daemon read one `Consts` from the UDB's `consts` table
(`fairshare.store.config.load_consts`), so they all agree; an absent row means the
default.  This module is pure: it parses, checks and converts, and reads no database.

Units:

- durations (`halflife`, `delta`, `writeback`, `checkpoint`, `quota_threshold`) in seconds;
- charges in *charge units*.  A leaf's charge for one cycle is
  ``(cost_tick * CPU ticks + cost_bio * block I/O operations + cost_sio * stream I/O
  operations + cost_syscall * system calls + cost_mem * MiB-seconds of resident memory
  + cost_tty * tty I/O operations) * percent / 100``, where a CPU tick is 1/100 of a CPU
  second (`TICKS_PER_SECOND`, Linux's USER_HZ; UNICOS charged per clock tick too).
  With the default tick cost of 100, one CPU second costs 10,000 charge units, so one
  busy CPU under a one-hour half-life settles at a usage of about 5.2e7, far below the
  default MAXUSAGE of 1e12.
- shares fractions (`maxushare` is a multiple of the due share, `mingshare` a fraction of
  it, `sharemin` a fraction of the machine).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points

import numpy as np

from udb.errors import OptionError
from udb.rules import MAX_USAGE

log = logging.getLogger("fairshare.core.consts")

#: Fair share off (accounting continues, nothing is enforced).
NOSHARE = 0o1
#: Group adjustment: compensate groups that get less than mingshare x their due share.
ADJGROUPS = 0o2
#: Effective share between due / maxushare and maxushare x the due share (the guide's
#: 4.6.1.4: maxushare is the ceiling; without LIMSHARE, Kay-Lauder's K5 is).
LIMSHARE = 0o4
#: Share by Account: lnodes are accounts (shareholders), not users.
SHAREBYACCT = 0o10
#: Usage and charges ignored when scheduling processes (no marooning).
NOSCHED = 0o20
#: User-level fair share (the only mode this suite has; kept for shrinfo/shradmin).
USRLEVLFSS = 0o100
#: Site-wide usage: every host's cycle schedules from the usage of all hosts sharing the
#: UDB and steers toward the machine shares of the whole site (fairshare.core.site).  Not a
#: UNICOS flag: this suite's own, on the first bit the guide leaves free above USRLEVLFSS.
GLOBALUSAGE = 0o200

#: Flag names in the guide's spelling, by bit.
FLAG_NAMES: dict[str, int] = {
    "NOSHARE": NOSHARE,
    "ADJGROUPS": ADJGROUPS,
    "LIMSHARE": LIMSHARE,
    "SHAREBYACCT": SHAREBYACCT,
    "NOSCHED": NOSCHED,
    "USRLEVLFSS": USRLEVLFSS,
    "GLOBALUSAGE": GLOBALUSAGE,
}
ALL_FLAGS = sum(FLAG_NAMES.values())

#: CPU ticks per CPU second (cost_tick is charged per tick).
TICKS_PER_SECOND = 100.0

#: Kay-Lauder's K5, the default of `Consts.k5`: without LIMSHARE nobody gets more than
#: K5 x their due share in one cycle (edge effects; the paper sets it to 2).
K5 = 2.0


@dataclass(frozen=True)
class Consts:
    """The scheduling constants (sh_consts).  See the module docstring for units."""

    flags: int = 0
    halflife: float = 3600.0  # s, -K
    delta: float = 4.0  # s, -R: the scheduling cycle
    cost_tick: float = 100.0  # charge units per CPU tick (1/100 CPU s), -t
    cost_bio: float = 0.0  # per block I/O operation, -b
    cost_sio: float = 0.0  # per stream I/O operation, shradmin --sio
    cost_syscall: float = 0.0  # per system call, -s (the guide's letters)
    cost_mem: float = 0.0  # per MiB-second of resident memory (a "memory click"), -m
    cost_tty: float = 0.0  # per tty I/O operation, -y
    percent: float = 100.0  # multiplier applied to every cost, in percent
    maxushare: float = 2.0  # -X, LIMSHARE: e_share within due / and x maxushare
    k5: float = K5  # --k5, without LIMSHARE: e_share at most K5 x due (edge effects)
    mingshare: float = 0.75  # -Y, ADJGROUPS: tolerated fraction of a group's due share
    sharemin: float = 0.0  # -Z, fraction of the machine every active lnode gets at least
    maxusage: float = 1e12  # -U, charge units: usage at which a user is put in background
    maxlevels: int = 4  # -G, levels 0..maxlevels-1 allowed in the share tree
    nice_decay: tuple[float, float] = (2.0, 60.0)  # -D, process priority half-lives, s
    writeback: float = 60.0  # s, -n: how often released lnodes are written to the UDB
    checkpoint: float = 300.0  # s: how often every active lnode is checkpointed
    quota_threshold: float = 3.0  # CPU s past the quota (the warning) before SIGKILL
    quota_signal: str = "none"  # --quota-signal: sent at the quota ("none": only messages)
    policy: str = "unicos"  # --policy: the fair-share policy the cycle runs (POLICIES)
    # The feedback policy (fairshare.core.policies.feedback, seed 004's share nodes):
    feedback_kc: float = 0.1  # K_c: the share nodes' low-pass filter per delta, (0, 1]
    feedback_kmu: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)  # K_mu by level 1, 2, ...
    feedback_period: float = 300.0  # s: how often the siblings' shares are re-derived
    feedback_v: float = 2.0  # equation 10's v: how far past the fair line the target lies
    feedback_form: str = "dominating"  # equation 10's max: max(u / s), or "literal" max(u)
    dampening: float = 1.0  # --dampening, slurm: F = 2 ** (-UE / S / dampening)
    idleshare: str = "proportional"  # --idle-share: where an idle member's share goes
    speed: float = 1.0  # --speed: a CPU-second here is charged as `speed` (SGAS's scaling)

    @property
    def K(self) -> float:
        """The usage decay factor per cycle of `delta` seconds: 0.5 ** (delta / halflife)."""
        return decay(self.delta, self.halflife)

    @property
    def share_by_account(self) -> bool:
        """True in Share by Account mode (SHAREBYACCT flag)."""
        return bool(self.flags & SHAREBYACCT)

    @property
    def scheduling(self) -> bool:
        """Whether the shares are enforced: False while NOSHARE (fair share off) or
        NOSCHED (charges gathered, not used for scheduling) is set, when the machine
        runs as plain Linux does.  The daemon and shrsim both follow this rule."""
        return not self.flags & (NOSCHED | NOSHARE)

    @property
    def mode(self) -> str:
        """The share tree mode for fairshare.core.tree.build_tree: "account" or "user"."""
        return "account" if self.share_by_account else "user"

    def has(self, flag: int) -> bool:
        """True if every bit of `flag` is set."""
        return self.flags & flag == flag

    def replace(self, **changes) -> Consts:
        """A copy with `changes` applied (not validated; call `validate`)."""
        return dataclasses.replace(self, **changes)


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Consts))

#: The values a constant that names a choice may take, the default first.  `policy`
#: names the cycle's Policy (fairshare.core.policies.policy_for); `idleshare` how an idle
#: member's share goes to its siblings (fairshare.core.split).
CHOICES: dict[str, tuple[str, ...]] = {
    "policy": ("unicos", "feedback", "slurm"),
    "idleshare": ("proportional", "even"),
    "feedback_form": ("dominating", "literal"),
}
#: The entry-point group of the policies a site installs (fairshare.core.plugins).
POLICY_GROUP = "fairshare.policies"


def policy_names() -> tuple[str, ...]:
    """The policies `shradmin --policy` accepts: the suite's (CHOICES) and those
    installed in the entry-point group POLICY_GROUP, sorted (their names only; a
    name installed that fails to load is caught when the cycle asks for it)."""
    installed = {ep.name for ep in entry_points(group=POLICY_GROUP)}
    return CHOICES["policy"] + tuple(sorted(installed - set(CHOICES["policy"])))


DURATION_FIELDS = ("halflife", "delta", "writeback", "checkpoint", "feedback_period")


def decay(elapsed, halflife: float):
    """The factor usage decays by over `elapsed` seconds: 0.5 ** (elapsed / halflife).

    `elapsed` and `halflife` may be numbers or numpy arrays (element-wise); a negative age
    counts as 0.
    """
    age = np.maximum(elapsed, 0.0)
    if np.ndim(halflife):  # one half-life per node (or entry): every one positive
        factor = 0.5 ** (age / np.asarray(halflife, dtype=float))
    else:
        factor = age * 0.0 if halflife <= 0 else 0.5 ** (age / halflife)
    return float(factor) if np.ndim(factor) == 0 else factor  # a number stays a float


def flag_names(flags: int) -> list[str]:
    """Names of the flags set in `flags`, in bit order."""
    return [name for name, bit in FLAG_NAMES.items() if flags & bit]


def parse_flags(value: object) -> int:
    """Flags from an int, an octal string ("006", "0o6"), names ("ADJGROUPS,LIMSHARE") or a list.

    Raises OptionError naming what was expected.
    """
    if isinstance(value, bool):
        raise OptionError(f"flags: expected an octal number or flag names, got {value!r}")
    if isinstance(value, int):
        flags = value
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"(0o)?[0-7]+", text):
            flags = int(text.removeprefix("0o"), 8)
        else:
            return parse_flags([t for t in re.split(r"[,|+\s]+", text) if t])
    elif isinstance(value, Iterable):
        flags = 0
        for item in value:
            name = str(item).upper()
            if name not in FLAG_NAMES:
                known = ", ".join(FLAG_NAMES)
                raise OptionError(f"flags: unknown flag {item!r}; expected one of {known}")
            flags |= FLAG_NAMES[name]
    else:
        raise OptionError(f"flags: expected an octal number or flag names, got {value!r}")
    if flags & ~ALL_FLAGS or flags < 0:
        raise OptionError(f"flags: {oct(flags)} has bits outside {oct(ALL_FLAGS)}")
    return flags


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_PART = re.compile(r"(([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-z]*))")


def parse_duration(value: object, what: str = "duration") -> float:
    """Seconds from a number or a string like "4", "3600s", "90m", "2h", "1h30m", "7d".

    Raises OptionError naming `what` when the value is not a non-negative duration.
    """
    if isinstance(value, bool):
        raise OptionError(f"{what}: expected a duration such as 3600s, 2h or 7d, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value) if abs(value) < 1e308 else math.inf
    else:
        # one number with an optional unit, or several each with a unit ("1h30m")
        text = str(value).strip()
        parts = _DURATION_PART.findall(text)
        units = [unit for _, _, unit in parts]
        valid = (
            parts
            and "".join(p[0] for p in parts) == text.replace(" ", "")
            and all(unit in _UNITS for unit in units)
            and (len(parts) == 1 or all(units))
        )
        if not valid:
            raise OptionError(f"{what}: expected a duration such as 3600s, 2h or 7d, got {value!r}")
        seconds = sum(float(number) * _UNITS[unit] for _, number, unit in parts)
    if not math.isfinite(seconds) or seconds < 0:
        raise OptionError(f"{what}: expected a non-negative duration, got {value!r}")
    return seconds


@dataclass(frozen=True)
class Range:
    """The values a constant (or each item of nice_decay) may take: `lo` to `hi` in `unit`,
    `lo` itself excluded when `lo_open`.  The bounds keep every charge, usage and share
    finite at the largest usage a site can reach (see shradmin(8))."""

    lo: float
    hi: float
    unit: str = ""
    lo_open: bool = False
    integer: bool = False
    hi_open: bool = False

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not math.isfinite(value) or (self.integer and value != int(value)):
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below  # both False for NaN

    @property
    def smallest(self) -> float:
        """The smallest allowed value (the next float above `lo` when `lo` is excluded)."""
        return math.nextafter(self.lo, math.inf) if self.lo_open else self.lo

    @property
    def largest(self) -> float:
        """The largest allowed value (the next float below `hi` when `hi` is excluded)."""
        return math.nextafter(self.hi, -math.inf) if self.hi_open else self.hi

    def describe(self) -> str:
        """The range in words, e.g. "from 0.1 to 3600 s" or "above 1 up to 100"."""
        unit = f" {self.unit}" if self.unit else ""
        kind = "a whole number " if self.integer else "a number "
        if self.lo == self.hi:
            return f"{self.lo:g}{unit}"
        first = f"above {self.lo:g}" if self.lo_open else f"from {self.lo:g}"
        last = f"below {self.hi:g}" if self.hi_open else f"to {self.hi:g}"
        return f"{kind}{first} {last}{unit}"


#: The largest cost of one unit of a resource, and the largest percent multiplier: with
#: these, 10**5 CPUs for a whole cycle charge about 1e17 per cycle and a decayed usage
#: stays below 1e30 (MAX_USAGE), far from the largest float (1.8e308).
MAX_COST = 1e6
MAX_PERCENT = 10000.0
#: A day and ten years, in seconds.
DAY = 86400.0
TEN_YEARS = 3650 * DAY

#: The documented range of every constant but flags (0 to ALL_FLAGS) and cost_tty (0).
RANGES: dict[str, Range] = {
    "halflife": Range(1.0, TEN_YEARS, "s"),
    "delta": Range(0.1, 3600.0, "s"),
    "cost_tick": Range(0.0, MAX_COST),
    "cost_bio": Range(0.0, MAX_COST),
    "cost_sio": Range(0.0, MAX_COST),
    "cost_syscall": Range(0.0, MAX_COST),
    "cost_mem": Range(0.0, MAX_COST),
    "cost_tty": Range(0.0, 0.0),
    "percent": Range(0.0, MAX_PERCENT, "%"),
    "maxushare": Range(1.0, 1000.0, lo_open=True),
    "k5": Range(1.0, 1000.0, lo_open=True),
    "mingshare": Range(0.0, 1.0, lo_open=True, hi_open=True),
    "sharemin": Range(0.0, 0.99),
    "maxusage": Range(1.0, MAX_USAGE),
    "maxlevels": Range(2, 64, integer=True),
    "nice_decay": Range(0.1, DAY, "s"),
    "writeback": Range(0.0, DAY, "s"),
    "checkpoint": Range(0.0, DAY, "s"),
    "quota_threshold": Range(0.0, DAY, "s"),
    "feedback_kc": Range(0.0, 1.0, lo_open=True),
    "feedback_kmu": Range(0.0, 2.0),
    "feedback_period": Range(0.0, DAY, "s"),
    "feedback_v": Range(1.0, 100.0, lo_open=True),
    "dampening": Range(1.0, 9999.0),
    "speed": Range(0.0, 1000.0, lo_open=True),
}
#: The most levels `feedback_kmu` may name (the deepest share tree shradmin -G allows).
MAX_KMU_LEVELS = 64

#: Why cost_tty must stay 0 (shradmin -y).
TTY_REFUSED = (
    "cost_tty (-y): Linux keeps no per-process count of tty reads and writes, so a tty "
    "cost could never be charged; only 0 is accepted (see shradmin(8))"
)


def validate(consts: Consts) -> Consts:
    """`consts` itself if every value is in its range (RANGES); else OptionError naming
    the constant and its range."""
    parse_flags(consts.flags)
    if parse_quota_signal(consts.quota_signal) != consts.quota_signal:
        raise OptionError(f"quota_signal: expected a stored name, got {consts.quota_signal!r}")
    for name in CHOICES:
        _choice(name, getattr(consts, name))
    for name, rng in RANGES.items():
        value = getattr(consts, name)
        if name == "cost_tty":
            if value != 0:
                raise OptionError(f"{TTY_REFUSED}, got {value!r}")
            continue
        if name == "nice_decay":
            lo, hi = value
            if not (lo in rng and hi in rng and lo <= hi):
                raise OptionError(
                    f"nice_decay: expected two half-lives, each {rng.describe()}, the first "
                    f"not above the second, got {value!r}"
                )
            continue
        if name == "feedback_kmu":
            if not (1 <= len(value) <= MAX_KMU_LEVELS and all(v in rng for v in value)):
                raise OptionError(
                    f"feedback_kmu: expected 1 to {MAX_KMU_LEVELS} gains by level, each "
                    f"{rng.describe()}, got {value!r}"
                )
            continue
        if value not in rng:
            raise OptionError(f"{name}: expected {rng.describe()}, got {value!r}")
    return consts


#: Signals the quota warning may not be: they stop or kill a process, which is the
#: threshold's job (SIGKILL), not a warning's.
_NOT_A_WARNING = ("SIGKILL", "SIGSTOP")


def parse_quota_signal(value: object) -> str:
    """The quota warning signal (`Consts.quota_signal`) as stored: "none", or a signal's
    name in capitals with its SIG prefix ("SIGURG" from "urg", "SIGURG" or 23).  Raises
    OptionError naming what was expected."""
    expected = "none or a signal name such as SIGURG, SIGUSR1 or SIGXCPU (not SIGKILL, SIGSTOP)"
    if isinstance(value, bool):
        raise OptionError(f"quota_signal: expected {expected}, got {value!r}")
    if isinstance(value, int):
        try:
            name = signal.Signals(value).name
        except ValueError:
            raise OptionError(f"quota_signal: expected {expected}, got {value!r}") from None
    elif isinstance(value, str):
        text = value.strip().upper()
        if text == "NONE":
            return "none"
        name = text if text.startswith("SIG") else "SIG" + text
    else:
        raise OptionError(f"quota_signal: expected {expected}, got {value!r}")
    if name not in signal.Signals.__members__ or name in _NOT_A_WARNING:
        raise OptionError(f"quota_signal: expected {expected}, got {value!r}")
    return signal.Signals[name].name


def quota_warning(consts: Consts) -> signal.Signals | None:
    """The signal the daemon sends at a CPU quota (None: none, only the messages)."""
    name = parse_quota_signal(consts.quota_signal)
    return None if name == "none" else signal.Signals[name]


def _choice(name: str, value: object) -> str:
    """`value` if it is one of constant `name`'s CHOICES (for `policy`, or an installed
    plug-in's name: `policy_names`); else OptionError listing them."""
    if value in CHOICES[name]:
        return value  # type: ignore[return-value]
    known = policy_names() if name == "policy" else CHOICES[name]
    if value not in known:
        raise OptionError(f"{name}: expected one of {', '.join(known)}, got {value!r}")
    return value  # type: ignore[return-value]


def _coerce(name: str, value: object) -> object:
    """The typed value of constant `name` from a stored or user-supplied `value`."""
    if name in CHOICES:
        return _choice(name, value.strip().lower() if isinstance(value, str) else value)
    if name == "flags":
        return parse_flags(value)
    if name == "quota_signal":
        return parse_quota_signal(value)
    if name in DURATION_FIELDS:
        return parse_duration(value, name)
    if name == "maxlevels":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise OptionError(f"maxlevels: expected an integer, got {value!r}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        except ValueError:
            raise OptionError(f"maxlevels: expected an integer, got {value!r}") from None
        if number not in RANGES["maxlevels"]:
            rng = RANGES["maxlevels"].describe()
            raise OptionError(f"maxlevels: expected {rng}, got {value!r}")
        return int(number)
    if name == "nice_decay":
        items = value.split(",") if isinstance(value, str) else value
        try:
            lo, hi = (float(v) for v in items)  # type: ignore[union-attr]
        except (TypeError, ValueError, OverflowError):
            msg = f"nice_decay: expected two numbers like 2,60, got {value!r}"
            raise OptionError(msg) from None
        return (lo, hi)
    if name == "feedback_kmu":
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, int | float) and not isinstance(items, bool):
            items = [items]
        try:
            return tuple(float(v) for v in items)  # type: ignore[union-attr]
        except (TypeError, ValueError, OverflowError):
            msg = f"feedback_kmu: expected gains by level like 0.25,0.5,0.75,1, got {value!r}"
            raise OptionError(msg) from None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise OptionError(f"{name}: expected a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise OptionError(f"{name}: expected a number, got {value!r}") from None
    except OverflowError:  # an int beyond any float: out of every range
        return math.inf


def consts_from_mapping(values: Mapping[str, object], base: Consts | None = None) -> Consts:
    """`base` (default: the defaults) with the named constants in `values` applied, validated.

    Flags may be names or octal strings, durations strings like "2h".  Raises
    OptionError for an unknown name or a bad value.
    """
    changes = {}
    for name, value in values.items():
        if name not in FIELDS:
            raise OptionError(f"unknown constant {name!r}; expected one of {', '.join(FIELDS)}")
        changes[name] = _coerce(name, value)
    return validate((base or Consts()).replace(**changes))


_BARE_NUMBER = re.compile(r"\s*[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?\s*")


def parse_halflife(value: object) -> float:
    """Seconds from the half-life as a person gives it (shradmin -K, a scenario's
    [consts], a schedule): a bare number is hours, as in the guide's ``-K 120`` (five
    days); "3600s", "90m", "2h", "5d" keep their unit.  Stored values are seconds and
    never pass through here."""
    if isinstance(value, bool):
        return parse_duration(value, "halflife")  # refused there
    if isinstance(value, int | float) or (isinstance(value, str) and _BARE_NUMBER.fullmatch(value)):
        try:
            hours = float(value)
        except OverflowError:  # an int too large for a float
            hours = math.inf
        if not (math.isfinite(hours) and hours >= 0):
            raise OptionError(
                f"halflife: expected a duration such as 120 (hours), 8h or 5d, got {value!r}"
            )
        return hours * 3600.0
    return parse_duration(value, "halflife")


def from_user(changes: Mapping[str, object]) -> dict[str, object]:
    """Constants as a person types them, in the units they are stored in: a bare
    half-life is hours (`parse_halflife`); everything else is unchanged."""
    out = dict(changes)
    if "halflife" in out:
        out["halflife"] = parse_halflife(out["halflife"])
    return out


_warned: set[tuple[str, str]] = set()


def consts_from_stored(values: Mapping[str, object], base: Consts | None = None) -> Consts:
    """`consts_from_mapping` for values read back from the UDB (the constants, a schedule's
    overrides).  A stored value outside its range (written before ranges were checked, or
    behind shradmin's back) is not used: the base value stays in force and a warning
    names the constant once per process, so the daemon keeps scheduling and shradmin can
    still set a good value."""
    try:
        return consts_from_mapping(values, base)
    except OptionError:
        pass
    good = {}
    for name, value in values.items():
        try:
            consts_from_mapping({name: value}, base)
        except OptionError as err:
            if (name, repr(value)) not in _warned:
                _warned.add((name, repr(value)))
                log.warning("stored constant ignored, set it again with shradmin: %s", err)
            continue
        good[name] = value
    return consts_from_mapping(good, base)
