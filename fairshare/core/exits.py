"""The site exit (the guide's 4.5, `site_adjust_lnodes`): a site's own adjustment of each
cycle's lnode table, after the policy and before the enforcer (pure: no OS, no clock).

UNICOS called a C routine with the lnode table after the daemon's calculations and
before it wrote them back to the kernel, "for example so that UID 104 never starves".
Here a site hook is any callable that follows `SiteHook`: it is given a read-only
`CycleView` of the active lnodes and returns `Adjustment`s, each a floor and a cap on
one lnode's effective share (fractions of the machine).  Hooks are found through the
entry-point group "fairshare.site_hooks" (fairshare.core.plugins); shrdaemon(8) says
which run, and its section SITE EXITS has the worked example.

`adjust` runs the site's hooks on a cycle's table: each `SiteExit` checks what its
hook returned (`validate`), and all they asked for is applied at once
(`apply_adjustments`): floors and caps are carried up the
tree (a group must hold its members' floors; it cannot take more than its members'
caps), then every sibling set that wants CPU is water-filled from the root down, as
the cycle's edge effects are (fairshare.core.cycle): within a set the shares keep their
proportions, clipped to their bounds, and sum to their parent's.  What a floor takes
comes from the lnode's siblings (and, through its groups, from theirs); what a cap
leaves goes to them.  An lnode that wants no CPU has its "if it started" share clipped
to its bounds; a background lnode (MAXUSAGE, zero shares) keeps 0.  A hook that raises,
or returns something `validate` refuses, is logged once (per message) and skipped for
that cycle: the cycle's own table stands, and the daemon goes on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fairshare.core.consts import Consts
from fairshare.core.cycle import _water_fill_level
from fairshare.core.lnode import LnodeTable
from fairshare.core.tree import Kind, ShareTree, tree_index

log = logging.getLogger("fairshare.core.exits")

#: A share below this counts as this in the water-fill, so a floor can lift an lnode
#: the cycle gave nothing (fractions of the machine).
_TINY = 1e-12


@dataclass(frozen=True)
class LnodeView:
    """One active lnode as a hook sees it (a copy: changing it changes nothing).

    node: its number in this cycle's table (what an `Adjustment` names); name, id (uid,
    or account number in Share by Account), kind ("user", "account", "group", "idle"),
    parent (the parent's node, -1 for the root), level (root 0); shares; m_share, due,
    e_share: its machine share, due share and effective share (fractions of the
    machine); usage (decayed, charge units); refs, nrun: its processes, runnable ones;
    wants_cpu: it, or a leaf below it, wants CPU; background: it runs only on idle CPU.
    """

    node: int
    name: str
    id: int
    kind: str
    parent: int
    level: int
    shares: float
    m_share: float
    due: float
    e_share: float
    usage: float
    refs: int
    nrun: int
    wants_cpu: bool
    background: bool


@dataclass(frozen=True)
class CycleView:
    """What a site hook is given: the active lnodes (root first, parents before their
    children) and the constants in force."""

    lnodes: tuple[LnodeView, ...]
    consts: Consts

    def by_id(self, ident: int) -> LnodeView | None:
        """The active non-root lnode with uid (or account number) `ident`, or None."""
        return next((v for v in self.lnodes if v.id == ident and v.parent >= 0), None)

    def by_name(self, name: str) -> LnodeView | None:
        """The active lnode called `name`, or None."""
        return next((v for v in self.lnodes if v.name == name), None)


@dataclass(frozen=True)
class Adjustment:
    """Keep lnode `node`'s effective share between `floor` and `cap` (fractions of the
    machine, 0 <= floor <= cap <= 1)."""

    node: int
    floor: float = 0.0
    cap: float = 1.0


class SiteHook(Protocol):
    """A site exit: called once a cycle with a read-only view of the lnode table; returns
    the adjustments to make (none: an empty iterable)."""

    def __call__(self, view: CycleView) -> Iterable[Adjustment]: ...


class HookError(ValueError):
    """What a site hook returned cannot be applied (the message says why)."""


def cycle_view(tree: ShareTree, table: LnodeTable, consts: Consts) -> CycleView:
    """The read-only view of `table`'s active lnodes that a hook is given."""
    nodes = np.flatnonzero(table.active).tolist()
    cols = {
        f: getattr(table, f).tolist()
        for f in ("m_share", "e_share", "usage", "refs", "nrun", "demand", "background")
    }
    due = table.due.tolist() if table.due is not None else [0.0] * tree.size
    views = tuple(
        LnodeView(
            node=n,
            name=tree.names[n],
            id=int(tree.ids[n]),
            kind=Kind(int(tree.kinds[n])).label,
            parent=int(tree.parent[n]),
            level=int(tree.level[n]),
            shares=float(tree.shares[n]),
            m_share=cols["m_share"][n],
            due=due[n],
            e_share=cols["e_share"][n],
            usage=cols["usage"][n],
            refs=int(cols["refs"][n]),
            nrun=int(cols["nrun"][n]),
            wants_cpu=bool(cols["demand"][n]),
            background=bool(cols["background"][n]),
        )
        for n in nodes
    )
    return CycleView(views, consts)


def validate(view: CycleView, result: object) -> list[Adjustment]:
    """The adjustments a hook returned, checked: an iterable of `Adjustment`, each naming
    an active lnode of `view`, with finite bounds 0 <= floor <= cap <= 1, the floors of
    the leaves summing to at most 1.  Raises HookError saying what is wrong."""
    if result is None:
        return []
    single = (Adjustment, Mapping, str, bytes)  # iterable, but not a list of adjustments
    if isinstance(result, single) or not isinstance(result, Iterable):
        raise HookError(f"expected an iterable of Adjustment, got {type(result).__name__}")
    known = {v.node: v for v in view.lnodes}
    out = []
    for i, adj in enumerate(result):
        if not isinstance(adj, Adjustment):
            raise HookError(f"item {i}: expected an Adjustment, got {adj!r}")
        if isinstance(adj.node, bool) or not isinstance(adj.node, int) or adj.node not in known:
            raise HookError(f"item {i}: node {adj.node!r} is not an active lnode")
        bounds = (adj.floor, adj.cap)
        if not all(isinstance(b, int | float) and math.isfinite(b) for b in bounds):
            raise HookError(f"item {i}: floor and cap must be finite numbers, got {bounds!r}")
        if not 0.0 <= adj.floor <= adj.cap <= 1.0:
            raise HookError(f"item {i}: expected 0 <= floor <= cap <= 1, got {bounds!r}")
        out.append(adj)
    floors = sum(a.floor for a in out if known[a.node].kind != "group")
    if floors > 1.0 + 1e-9:
        raise HookError(f"the floors of the lnodes sum to {floors:g}, more than the machine")
    return out


def apply_adjustments(
    tree: ShareTree, table: LnodeTable, adjustments: Iterable[Adjustment]
) -> np.ndarray:
    """`table`'s effective shares with `adjustments` applied (a new array; see the module
    docstring).  Several adjustments of one lnode: the highest floor, the lowest cap."""
    idx = tree_index(tree)
    n = idx.n
    lo, hi = np.zeros(n), np.ones(n)
    for a in adjustments:
        lo[a.node] = max(lo[a.node], a.floor)
        hi[a.node] = min(hi[a.node], a.cap)
    e_share = table.e_share.copy()
    # The lnodes whose e_share is a part of their parent's: active, wanting CPU, not in
    # the background; the rest keep theirs, clipped (idle) or 0 (background).
    part = table.active & table.demand & ~table.background & (e_share > 0)
    part[0] = True
    parent = idx.parent0
    for k in range(len(idx.bounds) - 1, 0, -1):  # carry floors and caps up, deepest first
        s, e = idx.bounds[k]
        sel = part[s:e]
        floors = np.bincount(parent[s:e], weights=np.where(sel, lo[s:e], 0.0), minlength=n)
        caps = np.bincount(parent[s:e], weights=np.where(sel, hi[s:e], 0.0), minlength=n)
        has = np.bincount(parent[s:e], weights=sel, minlength=n) > 0
        lo = np.maximum(lo, floors)
        hi = np.where(has & ~idx.leaf, np.minimum(hi, caps), hi)
    lo = np.minimum(lo, hi)
    old = table.e_share
    w = np.where(part, np.maximum(old, _TINY), 0.0)
    # Each set's total: what its members had, times what became of their parent's share
    # (the root's set keeps its total), so a set nothing touched is left as it was.
    had = np.bincount(parent[1:], weights=np.where(part, old, 0.0)[1:], minlength=n)
    total = had.copy()
    for k in range(1, len(idx.bounds)):
        s, e = idx.bounds[k]
        ps, pe = idx.bounds[k - 1]
        if k > 1:
            ratio = np.divide(
                e_share[ps:pe], old[ps:pe], out=np.ones(pe - ps), where=old[ps:pe] > 0
            )
            total[ps:pe] = had[ps:pe] * ratio
        ek, _t, _capped = _water_fill_level(idx, k, total, w[s:e], lo[s:e], hi[s:e], part[s:e])
        e_share[s:e] = np.where(part[s:e], ek, np.clip(old[s:e], lo[s:e], hi[s:e]))
    return np.where(table.background | ~table.active, old, e_share)


class SiteExit:
    """A loaded site hook, `name` as shrdaemon's log calls it."""

    def __init__(self, name: str, hook: SiteHook) -> None:
        self.name, self.hook = name, hook
        self._logged: set[str] = set()

    def adjustments(self, view: CycleView) -> list[Adjustment]:
        """What the hook asks for this cycle, checked (`validate`).  A hook that raises,
        or returns what `validate` refuses, asks for nothing this cycle and is logged
        once per message; nothing propagates."""
        try:
            return validate(view, self.hook(view))
        except (Exception, SystemExit) as err:  # a site's code must never stop the daemon
            message = f"{type(err).__name__}: {err}"
            if message not in self._logged:
                self._logged.add(message)
                log.warning("site hook %s skipped (logged once): %s", self.name, message)
            return []


def adjust(exits: Sequence[SiteExit], tree: ShareTree, table: LnodeTable, consts: Consts) -> None:
    """Run every hook of `exits` on one view of `table` and apply all they ask for at once
    to its e_share (in place; `apply_adjustments`: the highest floor and the lowest cap of
    each lnode), so no hook sees or undoes another's."""
    if not exits:
        return
    view = cycle_view(tree, table, consts)
    asked = [a for e in exits for a in e.adjustments(view)]
    if asked:
        table.e_share = apply_adjustments(tree, table, asked)
