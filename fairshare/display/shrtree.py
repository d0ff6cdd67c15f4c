"""shrtree's displays: a `TreeReport` (fairshare.report.sharetree) as the guide's
section 4.4.11.3 share tree display, its -e problem listing, or the --json document."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fairshare.display import columns, octal, percent
from fairshare.report.sharetree import (
    STATUS_LETTER,
    MountReport,
    NodeReport,
    TreeReport,
    status_number,
    visible_nodes,
)
from udb.check import ERROR, WARNING, count_by_kind

if TYPE_CHECKING:  # only -e draws with rich (fairshare.cli.shrtree imports it then)
    from rich.console import Console

# -- text --------------------------------------------------------------------------------


def header_lines(report: TreeReport, long: bool) -> list[str]:
    """The guide's header block: UDB path, Analyzed, Format, ..., one line per code."""
    members = "accounts" if report.mode == "account" else "users"
    fields = [
        ("UDB path:", report.udb),
        ("Analyzed:", "By Account" if report.mode == "account" else "By UID"),
        ("Format:", f"Groups and {members}" if long else "Groups only"),
        ("Maxgroups:", str(report.maxgroups)),
        ("Node:", report.node or "ALL"),
        ("Group Count:", str(report.group_count)),
        ("Account Count:", str(report.account_count)),
        ("User Count:", str(report.user_count)),
        ("Warnings:", str(report.warnings)),
        ("Errors:", str(report.errors)),
    ]
    for severity, code, message, count in count_by_kind(report.problems):
        label = "Warning Count:" if severity == WARNING else "Error Count:"
        fields.append((label, f"{count} ({code}) {message}"))
    width = max(len(k) for k, _ in fields) + 1
    return ["DISPLAY OF SHARE TREE", "", *(f"{k:<{width}}{v}" for k, v in fields), ""]


def short_duration(seconds: float) -> str:
    """A half-life in one word: "5d", "8h", "90m", "45s" (the largest unit it is a whole
    number of), else seconds ("4000.5s")."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def tree_lines(nodes: list[NodeReport], long: bool = False, halflives: bool = False) -> list[str]:
    """The tree table: Lv, Name (indented by level), ID, shares, usage, Status, Flags;
    `long` (-l) adds Slurm's sshare figures (Norm Shares, Norm Usage, Eff Usage, Fair
    Share), with six decimals as sshare prints them; `halflives` (some group sets its
    own) a last column, each node's usage half-life."""
    header = [
        ("", "", "", "System", "Group", "System", "", ""),
        ("Lv", "Name", "ID", "Share", "Share", "Usage", "Status", "Flags"),
    ]
    rows = [
        (
            "-" if n.level is None else str(n.level),
            ("  " * (n.level or 0)) + n.name,
            str(n.id),
            percent(n.system_share),
            percent(n.group_share),
            percent(n.system_usage),
            n.status,
            octal(n.shflags),
        )
        for n in nodes
    ]
    right = (True, False, True, True, True, True, False, True)
    if long:
        header = [h + s for h, s in zip(header, _SSHARE_HEADER, strict=True)]
        rows = [
            row + (f"{n.normalized_shares:.6f}", f"{n.normalized_usage:.6f}",
                   f"{n.effective_usage:.6f}", f"{n.fairshare_factor:.6f}")
            for row, n in zip(rows, nodes, strict=True)
        ]  # fmt: skip
        right += (True, True, True, True)
    if halflives:
        header = [header[0] + ("Half",), header[1] + ("life",)]
        rows = [row + (short_duration(n.halflife),) for row, n in zip(rows, nodes, strict=True)]
        right += (True,)
    return columns(header, rows, right=right)


#: The sshare columns of `shrtree -l` (Slurm's names).
_SSHARE_HEADER = (("Norm", "Norm", "Eff", "Fair"), ("Shares", "Usage", "Usage", "Share"))


def problem_lines(report: TreeReport) -> list[tuple[str, str]]:
    """The -e listing as (line, severity) pairs: Type, Name, ID, Status, Description."""
    by_name = {n.name: n for n in report.nodes}
    rows = []
    for p in report.problems:
        n = by_name.get(p.name)
        # The guide's number (4.4.11.3), then the kind's letter as the tree shows it.
        status = f"{status_number(n.kind, n.codes)} {STATUS_LETTER[n.kind]}" if n else "-"
        text = f"{p.code}: {p.message}" + (f" ({p.detail})" if p.detail else "")
        kind = "**WARN***" if p.severity == WARNING else "**ERROR**"
        rows.append((kind, p.name, "-" if p.uid is None else str(p.uid), status, text))
    lines = columns(
        [("Type", "Name", "ID", "Status", "Description")],
        rows,
        right=(False, False, True, False, False),
    )
    return [(lines[0], "")] + [
        (line, p.severity) for line, p in zip(lines[1:], report.problems, strict=True)
    ]


_STYLE = {WARNING: "yellow", ERROR: "bold red", "": ""}


def display_lines(report: TreeReport, long: bool = False) -> list[str]:
    """The share tree display (groups only unless `long`): plain lines, printed as they
    are (rich's console took 1.2 s to pass 100,000 unstyled lines through its Text)."""
    nodes = visible_nodes(report, long)
    lines = header_lines(report, long) + tree_lines(nodes, long, report.own_halflives)
    return lines + mount_lines(report.mounts)


def mount_lines(mounts: Sequence[MountReport]) -> list[str]:
    """After the tree, each mounted policy: where it comes from, when it was last
    fetched, and a failed last attempt (the last good version is what the tree shows)."""
    if not mounts:
        return []
    out = ["", "MOUNTED POLICIES (read-only here)"]
    for m in mounts:
        fetched = _when(m.fetched) if m.fetched is not None else "never"
        out.append(f"{m.name}: {m.policy} from {m.source}, last fetched {fetched}")
        if m.error:
            out.append(
                f"{' ' * len(m.name)}  last try {_when(m.tried)} failed, the last good "
                f"version kept: {m.error}"
            )
    return out


def _when(epoch: float | None) -> str:
    return "?" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def render_problems(report: TreeReport, console: Console, long: bool = False) -> None:
    """Print the -e display: the header, then one line per problem in its severity's
    colour where `console` colours.  Each severity's escape codes are the console's own
    (a marker captured in that style) and the lines go out in one write, as console.out
    would have printed them one by one: that took 12 s for 100,000 problems."""
    from rich.control import strip_control_codes  # what rich strips from a line it prints

    marks = {}
    for severity, style in _STYLE.items():
        with console.capture() as captured:
            console.out("\0", style=style or None, highlight=False, end="")
        marks[severity] = captured.get().split("\0")
    lines = header_lines(report, long) + [
        f"{before}{line}{after}"
        for line, severity in problem_lines(report)
        for before, after in (marks[severity],)
    ]
    console.file.write(strip_control_codes("\n".join(lines)) + "\n")
    console.file.flush()


# -- JSON --------------------------------------------------------------------------------


def report_json(report: TreeReport, long: bool = False, errors: bool = False) -> dict:
    """The --json document (shape documented in man/shrtree.8), for udb.jsonout."""
    return {
        "udb": report.udb,
        "analyzed": "account" if report.mode == "account" else "uid",
        "maxgroups": report.maxgroups,
        "node": report.node,
        "group_count": report.group_count,
        "account_count": report.account_count,
        "user_count": report.user_count,
        # NodeReports themselves: orjson writes a dataclass as the object of its
        # fields in order (name, id, ..., codes as an array), the documented shape,
        # without a dict per node.
        "nodes": visible_nodes(report, long, errors),
        # Problems themselves too: their fields are the documented keys, in order
        # (code, severity, name, uid, message, detail).
        "problems": report.problems,
        "warnings": report.warnings,
        "errors": report.errors,
        # MountReports themselves: name, source, policy, fetched, tried, error.
        "mounts": list(report.mounts),
    }


#: shrtree -P's columns: Slurm sshare's names where the meaning is the same (sshare -P
#: sites' scripts read them), then this suite's own.  (heading, the --json node key)
PARSABLE = (
    ("RawShares", "shares"),
    ("NormShares", "normalized_shares"),
    ("NormUsage", "normalized_usage"),
    ("EffectvUsage", "effective_usage"),
    ("FairShare", "fairshare_factor"),
    ("GroupShare", "group_share"),
    ("Kind", "kind"),
    ("Level", "level"),
)


def parsable_lines(report: TreeReport, long: bool = False, errors: bool = False) -> list[str]:
    """The --json document's nodes as sshare -P prints its rows: a heading, then one
    line a node, fields separated by ``|``; a group's name under Account (its parent's
    for a user or account, whose name goes under User)."""
    lines = ["|".join(["Account", "User", *(h for h, _k in PARSABLE)])]
    for n in visible_nodes(report, long, errors):
        group = n.kind == "group"
        account = n.name if group else (n.parent or "")
        user = "" if group else n.name
        values = [_plain(getattr(n, k)) for _h, k in PARSABLE]
        lines.append("|".join([account, user, *values]))
    return lines


def _plain(value) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)
