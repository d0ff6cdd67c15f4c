"""What the daemon does with a cycle's result: decided without doing it (pure), then
done by the daemon's step through its OsActions and its enforcer.

- `quota_signals`: CPU quotas (the entry's cpuquota, guide 4.7): the processes of a
  lnode whose CPU used (the entry's cpuquotaused plus what the lnode ran since it
  was last written back) reaches its quota are warned, once per activation; past
  the quota plus shradmin's `quota_threshold` they get SIGKILL, every cycle.
  The warning is a message on the user's terminals and in the daemon's log (the
  journal), and shradmin's `quota_signal` if one is set: none by default, since
  Linux's SIGXCPU, the nearest to the guide's SIGCPULIM, kills a process that does
  not handle it, where SIGCPULIM "is ignored by default" and leaves the grace.
  Kernel threads are never signalled.
- `enforcer_targets`: one fairshare.enforce.base.LnodeTarget per active leaf with
  processes the enforcer may touch (uid at least `enforce_min_uid`, not a kernel
  thread): its processes, e_share, runnable count, background flag, UDB nice, the
  groups above it with their e_shares (the cgroup enforcers nest their cgroups so) and
  its flat share (what the flat enforcers weigh it by: fairshare.core.delivery).

`send_quota_signals` sends the signals through the daemon's OsActions
(fairshare.enforce.actions), each logged, to the processes still the ones sampled; the
daemon (fairshare.daemon.daemon) hands the targets to its enforcer.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fairshare.collect import ProcessSample
from fairshare.core.consts import Consts, quota_warning
from fairshare.daemon.state import Lnodes
from fairshare.enforce.actions import OsActions, same_process
from fairshare.enforce.base import GroupShare, LnodeTarget

log = logging.getLogger("shrdaemon")


@dataclass(frozen=True)
class QuotaSignal:
    """The quota's warning (`kill` False) or its SIGKILL (`kill` True) for the processes
    `pids` of leaf `node` (`name`), which used `used` CPU seconds of its `quota`;
    `signal`: the signal to send them (None: a warning without one); `starts`: when
    each of `pids` started, as the sample said."""

    node: int
    name: str
    signal: signal.Signals | None
    pids: tuple[int, ...]
    used: float
    quota: float
    starts: tuple[float, ...]
    kill: bool = False


def quota_signals(
    ln: Lnodes,
    procs: Mapping[int, Sequence[ProcessSample]],
    threshold: float,
    warning: signal.Signals | None = None,
) -> list[QuotaSignal]:
    """The quota warnings and kills due now (`procs`: each leaf's processes at the last
    sample; `threshold`: CPU seconds past the quota before SIGKILL; `warning`: the
    warning's signal, None for none).  A warning is due only to a leaf not in
    `ln.warned`; the caller adds it there once given."""
    out = []
    t = ln.table
    for node, st in ln.entry.items():
        if st.cpuquota <= 0 or not t.active[node]:
            continue
        used = st.cpuquotaused + float(t.cpu_seconds[node] - t.cpu_written[node])
        if used < st.cpuquota:
            continue
        mine = [p for p in procs.get(node, ()) if not p.kernel]
        if not mine:
            continue
        kill = used >= st.cpuquota + threshold
        if not kill and node in ln.warned:
            continue
        sig = signal.SIGKILL if kill else warning
        pids, starts = tuple(p.pid for p in mine), tuple(p.create_time for p in mine)
        name = ln.tree.names[node]
        out.append(QuotaSignal(node, name, sig, pids, used, st.cpuquota, starts, kill))
    return out


def quota_message(q: QuotaSignal, threshold: float) -> str:
    """What the user is told on their terminals (one line): the quota reached and when
    the processes will be killed, or that they are being killed."""
    if q.kill:
        return (
            f"shrdaemon: {q.name}: CPU quota of {q.quota:g} s exceeded by more than "
            f"{threshold:g} s ({q.used:.1f} s used): your processes are being killed (SIGKILL)"
        )
    sent = "" if q.signal is None else f" ({q.signal.name} sent to them)"
    return (
        f"shrdaemon: {q.name}: CPU quota of {q.quota:g} s reached ({q.used:.1f} s used)"
        f"{sent}: your processes will be killed when they have used {threshold:g} CPU s "
        "more; save your work"
    )


def send_quota_signals(
    ln: Lnodes, procs: Mapping[int, Sequence[ProcessSample]], consts: Consts, actions: OsActions
) -> None:
    """The warning at an lnode's CPU quota (a message on the user's terminals, one in
    the log, the quota signal if one is set), SIGKILL past the threshold after the same
    messages (`quota_signals`), through `actions`."""
    threshold = consts.quota_threshold
    for q in quota_signals(ln, procs, threshold, quota_warning(consts)):
        if q.kill:
            log.warning(
                "%s: CPU quota %.1f s exceeded by more than %.1f s (%.1f s used): SIGKILL "
                "to %d processes",
                *(q.name, q.quota, threshold, q.used, len(q.pids)),
            )
        else:
            ln.warned.add(q.node)
            log.warning(
                "%s: CPU quota %.1f s reached (%.1f s used): warned, %s to %d processes; "
                "SIGKILL past %.1f s",
                *(q.name, q.quota, q.used, q.signal.name if q.signal else "no signal"),
                *(len(q.pids), q.quota + threshold),
            )
        pids = [p for p, t in zip(q.pids, q.starts, strict=True) if same_process(actions, p, t)]
        if len(pids) < len(q.pids):
            log.info(
                "%s: %d pids no longer the processes sampled: left alone",
                q.name,
                len(q.pids) - len(pids),
            )
        _tell(actions, q, pids, quota_message(q, threshold))
        if q.signal is None:
            continue
        for pid in pids:
            try:
                actions.signal(pid, q.signal)
            except ProcessLookupError:
                pass


def _tell(actions: OsActions, q: QuotaSignal, pids: Sequence[int], text: str) -> None:
    """`text` on the terminals of `pids` (fairshare.enforce.actions.OsActions.tell), which
    terminals logged; a failure is logged, never raised."""
    try:
        ttys = actions.tell(pids, text)
    except OSError as err:
        log.info("%s: the quota message reached no terminal: %s", q.name, err)
        return
    if ttys:
        log.info("%s: quota message written to %s", q.name, ", ".join(ttys))


def enforcer_targets(
    ln: Lnodes, procs: Mapping[int, Sequence[ProcessSample]], min_uid: int, cpus: float = 1.0
) -> list[LnodeTarget]:
    """What the enforcer must do: every active leaf that has processes to place, in
    node order (`procs`: each leaf's processes at the last sample; `cpus` the
    machine's, against which a leaf's want, in CPUs, meets its fair target)."""
    t = ln.table
    placed = []  # (node, its processes the enforcer may touch)
    for node in sorted(procs):
        mine = [p for p in procs[node] if p.uid >= min_uid and not p.kernel]
        if mine:
            placed.append((node, mine))
    if not placed:
        return []
    idx = np.array([node for node, _mine in placed], dtype=np.int64)
    keep = t.active[idx].tolist()
    # One fancy index per field, not a numpy scalar per field and target.
    columns = zip(
        t.e_share[idx].tolist(),
        t.nrun[idx].tolist(),
        t.background[idx].tolist(),
        t.flat[idx].tolist(),
        t.nested[idx].tolist(),
        t.want[idx].tolist(),
        t.target[idx].tolist(),
        strict=True,
    )
    names, entry = ln.tree.names, ln.entry
    above = _groups_above(ln, [node for node, _mine in placed])
    out = []
    for (node, mine), active, (e_share, nrun, background, flat, nested, want, target) in zip(
        placed, keep, columns, strict=True
    ):
        if not active:
            continue
        out.append(
            LnodeTarget(
                name=names[node],
                pids=tuple([p.pid for p in mine]),
                e_share=e_share,
                nrun=nrun,
                background=background,
                runnable=frozenset([p.pid for p in mine if p.runnable]),
                nice=st.nice if (st := entry.get(node)) is not None else 0,
                starts=tuple([p.create_time for p in mine]),
                groups=above[node],
                flat=flat,
                nested=nested if nested > 0 else None,
                light=want <= target * cpus * (1 + 1e-6),
                want=want,
            )
        )
    return out


def _groups_above(ln: Lnodes, nodes: Sequence[int]) -> dict[int, tuple[GroupShare, ...]]:
    """For each leaf of `nodes`, the groups above it (top first, the root left out) with
    their e_share and background flag; each group's chain made once."""
    t, tree = ln.table, ln.tree
    parent = tree.parent
    memo: dict[int, tuple[GroupShare, ...]] = {}

    def down_to(g: int) -> tuple[GroupShare, ...]:  # the chain ending with group g
        if g <= 0:
            return ()
        if g not in memo:
            nested = float(t.nested[g])
            me = GroupShare(
                tree.names[g],
                float(t.e_share[g]),
                bool(t.background[g]),
                nested if nested > 0 else None,
            )
            memo[g] = (*down_to(int(parent[g])), me)
        return memo[g]

    return {node: down_to(int(parent[node])) for node in nodes}
