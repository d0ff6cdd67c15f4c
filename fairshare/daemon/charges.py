"""From a sample to charges: which leaf lnode each process is charged to, and what
each leaf consumed (fairshare.core.cycle.Consumption), before the cycle turns it into
charges with the shradmin costs.  Pure: the sample, the lnode state and the rules
(only the account lookup given is told of each sample).

- `charge`: the cycle's step: the account lookup told of the sample first (newacct's
  sessions, fairshare.daemon.sessions), then `consumption` of what the costs charge
  (`resources_charged`, which also says what the collector reads);
- `leaf_of`: a process's leaf: its uid's entry (Share by User), or its account
  (Share by Account: fairshare.daemon.accounts.account_of), Idle's own uid to Idle; a uid
  with no entry goes to `unknown` (None when there is no unknown entry: not charged);
- `consumption`: per leaf, the CPU, I/O, system calls and memory of its processes,
  their count and runnable count.  A process in an lnode cgroup is charged through
  the cgroup's kernel counter (which also saw the short-lived processes no sample
  did).  Every CPU second counts for quotas (`Consumption.cpu`), whatever its nice;
  what the usage is charged (`Consumption.cpu_charged`) is graded by nice: processes
  at the weakest nice (fairshare.collect.WEAKEST_NICE) are not charged (the guide's
  rule) and other nice values are charged per CPU tick at the guide's graded rate
  (fairshare.core.nicetables.tick_rates), unless a process's nice does not make it
  background (`enforcer_nice`): the nice enforcer sets nice values itself, and in a
  cgroup enforcer's lnode cgroup a nice value weighs a process only against its own
  lnode's; every process is then charged at nice 0's rate.
  Idle CPU goes to the Idle lnode.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fairshare.collect import WEAKEST_NICE, ProcessSample, Sample
from fairshare.core.consts import Consts
from fairshare.core.cycle import Consumption
from fairshare.core.nicetables import tick_rates
from fairshare.daemon.accounts import AccountLookup, account_of
from fairshare.daemon.state import Lnodes
from udb.rules import IDLE_UID


def resources_charged(consts: Consts) -> dict[str, bool]:
    """Which of the collector's optional readings the costs charge: `io` (block and
    stream I/O), `syscalls`, `mem` (the keyword arguments of Collector.sample and
    `consumption`)."""
    return {
        "io": consts.cost_bio > 0 or consts.cost_sio > 0,
        "syscalls": consts.cost_syscall > 0,
        "mem": consts.cost_mem > 0,
    }


def charge(
    ln: Lnodes,
    sample: Sample,
    accounts: AccountLookup | None,
    enforcer_nice: bool,
    wanted: dict[str, bool],
) -> tuple[Consumption, dict[int, list[ProcessSample]]]:
    """The consumption per leaf of `sample` and the processes of each leaf, once
    `accounts` (None: the users' defaults) was told of the sample and every user's
    acids; `wanted`: `resources_charged`; `enforcer_nice`: see `consumption`."""
    if accounts is not None:
        accounts.refresh(sample, ln.acids)
    return consumption(ln, sample, accounts, enforcer_nice, **wanted)


def leaf_of(ln: Lnodes, p: ProcessSample, accounts: AccountLookup | None) -> int | None:
    """The leaf lnode process `p` is charged to (None: nowhere to charge it)."""
    return leaf_finder(ln, accounts)(p)


def leaf_finder(
    ln: Lnodes, accounts: AccountLookup | None
) -> Callable[[ProcessSample], int | None]:
    """`leaf_of` for `ln` and `accounts` as a function of the process alone (the maps
    looked up once, for a whole sample)."""
    by_id, unknown = ln.leaf_of_id.get, ln.unknown
    if ln.tree.mode != "account":
        return lambda p: by_id(p.uid, unknown)
    acids, idle = ln.acids, ln.idle

    def find(p: ProcessSample) -> int | None:
        acid = account_of(p, accounts, acids)
        node = by_id(acid) if acid is not None else None
        if node is None and p.uid == IDLE_UID:
            node = idle
        return unknown if node is None else node

    return find


def consumption(
    ln: Lnodes,
    sample: Sample,
    accounts: AccountLookup | None = None,
    enforcer_nice: bool = False,
    io: bool = True,
    syscalls: bool = True,
    mem: bool = True,
) -> tuple[Consumption, dict[int, list[ProcessSample]]]:
    """Consumption per leaf of `sample` and the processes of each leaf (`io`,
    `syscalls`, `mem` False: the collector did not read them, their totals stay 0;
    `enforcer_nice`: a nice value does not make a process background, every one is
    charged at nice 0's rate)."""
    n = ln.tree.size
    c = Consumption.zeros(n)
    procs: dict[int, list[ProcessSample]] = {}
    find = leaf_finder(ln, accounts)
    mine = [(node, p) for p in sample.processes if (node := find(p)) is not None]
    for node, p in mine:
        procs.setdefault(node, []).append(p)
    counted, graded = sample.groups, dict(sample.groups)
    if mine:
        # One column per field, then numpy: the processes are walked once per field.
        nodes, ps = zip(*mine, strict=True)
        idx = np.array(nodes, dtype=np.int64)
        nice = np.array([p.nice for p in ps], dtype=np.int64)
        cpu = np.array([p.cpu for p in ps], dtype=float)
        in_group = np.array([bool(p.group) for p in ps])
        charged = np.ones(len(ps), dtype=bool) if enforcer_nice else nice < WEAKEST_NICE
        # The guide's graded tick rate of each process (nice 0's under the nice enforcer).
        rate = tick_rates(np.zeros_like(nice) if enforcer_nice else nice)
        _group_cpu(graded, ps, cpu, in_group, rate)

        def total(values) -> np.ndarray:
            return np.bincount(idx, weights=values, minlength=n)

        def column(name: str) -> np.ndarray:
            return np.where(charged, [getattr(p, name) for p in ps], 0.0)

        own = np.where(in_group, 0.0, cpu)  # every CPU second counts for quotas
        c.cpu = total(own)
        c.cpu_charged = total(own * rate)
        want = np.array([p.want for p in ps], dtype=float)
        if (want >= 0).any():  # the collector knows what they wanted (runnable time)
            # A leaf with a process whose want is not known (not read this sample) has
            # none: NaN, and fairshare.core.delivery estimates it.
            unknown = total(want < 0) > 0
            c.want = np.where(unknown, np.nan, total(np.maximum(want, 0.0)))
        if io:
            c.bio = total(column("bio"))
            c.sio = total(column("sio"))
        if syscalls:
            c.syscalls = total(column("syscalls"))
        if mem:
            c.mem = total(column("mem"))
        c.refs = np.bincount(idx, minlength=n).astype(np.int64)
        c.nrun = np.bincount(idx, weights=[p.runnable for p in ps], minlength=n).astype(np.int64)
    for name, used in counted.items():
        node = ln.leaf_of_group.get(name)
        if node is not None:
            c.cpu[node] += used
            if c.cpu_charged is not None:
                c.cpu_charged[node] += graded[name]
    if ln.idle is not None and sample.idle > 0:
        c.cpu[ln.idle] += sample.idle
        if c.cpu_charged is not None:
            c.cpu_charged[ln.idle] += sample.idle
    return c, procs


def _group_cpu(graded: dict, ps, cpu, in_group, rate) -> None:
    """Take off each lnode cgroup's CPU as the kernel counted it, at the graded rate
    (`graded`, in place), what the guide does not charge: all of a nice-19 process's
    CPU, part of another niced one's (the collector re-reads such processes every
    sample, so their own CPU is known).  The CPU counted for quotas keeps all of it.
    Only processes in a cgroup with CPU of their own not charged in full are looked at."""
    for i in np.flatnonzero(in_group & (cpu > 0) & (rate != 1.0)).tolist():
        p = ps[i]
        if p.group in graded:
            graded[p.group] = max(graded[p.group] - p.cpu * (1 - rate[i]), 0.0)
