"""Choosing the enforcer: the best this machine offers, or the one asked for.

Order of preference: systemd (cgroup v2 with the cpu controller and systemd as
PID 1: systemd owns the tree, so weights go through its D-Bus API; asked for by
name, also where systemd runs in legacy mode on cgroup v1), cgroup v2
with the cpu controller, cgroup v1's cpu hierarchy, nice, none.  Not root means
none.  The `Choice` carries a one-line reason, which the daemon logs first.  NOSCHED
and NOSHARE (Consts.scheduling) do not change the choice: they can be set and cleared
while the daemon runs, which keeps the chosen enforcer off while they are set.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from fairshare.enforce.actions import OsActions
from udb.errors import OptionError

ENFORCERS = ("auto", "systemd", "cgroup2", "cgroup1", "nice", "none")


@dataclass(frozen=True)
class Mount:
    path: Path
    fstype: str  # "cgroup2" or "cgroup"
    options: tuple[str, ...]


@dataclass(frozen=True)
class Choice:
    """The enforcer to run (`name`), where its cgroup hierarchy is, and why; `acct`:
    cgroup v1's cpuacct hierarchy, whose counters give each lnode's CPU; for nice and
    none, `acct` is the hierarchy of their accounting-only lnode cgroups
    (fairshare.enforce.accounting: cpuacct, or cgroup v2 when `acct_v2`), None: none."""

    name: str
    reason: str
    mount: Path | None = None
    acct: Path | None = None
    acct_v2: bool = False


def cgroup_mounts(mounts_text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts listed in the text of /proc/self/mounts."""
    out = []
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append(Mount(Path(parts[1]), parts[2], tuple(parts[3].split(","))))
    return out


def cgroup2_cpu(mounts: list[Mount]) -> tuple[Path | None, str]:
    """The cgroup v2 mount that offers the cpu controller, or None and why not."""
    v2 = [m for m in mounts if m.fstype == "cgroup2"]
    if not v2:
        return None, "no cgroup v2 hierarchy is mounted"
    for m in v2:
        try:
            controllers = (m.path / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "cpu" in controllers:
            return m.path, f"cgroup v2 at {m.path} offers the cpu controller"
    return None, f"cgroup v2 at {v2[0].path} lacks the cpu controller (bound to cgroup v1)"


def cgroup1_cpu(mounts: list[Mount]) -> tuple[Path | None, str]:
    """The cgroup v1 hierarchy with the cpu controller, or None and why not."""
    for m in mounts:
        if m.fstype == "cgroup" and "cpu" in m.options:
            return m.path, f"cgroup v1 cpu hierarchy at {m.path}"
    return None, "no cgroup v1 cpu hierarchy is mounted"


def cgroup1_cpuacct(mounts: list[Mount]) -> Path | None:
    """The cgroup v1 hierarchy with the cpuacct controller (may be the cpu one), or None."""
    for m in mounts:
        if m.fstype == "cgroup" and "cpuacct" in m.options:
            return m.path
    return None


def accounting(choice: Choice, mounts_text: str | None = None) -> Choice:
    """`choice` (nice or none, as root) with the hierarchy of its accounting-only lnode
    cgroups: cgroup v1's cpuacct, else any cgroup v2 mount; unchanged if there is none."""
    if mounts_text is None:
        mounts_text = Path("/proc/self/mounts").read_text()
    mounts = cgroup_mounts(mounts_text)
    acct = cgroup1_cpuacct(mounts)
    if acct is not None:
        return dataclasses.replace(
            choice, acct=acct, reason=f"{choice.reason}; CPU counted by cpuacct at {acct}"
        )
    v2 = [m.path for m in mounts if m.fstype == "cgroup2"]
    if v2:
        why = f"{choice.reason}; CPU counted by cgroup v2 at {v2[0]}"
        return dataclasses.replace(choice, acct=v2[0], acct_v2=True, reason=why)
    return dataclasses.replace(
        choice, reason=f"{choice.reason}; no cgroup to count CPU: sampled per process"
    )


def detect(
    requested: str = "auto",
    *,
    euid: int | None = None,
    mounts_text: str | None = None,
    systemd_booted: bool | None = None,
) -> Choice:
    """The enforcer to use and the reason, given the request and the machine.

    Raises OptionError when a named enforcer cannot work on this machine
    (its cgroup hierarchy is missing).  Without root the choice is none whatever was
    requested.
    `systemd_booted`: systemd is PID 1 (default: /run/systemd/system exists, as
    sd_booted(3) tests).
    """
    if requested not in ENFORCERS:
        raise OptionError(f"--enforcer: expected one of {', '.join(ENFORCERS)}, not {requested!r}")
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return Choice(
            "none", f"not root (euid {euid}): accounting only, processes are not scheduled"
        )
    if mounts_text is None:
        mounts_text = Path("/proc/self/mounts").read_text()
    if requested == "none":
        why = "--enforcer none: accounting only, no CPU scheduling"
        return accounting(Choice("none", why), mounts_text)
    mounts = cgroup_mounts(mounts_text)
    v2, why2 = cgroup2_cpu(mounts)
    v1, why1 = cgroup1_cpu(mounts)
    acct = cgroup1_cpuacct(mounts)
    if v1 is not None:
        why1 += (
            f", CPU counted by cpuacct at {acct}"
            if acct is not None
            else ", no cpuacct hierarchy: CPU sampled per process"
        )
    if systemd_booted is None:
        systemd_booted = Path("/run/systemd/system").is_dir()
    if requested == "systemd":
        return _systemd(mounts, v2, why2, v1, systemd_booted)
    if requested == "cgroup2":
        if v2 is None:
            raise OptionError(f"--enforcer cgroup2: {why2}")
        return Choice("cgroup2", f"--enforcer cgroup2: {why2}", v2)
    if requested == "cgroup1":
        if v1 is None:
            raise OptionError(f"--enforcer cgroup1: {why1}")
        return Choice("cgroup1", f"--enforcer cgroup1: {why1}", v1, acct)
    if requested == "nice":
        why = "--enforcer nice: per-session/per-process nice values"
        return accounting(Choice("nice", why), mounts_text)
    if v2 is not None and systemd_booted:
        return Choice(
            "systemd", f"auto: {why2} and systemd is PID 1: CPUWeight= on its user units", v2
        )
    if v2 is not None:
        return Choice("cgroup2", f"auto: {why2}", v2)
    if v1 is not None:
        return Choice("cgroup1", f"auto: {why2}; using the {why1}", v1, acct)
    return accounting(
        Choice("nice", f"auto: {why2}; {why1}; falling back to nice values"), mounts_text
    )


def _systemd(
    mounts: list[Mount], v2: Path | None, why2: str, v1: Path | None, booted: bool
) -> Choice:
    """--enforcer systemd: on cgroup v2, or where systemd runs in legacy mode (its own
    name=systemd hierarchy beside cgroup v1's cpu one: systemd turns CPUWeight= into
    cpu.shares there)."""
    if not booted:
        raise OptionError("--enforcer systemd: systemd is not PID 1 (no /run/systemd/system)")
    if v2 is not None:
        return Choice("systemd", f"--enforcer systemd: {why2}, systemd is PID 1", v2)
    legacy = any(m.fstype == "cgroup" and "name=systemd" in m.options for m in mounts)
    if v1 is not None and legacy:
        return Choice(
            "systemd",
            f"--enforcer systemd: systemd is PID 1 in legacy mode (cgroup v1, cpu hierarchy "
            f"at {v1}): CPUWeight= becomes cpu.shares, CPU sampled per process",
            v1,
        )
    raise OptionError(f"--enforcer systemd: {why2}")


def make_enforcer(choice: Choice, actions: OsActions, by_account: bool = False):
    """The enforcer object for `choice` (not yet set up), changing the machine only
    through `actions`; `by_account` (Share by Account) makes the systemd enforcer weigh
    session scopes, not user slices."""
    if choice.name == "systemd":
        from fairshare.enforce.systemd import SystemdEnforcer

        return SystemdEnforcer(choice.mount, actions=actions, by_account=by_account)
    if choice.name == "cgroup2":
        from fairshare.enforce.cgroup2 import Cgroup2Enforcer

        return Cgroup2Enforcer(choice.mount, actions=actions)
    if choice.name == "cgroup1":
        from fairshare.enforce.cgroup1 import Cgroup1Enforcer

        return Cgroup1Enforcer(choice.mount, acct=choice.acct, actions=actions)
    if choice.name == "nice":
        from fairshare.enforce.nice import NiceEnforcer

        flat = NiceEnforcer(actions=actions)
    else:
        from fairshare.enforce.none import NoEnforcer

        flat = NoEnforcer(actions)
    if choice.acct is None:
        return flat
    from fairshare.enforce.accounting import AccountingCgroups, Counted

    return Counted(flat, AccountingCgroups(choice.acct, actions, v1=not choice.acct_v2))
