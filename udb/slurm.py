"""Sites moving from Slurm: ``sacctmgr dump`` files to UDB directives and back.

`read_dump` parses what ``sacctmgr dump CLUSTER file=FILE`` writes: a Cluster line,
then ``Parent - 'NAME'`` lines, each followed by the Account and User associations
under that parent, with ``Fairshare=N`` their shares::

    Cluster - 'c':Fairshare=1
    Parent - 'root'
    Account - 'physics':Description='Physics':Fairshare=40
    Parent - 'physics'
    User - 'alice':DefaultAccount='physics':Fairshare=10

`dump_directives` turns the associations into udbgen directives (Share by User): an
account is a resource group (shflags 040000, a uid from SLURM_GROUP_UID up), a user an
entry under its account, with the uid its login has (in the UDB already, else in the
name service). A user with associations under several accounts goes in its
DefaultAccount's (else its first); ``Fairshare=parent`` (the user takes its account's
share) becomes 1 share, and an account all of whose associations say so is pooled (its
members are not ranked against each other, udbgen's pooled field). The root account and
root user are the tree's root and are not entries. An existing entry is updated (resgrp,
shares), a missing one created.

`tree_dump` writes the UDB's tree back in the same format (``udbsee --sacctmgr``), so
``udbsee --sacctmgr | udbgen --sacctmgr -`` round-trips it.
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from udb.directives import NAME_RE
from udb.errors import DirectiveError
from udb.fields import Directive
from udb.rules import IDLE_UID, ROOT_UID, SHF_GROUP, UNKNOWN_NAMES

#: uids given to the groups made from Slurm accounts (above udb.skeleton's groups).
SLURM_GROUP_UID = 4_000_001_000

_LINE = re.compile(r"^\s*(Cluster|Parent|Account|User)\s+-\s+'((?:[^']|'')*)'(.*)$")
_FIELD = re.compile(r":([A-Za-z]+)=('(?:[^']|'')*'|[^:]*)")


@dataclass(frozen=True)
class Association:
    """One Account or User line of a dump, under `parent` ("root" at the top)."""

    kind: str  # "Account" or "User"
    name: str
    parent: str
    fairshare: int | None  # None: Fairshare=parent
    fields: dict[str, str]
    line: int


def read_dump(text: str, source: str) -> list[Association]:
    """The associations of a ``sacctmgr dump`` file; DirectiveError for a line that is
    not one of its kinds, an association before any Parent line, or a bad Fairshare."""
    out: list[Association] = []
    parent: str | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise DirectiveError(
                source, lineno, 1, "expected Cluster, Parent, Account or User - 'NAME'"
            )
        kind, name, rest = m.group(1), m.group(2).replace("''", "'"), m.group(3)
        fields = {k: v.strip("'").replace("''", "'") for k, v in _FIELD.findall(rest)}
        if kind == "Parent":
            parent = name
        elif kind in ("Account", "User"):
            if parent is None:
                raise DirectiveError(source, lineno, 1, f"{kind} {name}: no Parent line before it")
            out.append(
                Association(kind, name, parent, _fairshare(fields, source, lineno), fields, lineno)
            )
    return out


def _fairshare(fields: dict[str, str], source: str, line: int) -> int | None:
    value = fields.get("Fairshare", "1")
    if value == "parent":
        return None
    if not value.isdigit():
        raise DirectiveError(source, line, 1, f"Fairshare={value}: expected a number or parent")
    return int(value)


def dump_directives(
    assocs: Iterable[Association],
    source: str,
    existing: dict[str, int],
    taken_uids: set[int],
    uid_of: Callable[[str], int | None] | None = None,
) -> list[Directive]:
    """udbgen directives for `assocs` (see the module docstring); `existing` maps the
    UDB's entry names to their uids, `taken_uids` holds every uid in use."""
    uid_of = uid_of or _login_uid
    assocs = list(assocs)
    users = _chosen_users(assocs)
    pooled = _pooled_accounts(assocs)
    taken = set(taken_uids)
    next_uid = SLURM_GROUP_UID
    out: list[Directive] = []
    for a in assocs:
        if a.name == "root" or (a.kind == "User" and users[a.name] is not a):
            continue
        if not NAME_RE.fullmatch(a.name):
            raise DirectiveError(source, a.line, 1, f"{a.name!r}: not usable as a UDB name")
        fields: list[tuple[str, object, int]] = [
            ("resgrp", 0 if a.parent == "root" else a.parent, 0),
            ("shares", 1 if a.fairshare is None else a.fairshare, 0),
        ]
        if a.kind == "Account" and a.name in pooled:
            fields.append(("pooled", 1, 0))
        if a.name in existing:
            out.append(Directive("update", a.name, fields, source, a.line, 0, f"update:{a.name}:"))
            continue
        if a.kind == "Account":
            while next_uid in taken:
                next_uid += 1
            uid, extra = next_uid, [("shflags", SHF_GROUP, 0), ("passwd", "*", 0)]
            if a.fields.get("Description"):
                extra.append(("comment", a.fields["Description"], 0))
        else:
            uid, extra = uid_of(a.name), []
            if uid is None:
                raise DirectiveError(
                    source,
                    a.line,
                    1,
                    f"user {a.name}: no such login in the UDB or the name service",
                )
        taken.add(uid)
        fields = [("uid", uid, 0), *fields, *extra]
        out.append(Directive("create", a.name, fields, source, a.line, 0, f"create:{a.name}:"))
    return out


def _pooled_accounts(assocs: list[Association]) -> set[str]:
    """The accounts whose every association below says Fairshare=parent."""
    kids: dict[str, list[Association]] = {}
    for a in assocs:
        kids.setdefault(a.parent, []).append(a)
    return {p for p, mine in kids.items() if p != "root" and all(a.fairshare is None for a in mine)}


def _chosen_users(assocs: list[Association]) -> dict[str, Association]:
    """Each user's association: the one under its DefaultAccount, else its first."""
    lines: dict[str, list[Association]] = {}
    for a in assocs:
        if a.kind == "User":
            lines.setdefault(a.name, []).append(a)
    chosen = {}
    for name, mine in lines.items():
        defaults = {a.fields["DefaultAccount"] for a in mine if a.fields.get("DefaultAccount")}
        chosen[name] = next((a for a in mine if a.parent in defaults), mine[0])
    return chosen


def _login_uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


@dataclass(frozen=True)
class TreeEntry:
    """What `tree_dump` needs of an entry."""

    name: str
    uid: int
    resgrp: int
    shares: int
    shflags: int
    comment: str


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def tree_dump(entries: Iterable[TreeEntry], cluster: str) -> str:
    """The UDB's share tree as a ``sacctmgr dump`` file (Share by User: groups as
    accounts, users as users; Idle, unknown and root left out, as Slurm has no such
    entries): the parents breadth first, each with its children in name order."""
    entries = [
        e for e in entries if e.uid not in (IDLE_UID, ROOT_UID) and e.name not in UNKNOWN_NAMES
    ]
    by_uid = {e.uid: e for e in entries if e.shflags & SHF_GROUP}
    children: dict[int, list[TreeEntry]] = {}
    for e in entries:
        parent = e.resgrp if e.resgrp in by_uid else ROOT_UID
        children.setdefault(parent, []).append(e)
    lines = [
        "# sacctmgr dump written by udbsee --sacctmgr (fairshare)",
        f"Cluster - {_quote(cluster)}:Fairshare=1",
    ]
    queue = [(ROOT_UID, "root")]
    while queue:
        uid, name = queue.pop(0)
        kids = sorted(children.get(uid, []), key=lambda e: (not e.shflags & SHF_GROUP, e.name))
        if not kids:
            continue
        lines.append(f"Parent - {_quote(name)}")
        for e in kids:
            if e.shflags & SHF_GROUP:
                desc = f":Description={_quote(e.comment)}" if e.comment else ""
                lines.append(f"Account - {_quote(e.name)}{desc}:Fairshare={e.shares}")
                queue.append((e.uid, e.name))
            else:
                account = "" if uid == ROOT_UID else f":DefaultAccount={_quote(name)}"
                lines.append(f"User - {_quote(e.name)}{account}:Fairshare={e.shares}")
    return "\n".join(lines) + "\n"
