"""shrtree's report (the static analysis of the share tree) and its renderers.

`analyse_tree` is pure: it takes the UDB's entries, the account registry, the
constants and the time, and returns a `TreeReport`; `render_tree`,
`render_problems` and `report_json` turn that into the guide's section
4.4.11.3 displays or JSON.

The figures, all fractions 0..1:

- system_share: the node's m_share with every leaf of the tree active (the
  static entitlement the guide describes).
- group_share: the node's shares over the sum of its siblings' shares.
- system_usage: the node's decayed usage (for a group, the sum over the leaves
  below it) over all leaves' decayed usage, where a leaf's decayed usage is its
  shusage aged from shextime to `now`: shusage x 0.5 ** ((now - shextime) / halflife).

Entries that belong in the tree but cannot reach ROOT (Mg, Ng, Cy, Or) are
listed after the tree with level None.
"""

from __future__ import annotations

import operator
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from rich.console import Console

from fairshare.consts import decay
from fairshare.display import columns, octal, percent
from fairshare.tree import Kind, build_tree_columns
from udb.check import (
    DEFAULT_MAXLEVELS,
    ERROR,
    WARNING,
    EntryColumns,
    Problem,
    check_columns,
    count_by_kind,
    role_of,
)
from udb.errors import NotFound
from udb.models import ROOT_UID, SHF_ACCOUNT, SHF_GROUP

#: The name the root of the share tree goes by in displays and JSON.
ROOT_NAME = "ROOT"

#: Status letter per kind (the guide prints G for groups).
STATUS_LETTER = {"group": "G", "user": "U", "account": "A", "idle": "I"}


@dataclass(slots=True)
class NodeReport:
    """One row of the share tree display."""

    name: str
    id: int
    level: int | None  # ROOT 0; None when detached from the tree
    kind: str  # "group", "user", "account" or "idle"
    parent: str | None  # the parent node's name (ROOT_NAME at level 1); None for ROOT/detached
    resgrp: int
    shares: int
    system_share: float
    group_share: float
    system_usage: float
    shflags: int
    codes: tuple[str, ...]

    @property
    def status(self) -> str:
        """The Status column: the kind's letter and the problem codes, e.g. "G Nc Zs"."""
        return " ".join((STATUS_LETTER[self.kind], *self.codes))


@dataclass(frozen=True)
class TreeReport:
    """Everything shrtree shows, for the whole tree or the subtree under `node`."""

    udb: str
    mode: str  # "user" (By UID) or "account" (By Account)
    maxgroups: int
    node: str | None  # top of the analysed subtree; None for ALL
    nodes: list[NodeReport]  # the tree depth first, siblings by name, then detached entries
    problems: list[Problem]  # in display order: UDB-wide first, then by node
    group_count: int
    account_count: int
    user_count: int

    @property
    def warnings(self) -> int:
        return sum(p.severity == WARNING for p in self.problems)

    @property
    def errors(self) -> int:
        return sum(p.severity == ERROR for p in self.problems)


def aged_usage(shusage: np.ndarray, shextime: np.ndarray, now: float, halflife: float):
    """Stored usage decayed to `now`: shusage x 0.5 ** ((now - shextime) / halflife).

    Units: charge units; times in seconds.  A shextime in the future counts as now.
    """
    age = now - np.asarray(shextime, dtype=float)
    return np.asarray(shusage, dtype=float) * decay(age, halflife)


def analyse_tree(
    cols: EntryColumns,
    accounts: Mapping[int, str],
    *,
    now: float,
    mode: str = "user",
    maxlevels: int = DEFAULT_MAXLEVELS,
    halflife: float = 3600.0,
    node: str | None = None,
    udb: str = "",
) -> TreeReport:
    """The static analysis of the share tree of the entries `cols` (see the module docstring).

    `cols` must carry shusage and shextime (`load_entry_columns`, or
    `EntryColumns.of(entries)`); `now` is in seconds since the epoch, `halflife`
    in seconds.  `node` limits the report (rows, counts and problems) to the
    subtree under that entry; NotFound if no node of the tree has that name.
    """
    tree = build_tree_columns(cols.name, cols.uid, cols.resgrp, cols.shares, cols.shflags, mode)
    problems = check_columns(cols, accounts, mode, maxlevels)

    if node is None or node == ROOT_NAME:
        top, node = 0, None
    else:
        top = tree.find(node)
        if top is None:
            why = next((d.reason for d in tree.detached if d.name == node), None)
            raise NotFound(
                f"--node {node}: "
                + (f"entry is detached from the share tree ({why})" if why else "no such node")
                + (" in Share by Account mode" if mode == "account" and why is None else "")
            )

    # Entry index of every node (the root has none) and of every detached entry.
    entry = tree.source
    detached = tree.detached_source if top == 0 else np.zeros(0, dtype=np.int64)
    shusage = np.asarray(cols.shusage, dtype=float)
    aged = aged_usage(shusage, np.asarray(cols.shextime, dtype=float), now, halflife)
    usage = np.concatenate(([0.0], aged[entry[1:]]))  # the root has no entry
    below = tree.subtree_sum(np.where(tree.leaf_mask, usage, 0.0))
    flags = np.asarray(cols.shflags, dtype=np.int64)
    detached_leaf = (flags[detached] & SHF_GROUP) == 0
    total = float(below[0]) + float(aged[detached][detached_leaf].sum())
    fraction = below / total if total > 0 else np.zeros(tree.size)

    codes: dict[str, list[str]] = defaultdict(list)
    for p in problems:
        if p.uid is not None:
            codes[p.name].append(p.code)

    order = tree.preorder(top)
    kind_label = {int(k): k.label for k in Kind}
    kind_label[int(Kind.ROOT)] = "group"
    names = [ROOT_NAME, *tree.names[1:]]
    node_flags = [SHF_GROUP, *flags[entry[1:]].tolist()]
    resgrps = [ROOT_UID, *(cols.resgrp[e] for e in entry[1:].tolist())]
    parent_names = [None, *(names[p] for p in tree.parent[1:].tolist())]
    ids, levels, kinds = tree.ids.tolist(), tree.level.tolist(), tree.kinds.tolist()
    shares = tree.shares.astype(np.int64).tolist()
    ms, gs, us = tree.m_shares().tolist(), tree.group_shares().tolist(), fraction.tolist()
    no_codes = ()
    node_codes = [no_codes, *(tuple(codes[n]) if n in codes else no_codes for n in names[1:])]
    # Column by column in display order (C-level picks), then one NodeReport per node.
    pick = operator.itemgetter(*order) if len(order) > 1 else (lambda seq: (seq[order[0]],))
    nodes = list(
        map(
            NodeReport,
            pick(names),
            pick(ids),
            pick(levels),
            pick([kind_label[k] for k in kinds]),
            pick(parent_names),
            pick(resgrps),
            pick(shares),
            pick(ms),
            pick(gs),
            pick(us),
            pick(node_flags),
            pick(node_codes),
        )
    )
    for e in detached.tolist():
        name = cols.name[e]
        nodes.append(
            NodeReport(
                name,
                cols.uid[e],
                None,
                role_of(cols.shflags[e], cols.uid[e]),
                None,
                cols.resgrp[e],
                cols.shares[e],
                0.0,
                0.0,
                float(aged[e]) / total if total > 0 else 0.0,
                cols.shflags[e],
                tuple(codes.get(name, ())),
            )
        )

    # Problems in display order; with --node only those of the subtree's entries.
    position = {n.name: k for k, n in enumerate(nodes)}
    if node is None:
        shown = problems
    else:
        shown = [p for p in problems if p.uid is not None and p.name in position]
    if shown:
        # sorted(shown, key=(uid is not None, position, name)), by a stable lexsort.
        last = len(position)
        keys = (
            np.array([p.name for p in shown]),
            np.array([position.get(p.name, last) for p in shown], dtype=np.int64),
            np.array([p.uid is not None for p in shown]),
        )
        shown = [shown[k] for k in np.lexsort(keys).tolist()]

    kind_count = Counter(n.kind for n in nodes)
    user_count = kind_count["user"] + kind_count["idle"]
    if mode == "account":
        in_view = {n.id for n in nodes if n.kind == "account"}
        user_count += sum(
            1
            for f, acids, name in zip(cols.shflags, cols.acids, cols.name, strict=True)
            if not f & (SHF_GROUP | SHF_ACCOUNT)
            and name not in position
            and (node is None or (acids and acids[0] in in_view))
        )
    return TreeReport(
        udb=udb,
        mode=mode,
        maxgroups=maxlevels,
        node=node,
        nodes=nodes,
        problems=shown,
        group_count=kind_count["group"],
        account_count=kind_count["account"],
        user_count=user_count,
    )


# -- selection ---------------------------------------------------------------------------


def visible_nodes(report: TreeReport, long: bool = False, errors: bool = False):
    """The rows a display shows: groups only unless `long`; if `errors`, every node with codes."""
    if errors:
        return [n for n in report.nodes if n.codes]
    return [n for n in report.nodes if long or n.kind == "group"]


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


def tree_lines(nodes: list[NodeReport]) -> list[str]:
    """The tree table: Lv, Name (indented by level), ID, shares, usage, Status, Flags."""
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
    return columns(header, rows, right=(True, False, True, True, True, True, False, True))


def problem_lines(report: TreeReport) -> list[tuple[str, str]]:
    """The -e listing as (line, severity) pairs: Type, Name, ID, Status, Description."""
    by_name = {n.name: n for n in report.nodes}
    rows = []
    for p in report.problems:
        n = by_name.get(p.name)
        status = STATUS_LETTER[n.kind] if n else "-"
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


def render_tree(report: TreeReport, console: Console, long: bool = False) -> None:
    """Print the share tree display (groups only unless `long`)."""
    lines = header_lines(report, long) + tree_lines(visible_nodes(report, long))
    console.out("\n".join(lines), highlight=False)


def render_problems(report: TreeReport, console: Console, long: bool = False) -> None:
    """Print the -e display: the header, then one line per problem."""
    console.out("\n".join(header_lines(report, long)), highlight=False)
    for line, severity in problem_lines(report):
        console.out(line, style=_STYLE[severity] or None, highlight=False)


# -- JSON --------------------------------------------------------------------------------


def report_json(report: TreeReport, long: bool = False, errors: bool = False) -> dict:
    """The --json document (shape documented in man/shrtree.8), for orjson.dumps."""
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
        "problems": [
            {
                "code": p.code,
                "severity": p.severity,
                "name": p.name,
                "uid": p.uid,
                "message": p.message,
                "detail": p.detail,
            }
            for p in report.problems
        ],
        "warnings": report.warnings,
        "errors": report.errors,
    }
