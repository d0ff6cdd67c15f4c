"""shrtree's report: the static analysis of the share tree defined in the UDB.

`load_tree_report` reads the entries, the account registry and the constants and
calls `analyse_tree`, which is pure (the time comes in as an argument).

`analyse_tree` returns a `TreeReport`: one `NodeReport` per node, depth first with
siblings by name (`_tree_rows`), then the entries detached from the tree
(`_detached_rows`), the problems in display order (`_shown_problems`) and the counts;
`visible_nodes` picks the rows a display shows.  fairshare.display.shrtree renders it.

The figures, all fractions 0..1:

- system_share: the node's m_share with every leaf of the tree active (the
  static entitlement the guide describes).
- group_share: the node's shares over the sum of its siblings' shares.
- system_usage: the node's decayed usage (for a group, the sum over the leaves
  below it) over all leaves' decayed usage, where a leaf's decayed usage is its
  shusage aged from shextime to `now`: shusage x 0.5 ** ((now - shextime) / halflife).
- normalized_shares, normalized_usage, effective_usage, fairshare_factor: Slurm's
  classic sshare figures (fairshare.core.sshare) from the same usage, with
  the dampening factor in force, whatever the policy (normalized_usage is system_usage).

Entries that belong in the tree but cannot reach ROOT (Mg, Ng, Cy, Or) are
listed after the tree with level None.  To add a per-node figure: a field of
`NodeReport` (its order is the JSON's) and its column in `_tree_rows`.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat

import numpy as np

from fairshare.core.lnode import decayed_usage
from fairshare.core.sshare import Sshare, sshare
from fairshare.core.tree import Kind, ShareTree, build_tree_columns, default_acid, tree_index
from fairshare.store.config import load_consts
from udb.check import (
    DEFAULT_MAXLEVELS,
    ERROR,
    WARNING,
    EntryColumns,
    Problem,
    check_columns,
    configured_maxlevels,
    load_accounts,
    load_entry_columns,
    role_of,
)
from udb.errors import NotFound
from udb.remote import Reader
from udb.rules import ROOT_UID, SHF_ACCOUNT, SHF_GROUP
from udb.session import display_name, read_connection, resolve_url

#: The name the root of the share tree goes by in displays and JSON.
ROOT_NAME = "ROOT"

#: The kind a row shows for each Kind value (ROOT is a group).
KIND_LABELS = np.array(["group", *(k.label for k in list(Kind)[1:])], dtype=object)

#: Status letter per kind (the guide prints G for groups).
STATUS_LETTER = {"group": "G", "user": "U", "account": "A", "idle": "I"}

#: The bits of shrtree -e's Status number, which the guide prints in hex (4.4.11.3: Serv,
#: a group with Nc, is 10; the group Unknown with Zs 1000; the user unknown with Zs
#: 1001; Country, a group with Nc and Zs, 1010).  The guide shows only these three
#: bits: 1 for a node that is not a group, 10 for Nc, 1000 for Zs; the others are ours,
#: in the free places between them.
STATUS_BIT = {
    "leaf": 0x1, "Rt": 0x2, "Pw": 0x4, "Ac": 0x8, "Nc": 0x10, "Mg": 0x20, "Ng": 0x40,
    "Cy": 0x80, "Or": 0x100, "Dp": 0x200, "Fl": 0x400, "Id": 0x800, "Zs": 0x1000,
    "Uk": 0x2000, "Na": 0x4000, "Sh": 0x8000,
}  # fmt: skip


def status_number(kind: str, codes: Sequence[str]) -> str:
    """The guide's Status number of a node of `kind` with problem `codes`, in hex
    (e.g. "1010" for a group with Nc and Zs)."""
    bits = STATUS_BIT["leaf"] if kind != "group" else 0
    for code in codes:
        bits |= STATUS_BIT[code]
    return f"{bits:x}"


# Not slots: orjson writes a dataclass with a __dict__ in less than half the time of
# one with slots (100,000 nodes: 0.05 against 0.12 s), for 0.03 s more to build them.
@dataclass
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
    normalized_shares: float
    normalized_usage: float
    effective_usage: float
    fairshare_factor: float
    shflags: int
    codes: tuple[str, ...]
    halflife: float  # s: the node's usage half-life, its own or inherited (or the global)

    @property
    def status(self) -> str:
        """The Status column: the kind's letter and the problem codes, e.g. "G Nc Zs"."""
        return " ".join((STATUS_LETTER[self.kind], *self.codes))


@dataclass(frozen=True)
class MountReport:
    """A mounted policy (udb.mounts): the mount point's name, where the policy comes
    from (its UDB, password masked, and its group there), when it was last fetched
    whole (epoch s, None: never), and the last attempt's failure (None: it worked),
    which leaves the last good version in place."""

    name: str
    source: str
    policy: str
    fetched: float | None
    tried: float | None
    error: str | None


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
    own_halflives: bool = False  # some group sets its own half-life: shrtree shows them
    delta: float = 4.0  # s, the share cycle (shradmin -R): repeat and continuous modes' pace
    mounts: tuple[MountReport, ...] = ()  # the policies mounted from elsewhere (a grid)

    @cached_property  # asked by the header, the JSON document and the exit status
    def warnings(self) -> int:
        return self._severities[WARNING]

    @cached_property
    def errors(self) -> int:
        return self._severities[ERROR]

    @cached_property
    def _severities(self) -> Counter:
        return Counter(map(operator.attrgetter("severity"), self.problems))


def analyse_tree(
    cols: EntryColumns,
    accounts: Mapping[int, str],
    *,
    now: float,
    mode: str = "user",
    maxlevels: int = DEFAULT_MAXLEVELS,
    halflife: float = 3600.0,
    dampening: float = 1.0,
    node: str | None = None,
    udb: str = "",
    delta: float = 4.0,
) -> TreeReport:
    """The static analysis of the share tree of the entries `cols` (see the module docstring).

    `cols` must carry shusage and shextime (`load_entry_columns`, or
    `EntryColumns.of(entries)`); `now` is in seconds since the epoch, `halflife`
    in seconds; `dampening` Slurm's (Consts.dampening).  `node` limits the report
    (rows, counts and problems) to the subtree under that entry; NotFound if no node
    of the tree has that name.
    """
    tree = build_tree_columns(
        cols.name, cols.uid, cols.resgrp, cols.shares, cols.shflags, mode,
        halflives=cols.halflife or None,
    )  # fmt: skip
    problems = check_columns(cols, accounts, mode, maxlevels)
    top, node = _top_node(tree, node, mode)
    detached = tree.detached_source if top == 0 else np.zeros(0, dtype=np.int64)
    aged = decayed_usage(cols.shusage, cols.shextime, now, entry_halflives(tree, cols, halflife))
    slurm, total = stored_sshare(tree, cols, aged, detached, dampening)
    # Each problem's entry (its index in cols; -1 for a problem of the whole UDB), and
    # each entry's problems' codes.
    entry_of_uid = dict(zip(cols.uid, range(len(cols)), strict=True))
    uids = map(operator.attrgetter("uid"), problems)
    at = np.fromiter(map(entry_of_uid.get, uids, repeat(-1)), np.int64, len(problems))
    codes: list[tuple[str, ...]] = [()] * len(cols)
    for e, p in zip(at.tolist(), problems, strict=True):
        if e >= 0:
            codes[e] = (*codes[e], p.code)
    order = tree.preorder(top)
    nodes = _tree_rows(tree, cols, order, slurm, codes, tree.halflives(halflife))
    usage_of = (lambda e: float(aged[e]) / total) if total > 0 else (lambda e: 0.0)
    nodes += _detached_rows(cols, detached.tolist(), usage_of, codes, halflife)
    # Each entry's row, len(nodes) for none (and in the extra last place, for no entry):
    # what orders the problems, and counts Share by Account's users.
    row_of = np.full(len(cols) + 1, len(nodes), np.int64)
    shown = np.concatenate((tree.source[order], detached))  # each row's entry (ROOT's -1)
    row_of[shown[shown >= 0]] = np.flatnonzero(shown >= 0)
    kind_count = Counter(map(operator.attrgetter("kind"), nodes))
    return TreeReport(
        udb=udb,
        mode=mode,
        maxgroups=maxlevels,
        node=node,
        nodes=nodes,
        problems=_shown_problems(problems, at, row_of[at], len(nodes), node is None),
        group_count=kind_count["group"],
        account_count=kind_count["account"],
        user_count=_user_count(cols, nodes, kind_count, row_of[:-1] < len(nodes), mode, node),
        own_halflives=tree.own_halflives,
        delta=delta,
    )


def stored_sshare(
    tree: ShareTree, cols: EntryColumns, aged: np.ndarray, detached: np.ndarray, dampening: float
) -> tuple[Sshare, float]:
    """(Slurm's sshare figures per node of `tree`, the total usage they are fractions of)
    from the stored usage: `aged` is every entry's shusage aged to now (charge units, by
    entry of `cols`, `tree` built from `cols`), `detached` the detached entries whose
    leaves' usage counts in the total.  A group's usage is the sum of its leaves'.  The
    one computation behind shrtree's and shrinfo's figures (the policy's runs on the
    live usage: fairshare.core.policies.slurm)."""
    usage = np.concatenate(([0.0], aged[tree.source[1:]]))  # the root has no entry
    below = tree.subtree_sum(np.where(tree.leaf_mask, usage, 0.0))
    detached_leaf = (np.asarray(cols.shflags, dtype=np.int64)[detached] & SHF_GROUP) == 0
    total = float(below[0]) + float(aged[detached][detached_leaf].sum())
    return sshare(tree_index(tree), tree.shares, below, dampening, total), total


def _top_node(tree: ShareTree, node: str | None, mode: str) -> tuple[int, str | None]:
    """The node number of --node `node` and its name (0 and None for the whole tree)."""
    if node is None or node == ROOT_NAME:
        return 0, None
    top = tree.find(node)
    if top is None:
        why = next((d.reason for d in tree.detached if d.name == node), None)
        raise NotFound(
            f"--node {node}: "
            + (f"entry is detached from the share tree ({why})" if why else "no such node")
            + (" in Share by Account mode" if mode == "account" and why is None else "")
        )
    return top, node


def entry_halflives(tree: ShareTree, cols: EntryColumns, default: float) -> float | np.ndarray:
    """Each entry's usage half-life (s) to age its stored usage with: its node's (its own
    or its group's, `ShareTree.halflives`), a detached entry's own or `default`; one
    number when no entry sets one."""
    if not tree.own_halflives:
        return default
    out = np.asarray(cols.halflife, dtype=float)
    out = np.where(out > 0, out, default)
    out[tree.source[1:]] = tree.halflives(default)[1:]
    return out


def _tree_rows(
    tree: ShareTree,
    cols: EntryColumns,
    order: np.ndarray,
    slurm: Sshare,
    codes: Sequence,
    halflives: np.ndarray,
) -> list[NodeReport]:
    """One NodeReport per node of `order` (a subtree depth first: ShareTree.preorder);
    `slurm`: the sshare figures by node, whose normalized usage is the system usage;
    `codes`: each entry's problems' codes, by entry of `cols`."""
    # Column by column in row order, then one NodeReport per row: numbers picked by
    # numpy and listed, Python objects by a C-level itemgetter.  A column read by entry
    # or by parent node has ROOT's value appended, which ROOT's -1 (none) picks.
    entry = tree.source[order]
    by_entry = _picker(entry.tolist())
    names = [ROOT_NAME, *tree.names[1:]]
    usage = slurm.normalized_usage[order].tolist()
    return list(
        map(
            NodeReport,
            _picker(order.tolist())(names),
            tree.ids[order].tolist(),
            tree.level[order].tolist(),
            KIND_LABELS[tree.kinds[order]].tolist(),
            _picker(tree.parent[order].tolist())([*names, None]),
            np.append(np.asarray(cols.resgrp, np.int64), ROOT_UID)[entry].tolist(),
            tree.shares[order].astype(np.int64).tolist(),
            tree.m_shares()[order].tolist(),
            tree.group_shares()[order].tolist(),
            usage,
            slurm.normalized_shares[order].tolist(),
            usage,
            slurm.effective_usage[order].tolist(),
            slurm.fairshare_factor[order].tolist(),
            np.append(np.asarray(cols.shflags, np.int64), SHF_GROUP)[entry].tolist(),
            by_entry([*codes, ()]),
            halflives[order].tolist(),
        )
    )


def _picker(at: Sequence[int]):
    """The function of a sequence that returns the tuple of its items at `at`, in that
    order (operator.itemgetter, which returns an item alone for one index)."""
    if len(at) > 1:
        return operator.itemgetter(*at)
    return lambda seq: tuple(seq[i] for i in at)


def _detached_rows(
    cols: EntryColumns, detached: Sequence[int], usage_of, codes: Sequence, halflife: float
):
    """One NodeReport (level None) per detached entry index; `usage_of(e)`: its system usage;
    `codes`: each entry's problems' codes; `halflife`: the global half-life (s)."""
    return [
        NodeReport(
            cols.name[e],
            cols.uid[e],
            None,
            role_of(cols.shflags[e], cols.uid[e]),
            None,
            cols.resgrp[e],
            cols.shares[e],
            0.0,
            0.0,
            usage_of(e),
            0.0,  # no shares outside the tree: factor 0, its usage its own
            usage_of(e),
            usage_of(e),
            0.0,
            cols.shflags[e],
            codes[e],
            (cols.halflife[e] if cols.halflife else 0.0) or halflife,
        )
        for e in detached
    ]


def _shown_problems(
    problems: list[Problem], entry: np.ndarray, row: np.ndarray, rows: int, whole: bool
) -> list[Problem]:
    """The problems in display order: UDB-wide first, then by row, then by name.

    `entry`: each problem's entry (-1 for a problem of the whole UDB); `row`: the row of
    its entry, `rows` (the number of rows) where it has none.  With --node (not `whole`)
    only the problems of the rows shown."""
    if not whole:
        kept = np.flatnonzero((entry >= 0) & (row < rows))
        problems, entry, row = [problems[k] for k in kept.tolist()], entry[kept], row[kept]
    if not problems:
        return problems
    # sorted(problems, key=(of an entry, row, name)), by a stable lexsort: the name
    # orders only the problems of no row (one row's problems share its name).
    rank = np.zeros(len(problems), np.int64)
    rowless = np.flatnonzero(row == rows).tolist()
    rank[sorted(rowless, key=lambda k: problems[k].name)] = np.arange(len(rowless))
    return list(_picker(np.lexsort((rank, row, entry >= 0)).tolist())(problems))


def _user_count(cols, nodes, kind_count, has_row, mode: str, node: str | None) -> int:
    """Users (and Idle) shown; in Share by Account mode also the users (not in the tree)
    whose default account is shown (`has_row`: whether each entry has a row)."""
    user_count = kind_count["user"] + kind_count["idle"]
    if mode == "account":
        in_view = {n.id for n in nodes if n.kind == "account"}
        user_count += sum(
            1
            for f, acids, shown in zip(cols.shflags, cols.acids, has_row.tolist(), strict=True)
            if not f & (SHF_GROUP | SHF_ACCOUNT)
            and not shown
            and (node is None or default_acid(acids) in in_view)
        )
    return user_count


# -- selection ---------------------------------------------------------------------------


def visible_nodes(report: TreeReport, long: bool = False, errors: bool = False):
    """The rows a display shows: groups only unless `long`; if `errors`, every node with codes."""
    if errors:
        return [n for n in report.nodes if n.codes]
    return [n for n in report.nodes if long or n.kind == "group"]


def load_tree_report(
    udb: str | None, socket_: str | None, *, now: float, mode: str, node: str | None
) -> TreeReport:
    """shrtree's analysis (fairshare.report.sharetree.analyse_tree) of the UDB `udb`
    (or the daemon's copy through `socket_`), usage aged to `now` (epoch s), in `mode`,
    of the subtree under `node`."""
    reader = Reader(resolve_url(udb), socket_)  # a missing file: "no UDB at PATH"
    engine = reader.engine
    with read_connection(engine) as session:
        cols = load_entry_columns(session)
        accounts = load_accounts(session)
        maxlevels = configured_maxlevels(session)
        consts = load_consts(session)
        mounted = mount_reports(session)
    report = analyse_tree(
        cols,
        accounts,
        now=now,
        mode=mode,
        maxlevels=maxlevels,
        halflife=consts.halflife,
        dampening=consts.dampening,
        node=node,
        udb=reader.name,
        delta=consts.delta,
    )
    return dataclasses.replace(report, mounts=mounted) if mounted else report


def mount_reports(conn) -> tuple[MountReport, ...]:
    """The UDB's mounted policies (none where the UDB has no grid tables: a daemon's
    image of an older UDB)."""
    from sqlalchemy.exc import DBAPIError

    from udb.mounts import mounts

    try:
        found = mounts(conn)
    except DBAPIError:
        return ()
    return tuple(
        MountReport(m.name, display_name(m.source), m.policy, m.fetched, m.tried, m.error)
        for m in found
    )
