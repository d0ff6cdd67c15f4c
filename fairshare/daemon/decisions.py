"""What the daemon does with a cycle's result: decided without doing it (pure), then
done by the daemon's step through its OsActions and its enforcer.

- `quota_signals`: CPU quotas (the entry's cpuquota, guide 4.6): the processes of a
  lnode whose CPU used (the entry's cpuquotaused plus what the lnode ran since it
  was last written back) reaches its quota get SIGXCPU, once per activation; past
  the quota plus shradmin's `quota_threshold` they get SIGKILL, every cycle.
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
from fairshare.core.consts import Consts
from fairshare.daemon.state import Lnodes
from fairshare.enforce.actions import OsActions, same_process
from fairshare.enforce.base import GroupShare, LnodeTarget

log = logging.getLogger("shrdaemon")


@dataclass(frozen=True)
class QuotaSignal:
    """`signal` for the processes `pids` of leaf `node` (`name`), which used `used` CPU
    seconds of its `quota`; `starts`: when each of `pids` started, as the sample said."""

    node: int
    name: str
    signal: signal.Signals
    pids: tuple[int, ...]
    used: float
    quota: float
    starts: tuple[float, ...]


def quota_signals(
    ln: Lnodes, procs: Mapping[int, Sequence[ProcessSample]], threshold: float
) -> list[QuotaSignal]:
    """The quota signals due now (`procs`: each leaf's processes at the last sample;
    `threshold`: CPU seconds past the quota before SIGKILL).  A SIGXCPU is due only
    to a leaf not in `ln.warned`; the caller adds it there once sent."""
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
        if used >= st.cpuquota + threshold:
            sig = signal.SIGKILL
        elif node not in ln.warned:
            sig = signal.SIGXCPU
        else:
            continue
        pids, starts = tuple(p.pid for p in mine), tuple(p.create_time for p in mine)
        out.append(QuotaSignal(node, ln.tree.names[node], sig, pids, used, st.cpuquota, starts))
    return out


def send_quota_signals(
    ln: Lnodes, procs: Mapping[int, Sequence[ProcessSample]], consts: Consts, actions: OsActions
) -> None:
    """SIGXCPU to an lnode's processes at its CPU quota, SIGKILL past the threshold
    (`quota_signals`), through `actions`, each logged."""
    for q in quota_signals(ln, procs, consts.quota_threshold):
        if q.signal == signal.SIGKILL:
            log.warning(
                "%s: CPU quota %.1f s exceeded by more than %.1f s (%.1f s used): SIGKILL "
                "to %d processes",
                *(q.name, q.quota, consts.quota_threshold, q.used, len(q.pids)),
            )
        else:
            ln.warned.add(q.node)
            log.warning(
                "%s: CPU quota %.1f s reached (%.1f s used): SIGXCPU to %d processes",
                *(q.name, q.quota, q.used, len(q.pids)),
            )
        for pid, started in zip(q.pids, q.starts, strict=True):
            if not same_process(actions, pid, started):
                log.info("%s: pid %d is no longer the process sampled: not signalled", q.name, pid)
                continue
            try:
                actions.signal(pid, q.signal)
            except ProcessLookupError:
                pass


def enforcer_targets(
    ln: Lnodes, procs: Mapping[int, Sequence[ProcessSample]], min_uid: int
) -> list[LnodeTarget]:
    """What the enforcer must do: every active leaf that has processes to place, in
    node order (`procs`: each leaf's processes at the last sample)."""
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
        strict=True,
    )
    names, entry = ln.tree.names, ln.entry
    above = _groups_above(ln, [node for node, _mine in placed])
    out = []
    for (node, mine), active, (e_share, nrun, background, flat) in zip(
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
            me = GroupShare(tree.names[g], float(t.e_share[g]), bool(t.background[g]))
            memo[g] = (*down_to(int(parent[g])), me)
        return memo[g]

    return {node: down_to(int(parent[node])) for node in nodes}
