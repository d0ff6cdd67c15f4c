"""The site as the UDB holds it: every host that published a lnode table, and every lnode
active on any of them with its usage summed over the hosts (shrview --site, shrinfo).

The records (`SiteHost`, `SiteLnode`) are fairshare.core.site's; this module reads them.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import Engine, select

from fairshare.core.consts import decay
from fairshare.core.site import SiteHost, SiteLnode
from udb import tables
from udb.session import read_connection


def read_site(
    engine: Engine, now: float, halflife: float
) -> tuple[list[SiteHost], list[SiteLnode]]:
    """The site: every host that published a table, and every lnode active on any of
    them with its usage summed over hosts (see `SiteLnode`), parents before children."""
    cycles, lnodes, entries = (
        tables.lnode_cycles.c,
        tables.lnodes.c,
        tables.entries.c,
    )
    with read_connection(engine) as s:
        heads = s.execute(
            select(cycles.host, cycles.cpus, cycles.running, cycles.time, cycles.delivered)
        ).all()
        # Each lnode with its entry's stored usage (a leaf's; a group's is not used), in
        # one query: asking for 100,000 leaves' entries by uid took seconds.
        rows = s.execute(
            select(
                lnodes.host, lnodes.node, lnodes.parent, lnodes.name, lnodes.uid, lnodes.kind,
                lnodes.level, lnodes.shares, lnodes.usage, lnodes.stored, lnodes.nrun, lnodes.cpu,
                entries.shusage, entries.shextime,
            )
            .outerjoin(tables.entries, entries.uid == lnodes.uid)
            .order_by(lnodes.host, lnodes.node)
        ).all()  # fmt: skip
    delivered = {h.host: h.delivered or 0.0 for h in heads}
    hosts = [SiteHost(h.host, h.cpus, bool(h.running), h.time) for h in heads]
    key_of = {(host, node): (kind, uid) for host, node, _, _, uid, kind, *_ in rows}
    acc: dict[tuple[str, int], dict] = {}
    for host, _, parent, name, uid, kind, level, shares, used, written, nrun, cpu, us, t in rows:
        key = (kind, uid)
        a = acc.get(key)
        if a is None:
            a = acc[key] = {
                "name": name, "uid": uid, "kind": kind, "level": level,
                "parent": key_of.get((host, parent)), "shares": shares, "owed": 0.0, "nrun": 0,
                "cpus": {}, "stored": (0.0, now) if us is None else (us, t),
            }  # fmt: skip
        a["owed"] += max(used - (used if written is None else written), 0.0)
        a["nrun"] += nrun
        a["cpus"][host] = cpu * delivered.get(host, 0.0)
    leaves = [key for key, a in acc.items() if a["kind"] not in ("root", "group")]
    kept = np.array([acc[key]["stored"] for key in leaves], dtype=float).reshape(-1, 2)
    owed = np.array([acc[key]["owed"] for key in leaves], dtype=float)
    aged = kept[:, 0] * decay(now - kept[:, 1], halflife) + owed
    usage = dict(zip(leaves, aged.tolist(), strict=True))
    # Groups and the root: the sum of their leaves', children listed after their parent.
    for key, u in list(usage.items()):
        parent = acc[key]["parent"]
        while parent is not None and parent in acc:
            usage[parent] = usage.get(parent, 0.0) + u
            parent = acc[parent]["parent"]
    children: dict = {}
    for key, a in acc.items():
        children.setdefault(a["parent"], []).append(key)
    out: list[SiteLnode] = []
    stack = sorted(children.get(None, []), key=lambda k: acc[k]["name"], reverse=True)
    while stack:
        key = stack.pop()
        a = acc[key]
        out.append(
            SiteLnode(
                key,
                a["name"],
                a["uid"],
                a["kind"],
                a["level"],
                a["parent"],
                a["shares"],
                usage.get(key, 0.0),
                a["nrun"],
                a["cpus"],
            )  # fmt: skip
        )
        below = children.get(key)
        if below:  # not a leaf
            stack.extend(sorted(below, key=lambda k: acc[k]["name"], reverse=True))
    return hosts, out


def published_hosts(engine: Engine) -> list[str]:
    """The hosts that have a published lnode table in the UDB, by name."""
    with read_connection(engine) as s:
        cycles = tables.lnode_cycles
        return list(s.scalars(select(cycles.c.host).order_by(cycles.c.host)))
