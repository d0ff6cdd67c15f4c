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
- the nested cgroup tree (`cgroup_path`, `CgroupTree`, `sibling_weights`): the cgroup
  enforcers mirror the share tree, MOUNT/fairshare/+<group>/+<subgroup>/<lnode>, so the
  kernel hands the CPU a cgroup leaves unused to its siblings first (its own group),
  not to every lnode.  Each cgroup's weight among its siblings is proportional to its
  weight among theirs (`LnodeTarget.weight`, `GroupShare.weight`: the e_share, a
  group's its subtree's, times the trim fairshare.core.delivery steers toward what it
  is owed), the largest sibling at the top of the range.  Group levels past
  MAX_GROUP_LEVELS are collapsed into their ancestor at that level (the leaves below it
  become siblings there, still weighed by their e_share, a fraction of the machine).
  Group directories are "+" followed by `safe_name` of the group: `safe_name` never
  gives a "+", so a group can never clash with an lnode of the same name at the same
  level, and a leaf's directory keeps the name it always had.  The simulator
  (fairshare.sim.machine) shares its CPUs down this
  same tree with fairshare.core.maxmin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fairshare.core.index import TreeIndex, build_index
from fairshare.enforce.base import LnodeTarget, safe_name

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
#: Group levels the cgroup enforcers nest; deeper groups are collapsed into their
#: ancestor at this level (the kernel's cost grows with every level a task sits under).
MAX_GROUP_LEVELS = 4
#: What starts a group's cgroup directory name (never in a `safe_name`).
GROUP_PREFIX = "+"

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


def sibling_weights(parent, e_share, background, lo: int, hi: int) -> np.ndarray:
    """Each cgroup's weight among its siblings (the entries with the same `parent` key):
    proportional to e_share, the largest sibling at `hi`; background and e_share 0 `lo`."""
    keys = np.unique(np.asarray(parent, dtype=np.int64), return_inverse=True)[1].ravel()
    e = np.asarray(e_share, dtype=float)
    e = np.where(np.asarray(background, dtype=bool) | ~(np.isfinite(e) & (e > 0)), 0.0, e)
    top = np.zeros(keys.max(initial=-1) + 1)
    np.maximum.at(top, keys, e)
    t = top[keys]
    w = np.rint(np.divide(e, t, out=np.zeros(len(e)), where=t > 0) * hi)
    return np.clip(w, lo, hi, out=w).astype(np.int64)


def cgroup_path(groups: Sequence[str], lnode: str) -> tuple[str, ...]:
    """The directories under MOUNT/fairshare of lnode `lnode` below `groups` (its
    ancestors' names, top first, the root left out): "+<group>" per group level, at most
    MAX_GROUP_LEVELS of them, then the lnode's `safe_name`."""
    kept = groups[:MAX_GROUP_LEVELS]
    return (*[GROUP_PREFIX + safe_name(g) for g in kept], safe_name(lnode))


@dataclass
class CgroupTree:
    """The nested cgroups of a set of lnode paths (`cgroup_path`s), numbered breadth
    first as a fairshare.core.index.TreeIndex: `keys[i]` is cgroup i's path (the
    fair-share parent, (), is 0), `index` its TreeIndex (leaves: the lnode cgroups)."""

    keys: list[tuple[str, ...]]
    index: TreeIndex
    position: dict[tuple[str, ...], int] = field(default_factory=dict)

    @classmethod
    def of(cls, paths: Sequence[tuple[str, ...]]) -> CgroupTree:
        """The tree holding every path of `paths` and each of its prefixes."""
        every = {p[:k] for p in paths for k in range(1, len(p) + 1)}
        keys: list[tuple[str, ...]] = [()]
        position = {(): 0}
        levels = [np.zeros(1, dtype=np.int64)]
        depth = 1
        while True:
            level = sorted(
                (k for k in every if len(k) == depth), key=lambda k: (position[k[:-1]], k)
            )
            if not level:
                break
            start = len(keys)
            for k in level:
                position[k] = len(keys)
                keys.append(k)
            levels.append(np.arange(start, len(keys), dtype=np.int64))
            depth += 1
        parent = np.array([-1] + [position[k[:-1]] for k in keys[1:]], dtype=np.int64)
        leaf = np.array([k == () or not k[-1].startswith(GROUP_PREFIX) for k in keys])
        leaf[0] = len(keys) == 1
        index = build_index(levels, parent, leaf, np.ones(len(keys)), ~leaf)
        return cls(keys, index, position)

    def weights(self, e_share, background, lo: int, hi: int) -> np.ndarray:
        """Every cgroup's weight among its siblings (`sibling_weights`; `e_share` and
        `background` per cgroup, in `keys` order; the parent's own is `hi`)."""
        w = np.full(self.index.n, hi, dtype=np.int64)
        e, bg = np.asarray(e_share, dtype=float), np.asarray(background, dtype=bool)
        w[1:] = sibling_weights(self.index.parent1, e[1:], bg[1:], lo, hi)
        return w


def cgroup2_tree_weights(tree: CgroupTree, e_share, background) -> np.ndarray:
    """cgroup v2 cpu.weight of every cgroup of `tree` among its siblings (1..10000)."""
    return tree.weights(e_share, background, CGROUP2_MIN, CGROUP2_MAX)


def cgroup1_tree_shares(tree: CgroupTree, e_share, background) -> np.ndarray:
    """cgroup v1 cpu.shares of every cgroup of `tree` among its siblings (2..262144)."""
    return tree.weights(e_share, background, CGROUP1_MIN, CGROUP1_MAX)


#: The last tree `targets_tree` built, by its paths.
_LAST_TREE: dict[tuple[tuple[str, ...], ...], CgroupTree] = {}


def targets_tree(
    targets: Sequence[LnodeTarget],
) -> tuple[CgroupTree, list[tuple[str, ...]], np.ndarray, np.ndarray]:
    """The nested cgroups of `targets`: their tree, each target's `cgroup_path`, and the
    weight (`LnodeTarget.weight`) and background flag of every cgroup of the tree (a
    group's from the target's `groups`; a collapsed group's from its ancestor at the
    last level kept)."""
    paths = [cgroup_path([g.name for g in t.groups], t.name) for t in targets]
    key = tuple(paths)
    tree = _LAST_TREE.get(key)
    if tree is None:  # the tree changes only when lnodes come, go or change group
        tree = CgroupTree.of(paths)
        _LAST_TREE.clear()
        _LAST_TREE[key] = tree
    e = np.zeros(tree.index.n)
    bg = np.zeros(tree.index.n, dtype=bool)
    e[0] = 1.0
    position = tree.position
    for t, path in zip(targets, paths, strict=True):
        i = position[path]
        e[i], bg[i] = t.weight, t.background
        for k, g in enumerate(t.groups[: len(path) - 1]):
            j = position[path[: k + 1]]
            e[j], bg[j] = g.weight, g.background
    return tree, paths, e, bg
