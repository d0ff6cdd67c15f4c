"""From effective shares to kernel weights (pure: numpy in, numpy out).

The daemon's enforcers and the simulator use these same functions, so what the
simulator measures is what the kernel is asked to do.

- cgroup v2 `cpu.weight` (1..10000) and cgroup v1 `cpu.shares` (2..262144): proportional
  to e_share, the largest lnode at the top of the range.  Background lnodes (past
  MAXUSAGE or zero shares) get `cpu.idle = 1` on v2, so their weight is irrelevant (1),
  and the minimum, 2, on v1.
- nice: the kernel's CFS gives a process of nice n the weight NICE_TO_WEIGHT[n + 20]
  (each step about 1.25x).  A lnode's processes should each get e_share / nrun of the
  machine, so each lnode's per-process weight is mapped, relative to the largest, onto
  the nearest nice value in 0..19 (largest per-process weight -> nice 0; background -> 19).
"""

from __future__ import annotations

import numpy as np

#: The kernel's sched_prio_to_weight: CFS weight of nice -20..19, index nice + 20.
NICE_TO_WEIGHT = np.array(
    [
        88761, 71755, 56483, 46273, 36291,
        29154, 23254, 18705, 14949, 11916,
        9548, 7620, 6100, 4904, 3906,
        3121, 2501, 1991, 1586, 1277,
        1024, 820, 655, 526, 423,
        335, 272, 215, 172, 137,
        110, 87, 70, 56, 45,
        36, 29, 23, 18, 15,
    ],
    dtype=np.int64,
)  # fmt: skip

CGROUP2_MIN, CGROUP2_MAX = 1, 10000
CGROUP1_MIN, CGROUP1_MAX = 2, 262144
NICE_MIN, NICE_MAX = 0, 19

# log of the weight of nice 0..19 relative to nice 0, for the nearest-nice search.
_LOG_NICE = np.log(NICE_TO_WEIGHT[20:] / NICE_TO_WEIGHT[20])


def _proportional(e_share, background, lo: int, hi: int) -> np.ndarray:
    e = np.where(np.asarray(background, dtype=bool), 0.0, np.asarray(e_share, dtype=float))
    top = e.max(initial=0.0)
    if not (np.isfinite(top) and top > 0):  # NaN, inf or nothing positive: clean first
        e = np.where(np.isfinite(e) & (e > 0), e, 0.0)
        top = e.max(initial=0.0)
        if top <= 0:
            return np.full(e.shape, lo, dtype=np.int64)
    w = np.rint(e / top * hi)
    return np.clip(w, lo, hi, out=w).astype(np.int64)


def cgroup2_weights(e_share, background) -> np.ndarray:
    """cgroup v2 cpu.weight per lnode, integers in 1..10000, proportional to e_share.

    The largest e_share gets 10000; background lnodes (and e_share 0) get 1 (the
    cgroup v2 backend also sets cpu.idle=1 for background lnodes).
    """
    return _proportional(e_share, background, CGROUP2_MIN, CGROUP2_MAX)


def cgroup1_shares(e_share, background) -> np.ndarray:
    """cgroup v1 cpu.shares per lnode, integers in 2..262144, proportional to e_share.

    The largest e_share gets 262144; background lnodes (and e_share 0) get 2.
    """
    return _proportional(e_share, background, CGROUP1_MIN, CGROUP1_MAX)


def nice_values(e_share, nrun, background) -> np.ndarray:
    """Nice value (0..19) for every process of each lnode.

    Each lnode's per-process share e_share / max(nrun, 1) is compared with the largest
    per-process share and given the nice whose kernel weight has the nearest ratio to
    nice 0's (in log terms).  Background lnodes and e_share 0 get 19.
    """
    e = np.asarray(e_share, dtype=float)
    bg = np.asarray(background, dtype=bool) | ~(np.isfinite(e) & (e > 0))
    per_proc = np.where(bg, 0.0, e / np.maximum(np.asarray(nrun, dtype=float), 1.0))
    top = per_proc.max(initial=0.0)
    out = np.full(e.shape, NICE_MAX, dtype=np.int64)
    if top <= 0:
        return out
    ok = ~bg
    rel = np.log(per_proc[ok] / top)  # <= 0
    out[ok] = np.abs(rel[:, None] - _LOG_NICE[None, :]).argmin(axis=1)
    return out
