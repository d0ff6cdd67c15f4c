"""Start a UDB from the system's existing accounts (``udbgen --passwd FILE``, or
``udbgen --nss``: every account the name service lists, LDAP and SSSD included).

`passwd_directives` takes the accounts (`read_passwd` of a file in /etc/passwd format,
or `read_nss`) and returns ``create`` directives for those the UDB lacks, which udbgen
applies with the rest of its input in one transaction, so the usual checks (the group
exists, uids are unique) hold for them too.  The unprivileged ``nobody`` account is
never imported; `GroupMap` puts members of given Unix groups in given resource groups.
"""

from __future__ import annotations

import grp
import pwd
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from udb.directives import NAME_RE
from udb.errors import DirectiveError
from udb.fields import Directive
from udb.rules import IDLE_UID, MAX_ID


@dataclass(frozen=True)
class PasswdUser:
    """One line of a passwd file."""

    name: str
    passwd: str
    uid: int
    gid: int
    gecos: str
    line: int


def read_passwd(text: str, source: str) -> list[PasswdUser]:
    """The accounts in `text` (passwd(5) format); blank and ``#`` lines are skipped.

    Raises DirectiveError for a line without seven fields or with a bad uid/gid.
    """
    users = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(("#", "+", "-")):
            continue  # NIS compat lines (+, -) name no local account
        parts = line.split(":")
        if len(parts) != 7:
            raise DirectiveError(
                source, lineno, 1, f"expected 7 ':'-separated fields, found {len(parts)}"
            )
        name, pw, uid, gid, gecos = parts[:5]
        for col_field, text_value in ((2, uid), (3, gid)):
            if not (text_value.isascii() and text_value.isdigit()) or (
                len(text_value) > 10 or int(text_value) > MAX_ID
            ):
                col = sum(len(p) + 1 for p in parts[:col_field]) + 1
                msg = f"{name}: expected a number from 0 to {MAX_ID}"
                raise DirectiveError(source, lineno, col, msg)
        users.append(PasswdUser(name, pw, int(uid), int(gid), gecos, lineno))
    return users


#: The unprivileged accounts that own nothing and are never imported (uid 65534 is
#: Linux's overflow uid; 4294967294 is (uid_t)-2, nfsnobody on older systems).
NOBODY_NAMES = ("nobody", "nfsnobody")
NOBODY_UIDS = (65534, 4294967294)


def read_nss() -> list[PasswdUser]:
    """Every account the name service lists (getent passwd: files, LDAP, SSSD, in
    nsswitch.conf's order; a directory service that does not enumerate lists only the
    local accounts).  `line` is the account's place in that list."""
    return [
        PasswdUser(p.pw_name, p.pw_passwd, p.pw_uid, p.pw_gid, p.pw_gecos, i)
        for i, p in enumerate(pwd.getpwall(), 1)
    ]


@dataclass
class GroupMap:
    """Unix group -> resource group rules (``--map GROUP=RESGRP``), the first rule
    naming one of the user's Unix groups (primary, or a member of) winning."""

    rules: Sequence[tuple[str, str]] = ()
    _members: dict[str, set[str]] = field(default_factory=dict)
    _by_gid: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rules and not self._by_gid:  # read once, and only when there are rules
            for g in grp.getgrall():
                self._by_gid.setdefault(g.gr_gid, g.gr_name)
                self._members[g.gr_name] = set(g.gr_mem)

    def resgrp(self, user: PasswdUser, default: str) -> str:
        """The resource group `user` goes in: the first rule's whose Unix group is the
        user's primary group or has the user as a member, else `default`."""
        primary = self._by_gid.get(user.gid)
        for unix, resgrp in self.rules:
            if unix == primary or user.name in self._members.get(unix, ()):
                return resgrp
        return default


@dataclass
class Imported:
    """What an import plans: the directives to apply and why other accounts were skipped."""

    directives: list[Directive]
    skipped: list[tuple[str, str]]  # (name, reason)


def passwd_directives(
    users: Iterable[PasswdUser],
    source: str,
    *,
    resgrp: str,
    shares: int,
    existing_names: set[str],
    existing_uids: set[int],
    min_uid: int = 0,
    max_uid: int | None = None,
    groups: GroupMap | None = None,
) -> Imported:
    """``create`` directives for the `users` the UDB does not hold yet.

    Each new entry gets the user's uid, primary gid and GECOS comment, `resgrp`
    (a group's uid or name, resolved when applied; `groups` may choose another by the
    user's Unix groups), `shares`, and passwd ``*`` when the account is locked with
    ``*`` (else empty: the UDB keeps no hashes from here).  Accounts already present
    by name or uid, outside min_uid..max_uid, named unusably, nobody, or with the Idle
    uid 11 are skipped.
    """
    out: list[Directive] = []
    skipped: list[tuple[str, str]] = []
    names, uids = set(existing_names), set(existing_uids)
    for u in users:
        if u.name in names:
            reason = "already in the UDB" if u.name in existing_names else "listed twice"
        elif u.uid in uids:
            reason = f"uid {u.uid} already in the UDB"
        elif u.name in NOBODY_NAMES or u.uid in NOBODY_UIDS:
            reason = "the unprivileged nobody account is never imported"
        elif u.uid == IDLE_UID:
            reason = f"uid {IDLE_UID} is reserved for Idle"
        elif u.uid < min_uid or (max_uid is not None and u.uid > max_uid):
            reason = f"uid {u.uid} outside the range asked for"
        elif not NAME_RE.fullmatch(u.name):
            reason = "not usable as a UDB name"
        else:
            reason = ""
        if reason:
            skipped.append((u.name, reason))
            continue
        names.add(u.name)
        uids.add(u.uid)
        chosen = groups.resgrp(u, resgrp) if groups is not None else resgrp
        group: int | str = int(chosen) if chosen.isascii() and chosen.isdigit() else chosen
        fields: list[tuple[str, object, int]] = [
            ("uid", u.uid, 2),
            ("gids", [u.gid], 3),
            ("resgrp", group, 0),
            ("shares", shares, 0),
            ("passwd", "*" if u.passwd == "*" else "", 1),
            ("comment", u.gecos, 4),
        ]
        text = f"create:{u.name}:"  # errors point at the line; columns are not meaningful
        out.append(Directive("create", u.name, fields, source, u.line, 0, text))
    return Imported(out, skipped)
