"""shrview --site: the whole site at once, every lnode's usage summed over the hosts that
share the UDB and the hosts it runs on (the data: fairshare.store.site.read_site)."""

from __future__ import annotations

from collections.abc import Sequence

from fairshare.core.site import SiteHost, SiteLnode
from fairshare.display import columns


def site_lines(hosts: Sequence[SiteHost], lnodes: Sequence[SiteLnode], now: float) -> list[str]:
    """The site display: one line per host, then one per lnode (indented by level) with
    its shares, runnable processes on all hosts, site-wide usage, the CPUs it received
    in the hosts' last cycles, its part of all the CPU the site delivered, and its hosts."""
    total = sum(sum(v.cpus.values()) for v in lnodes if v.kind not in ("root", "group"))
    lines = [f"Site: {len(hosts)} hosts sharing the UDB"]
    for h in hosts:
        state = "running" if h.running else "stopped"
        cpus = f"{h.cpus:g} CPUs" if h.cpus is not None else "CPUs unknown"
        lines.append(f"  {h.name}: {cpus}, {state}, last cycle {now - h.time:.0f} s ago")
    lines.append("")
    rows = []
    for v in lnodes:
        cpu = sum(v.cpus.values())
        rows.append(
            [
                "  " * v.level + v.name,
                v.kind,
                f"{v.shares:g}",
                str(v.nrun),
                f"{v.usage:.4g}",
                f"{cpu:.2f}",
                f"{100 * cpu / total:.1f}" if total > 0 else "-",
                ",".join(v.hosts),
            ]
        )
    head = [["Name", "Kind", "Shares", "Nrun", "Usage", "CPUs", "Site%", "Hosts"]]
    return lines + columns(head, rows, [False, False, True, True, True, True, True, False])


def site_json(hosts: Sequence[SiteHost], lnodes: Sequence[SiteLnode], now: float) -> dict:
    """The site display as JSON (shape in shrview(1))."""
    return {
        "hosts": {
            h.name: {"cpus": h.cpus, "running": h.running, "age": now - h.time} for h in hosts
        },
        "lnodes": [
            {
                "name": v.name,
                "uid": v.uid,
                "kind": v.kind,
                "level": v.level,
                "shares": v.shares,
                "nrun": v.nrun,
                "usage": v.usage,
                "cpus": v.cpus,
                "hosts": v.hosts,
            }
            for v in lnodes
        ],
    }
