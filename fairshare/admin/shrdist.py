"""shrdist's library: who may redistribute shares in which resource group, the
redistribution as one write transaction, and its change log (guide 4.4.7, 4.4.8).

- Authorisation (`read_auth`, `authorise`): the shrdist.auth file lists ``login group``
  pairs (several on one line are allowed: ``mlb Mktg mlb tng``; ``#`` starts a comment).
  It is trusted only when owned by root and not writable by group or others, and
  it is opened once, never through a symbolic link, and checked as opened.  Root
  (real uid 0) may change any group without it; anyone else the groups listed for
  their login and every group beneath those in the share tree.  The group "/" is the
  top of the tree (the entries directly under root).
- The members of a group are its children in the share tree of the mode in force:
  users and subgroups in Share by User mode, accounts and subgroups in Share by
  Account mode (SHAREBYACCT).
- `redistribute` re-reads the members' shares inside one write transaction (on SQLite
  BEGIN IMMEDIATE, so two runs on one group serialise), validates every NAME=SHARES,
  updates only the shares column of the members that change and records one
  `ShareChange` row per member changed.  A running shrdaemon picks the new shares up
  at its next cycle (its entries fingerprint sees the change log grow).
- `plan` gives the resulting group shares and machine shares (fractions; the static
  entitlement with every leaf active, as shrtree shows) without writing anything:
  test mode (-p) and the interactive editor use it.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pwd
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from fairshare.core.dist import Distribution, MemberShare
from fairshare.core.tree import Kind, ShareTree
from fairshare.store.config import load_tree
from udb.errors import NotFound, OptionError, UdbError
from udb.models import MAX_SHARES, Entry, ShareChange
from udb.mounts import MountError, read_only
from udb.session import mark_entries_changed

#: Where shrdist looks for its authorisation file unless --auth or SHRDIST_AUTH says.
DEFAULT_AUTH = "/etc/shrdist.auth"
#: The name that stands for the top of the share tree (the entries under root).
TOP = "/"


class NotAuthorised(UdbError):
    """The caller may not change the shares of this group (or the auth file is not trusted)."""


@dataclass(frozen=True)
class Caller:
    """Who runs shrdist: `login` (the real uid's login name, used against the auth file),
    `uid` (the real uid) and `who` (recorded in the change log: SUDO_USER for root under
    sudo, else `login`)."""

    login: str
    uid: int
    who: str

    @property
    def is_root(self) -> bool:
        return self.uid == 0


def current_caller() -> Caller:
    """The calling process's user, from its real uid (never from LOGNAME or USER,
    which the caller controls)."""
    uid = os.getuid()
    try:
        login = pwd.getpwuid(uid).pw_name
    except KeyError:
        login = str(uid)
    who = login
    if uid == 0 and os.environ.get("SUDO_USER"):
        who = os.environ["SUDO_USER"]
    return Caller(login=login, uid=uid, who=who)


@dataclass(frozen=True)
class AuthPair:
    """One ``login group`` pair of shrdist.auth and the line it is on (from 1)."""

    login: str
    group: str
    line: int


def auth_path(option: str | None = None) -> Path:
    """The auth file: `option` (--auth), else $SHRDIST_AUTH, else /etc/shrdist.auth."""
    return Path(option or os.environ.get("SHRDIST_AUTH") or DEFAULT_AUTH)


def untrusted_reason(path: Path, st: os.stat_result | None = None) -> str | None:
    """Why the auth file `path` (`st`: the status of the file as opened; default: as
    the path names it now) may not be trusted (None when it may): it must be a regular
    file owned by root and not writable by group or others."""
    st = st if st is not None else os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: not a regular file: not trusted"
    if st.st_uid != 0:
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = str(st.st_uid)
        return f"{path}: owned by {owner} (uid {st.st_uid}), not root: not trusted"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{path}: mode {stat.S_IMODE(st.st_mode):04o} is writable by group or others: "
            "not trusted (chmod go-w)"
        )
    return None


def parse_auth(text: str, source: str) -> list[AuthPair]:
    """The ``login group`` pairs of an auth file's text, in file order.

    OptionError naming SOURCE:LINE when a line holds an odd number of words.
    """
    pairs = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if len(words) % 2:
            raise OptionError(
                f"{source}:{number}: expected 'login group' pairs, got {len(words)} words"
            )
        pairs.extend(AuthPair(words[i], words[i + 1], number) for i in range(0, len(words), 2))
    return pairs


def read_auth(path: Path) -> list[AuthPair]:
    """The pairs of the trusted auth file at `path`.

    The file is opened once, never through a symbolic link, and what was opened is
    what is checked (`untrusted_reason` on its fstat) and read: a name swapped between
    a check and a read cannot slip another file in.  NotAuthorised when it is
    missing, unreadable, a symbolic link or not trusted; OptionError naming the line
    when it is not UTF-8 text or not 'login group' pairs.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotAuthorised(f"{path}: no such file: only root may redistribute shares") from None
    except PermissionError:
        raise NotAuthorised(f"{path}: cannot be read: permission denied") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotAuthorised(f"{path}: is a symbolic link: not trusted") from None
        raise NotAuthorised(f"{path}: cannot be read: {err.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        reason = untrusted_reason(path, os.fstat(fd))
        if reason:
            raise NotAuthorised(reason)
        try:
            data = f.read()
        except OSError as err:
            raise NotAuthorised(f"{path}: cannot be read: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise OptionError(
            f"{path}:{line}: not UTF-8 text (byte {err.start}): expected 'login group' pairs"
        ) from None
    return parse_auth(text, str(path))


def granted_groups(caller: Caller, pairs: Sequence[AuthPair]) -> list[str]:
    """The groups listed for the caller's login, in file order, without repeats."""
    out: list[str] = []
    for p in pairs:
        if p.login == caller.login and p.group not in out:
            out.append(p.group)
    return out


# -- the group and its members ------------------------------------------------------------


@dataclass
class GroupView:
    """A resource group in the share tree of the mode in force, and its members."""

    tree: ShareTree
    group: str  # the group's name ("/" for the top of the tree)
    node: int  # its tree node
    members: list[int]  # member nodes, by name

    def member_names(self) -> list[str]:
        return [self.tree.names[n] for n in self.members]


def group_view(tree: ShareTree, group: str) -> GroupView:
    """The group called `group` in `tree` ("/" is the top).  NotFound if no entry has
    that name, OptionError if it is not a resource group in the tree."""
    if group == TOP:
        node = 0
    else:
        node = tree.find(group)
        if node is None:
            detached = next((d for d in tree.detached if d.name == group), None)
            if detached is not None:
                raise OptionError(
                    f"-g {group}: not in the share tree ({detached.reason}); fix it with udbgen"
                )
            raise NotFound(f"-g {group}: no such resource group in the UDB")
        if tree.kind(node) != Kind.GROUP:
            raise OptionError(
                f"-g {group}: {group} is a {tree.kind(node).label}, not a resource group"
            )
    members = [int(n) for n in np.flatnonzero(tree.parent == node)]
    members.sort(key=tree.names.__getitem__)
    return GroupView(tree, group, node, members)


def may_administer(caller: Caller, tree: ShareTree, node: int, granted: Sequence[str]) -> bool:
    """Whether the caller may change the members of group `node`: root always, anyone
    else when the group or one of its ancestors is among `granted`."""
    if caller.is_root:
        return True
    chain = {node, *tree.ancestors(node)}
    for g in granted:
        n = 0 if g == TOP else tree.find(g)
        if n is not None and n in chain and (n == 0 or tree.kind(n) == Kind.GROUP):
            return True
    return False


def authorise(caller: Caller, tree: ShareTree, group: str | None, auth: Path) -> GroupView:
    """The group the caller asked for (or, with `group` None, the first one listed for
    them in the auth file; root with no listing gets "/"), checked against the auth file.

    NotAuthorised, naming the caller and the group, when they may not change it.
    """
    if caller.is_root:
        try:
            granted = granted_groups(caller, read_auth(auth))
        except (NotAuthorised, OptionError):
            granted = []  # root needs no auth file, and is not stopped by a bad one
        if group is None:
            group = granted[0] if granted else TOP
        return group_view(tree, group)
    granted = granted_groups(caller, read_auth(auth))
    if not granted:
        raise NotAuthorised(f"{caller.login} may not redistribute shares: not listed in {auth}")
    if group is None:
        group = granted[0]
    view = group_view(tree, group)
    if not may_administer(caller, tree, view.node, granted):
        raise NotAuthorised(
            f"{caller.login} may not redistribute shares in {group}: {auth} grants "
            f"{', '.join(granted)} and the groups beneath"
        )
    return view


# -- the redistribution --------------------------------------------------------------------

_ITEM = re.compile(r"\s*([^=\s,]+)\s*=\s*(\S*?)\s*")


def parse_assignments(items: Sequence[str], option: str = "-b") -> dict[str, int]:
    """NAME=SHARES[,NAME=SHARES...] (from one or several -b values) as name -> shares.

    OptionError naming the item when it is not NAME=SHARES with SHARES a whole number
    from 0 to 2**31-1, or when a name is given twice.
    """
    out: dict[str, int] = {}
    for text in items:
        for position, item in enumerate(text.split(","), 1):
            m = _ITEM.fullmatch(item)
            digits = m.group(2) if m else ""
            # ASCII digits only: int() takes '١٢' as 12, and fails on '²' or 5,000 digits.
            if not (digits.isascii() and digits.isdigit()) or len(digits) > 10:
                digits = ""
            if not digits or int(digits) > MAX_SHARES:
                raise OptionError(
                    f"{option} {text}: item {position} {item.strip()!r}: expected NAME=SHARES "
                    "with SHARES a whole number >= 0"
                )
            name, shares = m.group(1), int(digits)
            if name in out:
                raise OptionError(f"{option} {text}: {name} is given twice")
            out[name] = shares
    return out


def distribution_json(d: Distribution, written: bool) -> dict:
    """The --json shape of a distribution (see man/shrdist.8)."""
    return {
        "group": d.group,
        "m_share": d.m_share,
        "total": d.total,
        "written": written,
        "members": [
            {
                "name": m.name,
                "uid": m.uid,
                "kind": m.kind,
                "old": m.old,
                "shares": m.shares,
                "group_share": m.group_share,
                "m_share": m.m_share,
            }
            for m in d.members
        ],
    }


def distribution_from_json(doc: dict) -> Distribution:
    """The Distribution `distribution_json` described (the daemon's shrdist reply)."""
    members = [
        MemberShare(
            name=m["name"],
            uid=int(m["uid"]),
            kind=m["kind"],
            old=int(m["old"]),
            shares=int(m["shares"]),
            group_share=float(m["group_share"]),
            m_share=float(m["m_share"]),
        )
        for m in doc["members"]
    ]
    return Distribution(doc["group"], float(doc["m_share"]), members)


def check_assignments(view: GroupView, assignments: Mapping[str, int]) -> list[str]:
    """Refuse names that are not members of the group (OptionError); returns warnings
    (udb.check's Zs rule: only Idle should have zero shares)."""
    members = set(view.member_names())
    strangers = [n for n in assignments if n not in members]
    if strangers:
        raise OptionError(
            f"{', '.join(strangers)}: not a member of {view.group} (members: "
            f"{', '.join(view.member_names()) or 'none'})"
        )
    warnings = []
    for name, shares in assignments.items():
        node = view.tree.node(name)
        kind = view.tree.kind(node)
        if shares == 0 and kind != Kind.IDLE:
            warnings.append(
                f"{name}: Zs {kind.label} has zero shares (only Idle should): it runs only on "
                "CPU nobody else wants"
            )
    return warnings


def plan(view: GroupView, assignments: Mapping[str, int]) -> Distribution:
    """The group's distribution with `assignments` (member -> shares) applied; writes nothing.

    Names are not checked here (see `check_assignments`); unknown names are ignored.
    """
    tree = view.tree
    shares = tree.shares.copy()
    for name, value in assignments.items():
        node = tree.find(name)
        if node is not None and node in view.members:
            shares[node] = value
    trial = _with_shares(tree, shares)
    m = trial.m_shares()
    total = float(sum(shares[n] for n in view.members))
    members = [
        MemberShare(
            name=tree.names[n],
            uid=int(tree.ids[n]),
            kind=tree.kind(n).label,
            old=int(tree.shares[n]),
            shares=int(shares[n]),
            group_share=float(shares[n]) / total if total > 0 else 0.0,
            m_share=float(m[n]),
        )
        for n in view.members
    ]
    return Distribution(view.group, float(m[view.node]), members)


def _with_shares(tree: ShareTree, shares: np.ndarray) -> ShareTree:
    """`tree` with other shares (the arrays other than shares are shared, not copied)."""
    return dataclasses.replace(tree, shares=shares)


def redistribute(
    session: Session,
    caller: Caller,
    group: str | None,
    assignments: Mapping[str, int],
    *,
    auth: Path,
    now: float,
) -> tuple[Distribution, list[str]]:
    """Apply `assignments` (member -> shares) to the group, in the caller's write
    transaction (`udb.session.write_session`): re-reads the tree, authorises, validates,
    updates only the shares column of the members that change and logs one ShareChange
    per member changed (`now`, epoch s).  Returns the resulting distribution and warnings.
    """
    view = authorise(caller, load_tree(session), group, auth)
    refuse_mounted(session, view)
    _lock_members(session, view)
    warnings = check_assignments(view, assignments)
    result = plan(view, assignments)
    for m in result.changed:
        session.execute(update(Entry).where(Entry.uid == m.uid).values(shares=m.shares))
        session.add(
            ShareChange(
                time=now, who=caller.who, grp=view.group, member=m.name, old=m.old, new=m.shares
            )
        )
    if result.changed:
        mark_entries_changed(session)
    session.flush()
    return result, warnings


def refuse_mounted(session: Session, view: GroupView) -> None:
    """MountError (one line) when the group's members are a mounted policy's
    (udb.mounts): they are read-only here, changed only at the VO's policy."""
    ro = read_only(session)
    if view.group in ro.points or view.group in ro.mounted:
        source = ro.points.get(view.group) or ro.points.get(ro.mounted[view.group], "?")
        raise MountError(
            f"-g {view.group}: its members are mounted from {source} (read-only): "
            "change them in the VO's policy"
        )


def _lock_members(session: Session, view: GroupView) -> None:
    """Lock the members' rows and take their shares as they are now.

    On SQLite the transaction already holds the write lock (BEGIN IMMEDIATE); on
    PostgreSQL, SELECT ... FOR UPDATE makes a second run on the group wait here
    and then read what the first one committed.
    """
    tree = view.tree
    uids = [int(tree.ids[n]) for n in view.members]
    if not uids:
        return
    rows = session.execute(
        select(Entry.uid, Entry.shares).where(Entry.uid.in_(uids)).with_for_update()
    ).all()
    for uid, value in rows:
        tree.shares[tree.node_of_id(uid)] = value


def preview(
    session: Session,
    caller: Caller,
    group: str | None,
    assignments: Mapping[str, int],
    *,
    auth: Path,
) -> tuple[GroupView, Distribution, list[str]]:
    """Test mode: what `redistribute` would make of the group, writing nothing.
    Returns the group, the distribution and the warnings."""
    view = authorise(caller, load_tree(session), group, auth)
    warnings = check_assignments(view, assignments)
    return view, plan(view, assignments), warnings


def history(
    session: Session, group: str | None = None, limit: int | None = None
) -> list[ShareChange]:
    """Recorded share changes, oldest first (only `group`'s when given; the last `limit`)."""
    query = select(ShareChange).order_by(ShareChange.id.desc())
    if group is not None:
        query = query.where(ShareChange.grp == group)
    if limit:
        query = query.limit(limit)
    return list(reversed(session.scalars(query).all()))
