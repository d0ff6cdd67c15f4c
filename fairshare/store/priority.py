"""The flat priority of a host's lnodes, from what its daemon published (seed 001).

`published_priorities` reads a host's published lnode table and the share tree and
constants it runs with, and returns every lnode's target-deviation tuple and flat
priority (fairshare.core.deviation), highest first: what a batch scheduler's plug-in
asks shrdaemon for (the `priority` request, fairshare.server.answers) and `shrprio`
prints.  The other sites' usage is not in the published table: `remote` (per entry
name, the decayed usage of its subtree at the other sites, as fairshare.core.grid
takes it) adds it where an entry's parent's scope is global.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Engine

from fairshare.core.consts import GLOBALUSAGE
from fairshare.core.deviation import standing
from fairshare.core.tree import Kind
from fairshare.store.config import load_consts, load_tree
from fairshare.store.published import LnodeStore
from udb.errors import NotFound
from udb.session import read_connection


@dataclass(frozen=True)
class LnodePriority:
    """One lnode's standing: its target-deviation tuple root to leaf (percentage points,
    padded with 0 to the tree's depth), the base-200 digits and the flat priority."""

    name: str
    uid: int
    kind: str
    deviations: list[float]
    digits: list[int]
    priority: int

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "uid": self.uid,
            "kind": self.kind,
            "deviations": self.deviations,
            "digits": self.digits,
            "priority": self.priority,
        }


@dataclass(frozen=True)
class Priorities:
    """A host's lnodes by flat priority, highest first, with the cycle they come from."""

    host: str
    cycle: int
    time: float
    depth: int
    lnodes: list[LnodePriority]

    def as_json(self) -> dict:
        """The document of the `priority` request and `shrprio --json` (man/shrprio.1)."""
        return {
            "host": self.host,
            "cycle": self.cycle,
            "time": self.time,
            "depth": self.depth,
            "base": 200,
            "lnodes": [p.as_json() for p in self.lnodes],
        }


def published_priorities(
    engine: Engine, host: str, remote: Mapping[str, float] | None = None
) -> Priorities:
    """Every leaf lnode `host` published, with its tuple and flat priority, highest
    priority first (ties by name).  NotFound when the host published nothing."""
    head, cols = LnodeStore(engine, host).read_columns()
    if head is None or not len(cols["uid"]):
        raise NotFound(f"--host {host}: nothing published for it: is shrdaemon running?")
    with read_connection(engine) as s:
        tree = load_tree(s, head.mode)
        consts = load_consts(s)
    usage = np.zeros(tree.size)
    active = np.zeros(tree.size, dtype=bool)
    for uid, kind, u in zip(
        cols["uid"].tolist(), cols["kind"], cols["usage"].tolist(), strict=True
    ):
        node = 0 if kind == "root" else tree.find_id(int(uid))
        if node is not None and kind != "root":
            usage[node], active[node] = (u if np.isfinite(u) else 0.0), True
    usage = tree.subtree_sum(usage * tree.leaf_mask)
    measured = tree.measured_globally(bool(consts.flags & GLOBALUSAGE))
    other = None
    if remote:
        other = np.array([float(remote.get(n, 0.0)) for n in tree.names])
        other[0] = 0.0
    st = standing(
        tree, usage, active, even=consts.idleshare == "even", measured=measured, remote=other
    )
    leaves = np.flatnonzero(active & tree.leaf_mask)
    devs, digits, prio = st.deviations(leaves), st.digits(leaves), st.priority(leaves)
    out = [
        LnodePriority(
            tree.names[n],
            int(tree.ids[n]),
            Kind(int(tree.kinds[n])).label,
            [round(float(d), 6) for d in devs[i]],
            digits[i].tolist(),
            prio[i],
        )  # fmt: skip
        for i, n in enumerate(leaves.tolist())
    ]
    out.sort(key=lambda p: (-p.priority, p.name))
    return Priorities(host, int(head.cycle), float(head.time), st.depth, out)
