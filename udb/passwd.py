"""Start a UDB from the system's existing accounts (``udbgen --passwd FILE``).

`passwd_directives` reads a file in /etc/passwd format and returns ``create``
directives for the accounts the UDB lacks, which udbgen applies with the rest
of its input in one transaction, so the usual checks (the group exists, uids
are unique) hold for them too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

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
) -> Imported:
    """``create`` directives for the `users` the UDB does not hold yet.

    Each new entry gets the user's uid, primary gid and GECOS comment, `resgrp`
    (a group's uid or name, resolved when applied), `shares`, and passwd ``*``
    when the account is locked with ``*`` (else empty: the UDB keeps no
    hashes from here).  Accounts already present by name or uid, outside
    min_uid..max_uid, named unusably, or with the Idle uid 11 are skipped.
    """
    out: list[Directive] = []
    skipped: list[tuple[str, str]] = []
    names, uids = set(existing_names), set(existing_uids)
    group: int | str = int(resgrp) if resgrp.isascii() and resgrp.isdigit() else resgrp
    for u in users:
        if u.name in names:
            reason = "already in the UDB" if u.name in existing_names else "listed twice"
        elif u.uid in uids:
            reason = f"uid {u.uid} already in the UDB"
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
