"""shrinfo's displays: a profile (fairshare.report.profile) as the lines of Kay-Lauder's
Figure 7 and their explanation, or as JSON; Figure 7 over every active leaf (-a);
`site_note` says what other hosts' usage does here (GLOBALUSAGE).

Shares are printed as percentages with three significant digits, usage in charge
units, durations for people ("12 min 30 s").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from fairshare.core.site import SiteLnode
from fairshare.display import columns
from fairshare.report.lnodes import ViewLnode
from fairshare.report.profile import BEHIND_TOLERANCE, Profile
from fairshare.report.published import Snapshot


def duration_text(seconds: float) -> str:
    """A duration for people: "45 s", "12 min 30 s", "3 h 5 min", "2 d 4 h"."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def _share(x: float) -> str:
    """A share as Figure 7 prints it: three significant digits, e.g. 0.875%, 12.5%."""
    return f"{100 * x:.3g}%"


def _usage(u: float) -> str:
    return f"{u:.0f}" if u >= 100 else f"{u:.3g}"


def _figure7_cells(
    name: str, shares: float, m_share: float, e_share, usage: float, if_started: bool = False
) -> list[str]:
    """Figure 7's cells; an E-share the lnode would get if it alone started (it wants no
    CPU) in parentheses, "-" for none."""
    eshr = _share(e_share) if e_share is not None else "-"
    if if_started:
        eshr = f"({eshr})"
    return [
        name,
        f"Shares: {shares:g}",
        f"Share: {_share(m_share)}",
        f"E-share: {eshr}",
        f"Usage: {_usage(usage)}",
    ]


def figure7_lines(leaves: Sequence[ViewLnode]) -> list[str]:
    """Kay-Lauder's Figure 7: one line per lnode (name, shares, machine share, effective
    share, usage), in aligned columns; the effective share of an lnode that wants no
    CPU in parentheses (what it would get if it alone started)."""
    rows = [
        _figure7_cells(v.name, v.shares, v.m_share, v.e_share, v.usage, v.eshr_if_started)
        for v in leaves
    ]
    return columns([], rows, [False] * 5)


def figure7_json(leaves: Sequence[ViewLnode]) -> list[dict]:
    """Figure 7 as JSON-ready dicts (shape in shrinfo(1))."""
    return [
        {
            "name": v.name,
            "uid": v.uid,
            "kind": v.kind,
            "shares": v.shares,
            "m_share": v.m_share,
            "e_share": v.e_share,
            "eshr_if_started": v.eshr_if_started,
            "usage": v.usage,
            "background": v.background,
        }
        for v in leaves
    ]


def profile_lines(p: Profile) -> list[str]:
    """The profile as lines: Figure 7's line, the explanation, then Slurm's figures."""
    lines = _explanation_lines(p)
    if p.fairshare_factor is not None:
        lines.append(
            f"  Slurm (from stored usage): normalized shares {p.normalized_shares:.6f}, "
            f"normalized usage {p.normalized_usage:.6f}, effective usage "
            f"{p.effective_usage:.6f}, fair-share factor {p.fairshare_factor:.6f}"
        )
    return lines


def _explanation_lines(p: Profile) -> list[str]:
    cells = _figure7_cells(p.name, p.shares, p.m_share, p.e_share, p.usage, p.eshr_if_started)
    lines = ["  ".join(cells)]
    if p.eshr_if_started:
        lines.append(
            "  it wants no CPU: (E-share) is what it would get if it alone started, not a "
            "share it is getting"
        )
    if not p.active:
        lines.append(
            "  no active lnode (no processes): Share is its static machine share with every "
            "user active, Usage its stored usage aged to now"
        )
    if p.halflife_from is not None:  # some group sets its own half-life: say which rules
        where = f"set by {p.halflife_from}" if p.halflife_from else "the global one, shradmin -K"
        lines.append(f"  usage half-life {duration_text(p.halflife)} ({where})")
    for depth, g in enumerate(p.groups):
        if p.active:
            lines.append(
                f"  {'  ' * depth}in group {g.name}: Rshr {_share(g.m_share)}, "
                f"Eshr {_share(g.e_share)}" + _delivered(g.got_minute, g.target)
            )
        else:
            lines.append(f"  {'  ' * depth}in group {g.name}: static share {_share(g.m_share)}")
    if not p.active:
        return lines
    lines += _delivery_lines(p)
    if p.kind == "group":
        return lines
    if p.background or p.m_share <= 0:
        why = "it has no machine share" if p.m_share <= 0 else "its usage reached MAXUSAGE"
        lines.append(f"  a background lnode ({why}): it runs only on CPU nobody else wants")
    elif p.fair_usage is None:
        lines.append("  no other lnode wants CPU: it may use the machine whatever its usage")
    elif p.idle_seconds:
        lines.append(
            f"  idle for {duration_text(p.idle_seconds)} its usage would decay to its fair "
            f"level {_usage(p.fair_usage)} (half-life {duration_text(p.halflife)})"
        )
    else:
        lines.append(f"  its usage is at or below its fair level {_usage(p.fair_usage)}")
    return lines


def _delivered(got_minute: float | None, target: float | None) -> str:
    """A group line's end: what it got over the last minute and its fair target ("" when
    not known)."""
    if got_minute is None or target is None:
        return ""
    return f"; got {_share(got_minute)} over the last minute, fair target {_share(target)}"


def _delivery_lines(p: Profile) -> list[str]:
    """An active lnode's lines on what it received against its fair target, the group
    that limits its effective share (if any), and the lnode, itself or a group above
    it, furthest behind its fair target (or that none is)."""
    limited = []
    if p.limited_by is not None:
        limited.append(
            f"  limited by group {p.limited_by}: its effective share is {p.limit_ratio:.2f} "
            "of its machine share"
        )
    if p.got_minute is None or p.target is None or p.got is None:
        return [
            *limited,
            "  what it and its groups received is not in this table (its daemon is older "
            "than those figures)",
        ]
    lines = [
        f"  it got {_share(p.got_minute)} over the last minute ({_share(p.got)} in the last "
        f"cycle), fair target {_share(p.target)}",
        *limited,
    ]
    if p.behind is None:
        lines.append(
            "  it and the groups above it got their fair targets over the last minute "
            f"(within {100 * BEHIND_TOLERANCE:g} point)"
        )
        return lines
    who = "it" if p.behind == p.name else f"group {p.behind}"
    g = next((g for g in p.groups if g.name == p.behind), None)
    got, target = (p.got_minute, p.target) if g is None else (g.got_minute, g.target)
    lines.append(
        f"  {who} got {100 * got:.1f}% over the last minute against a fair target of "
        f"{100 * target:.1f}%: {p.behind_points:.1f} points behind"
    )
    return lines


def profile_json(p: Profile) -> dict:
    """The profile as a JSON-ready dict (shape in shrinfo(1))."""
    doc = asdict(p)
    doc["groups"] = [asdict(g) for g in p.groups]
    if p.halflife_from is None:  # no entry sets its own half-life: the shape as before
        del doc["halflife_from"]
    return doc


def site_note(me: SiteLnode, snap: Snapshot, profile: Profile) -> tuple[str, dict]:
    """The line saying that `me`'s usage on other hosts (fairshare.report.info.site_usage)
    lowers its share on `snap`'s host, and the same as JSON (site-wide usage, CPUs per
    host)."""
    elsewhere = {h: c for h, c in me.cpus.items() if h != snap.host}
    here = me.cpus.get(snap.host, 0.0)
    there = ", ".join(f"{h} {c:.2f}" for h, c in sorted(elsewhere.items()))
    low = profile.e_share is not None and profile.e_share < profile.m_share
    line = (
        f"  GLOBALUSAGE: it also runs on other hosts (CPUs: {there}; {here:.2f} here on "
        f"{snap.host}); its site-wide usage {me.usage:.4g} counts here"
        + (", which is why its E-share is below its Share" if low else "")
    )
    doc = {"usage": me.usage, "cpus": me.cpus, "low_because_of_other_hosts": low}
    return line, doc
