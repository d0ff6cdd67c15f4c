"""The entries every UDB needs before its users (``udbgen --init``), as UNICOS's initudb
laid them: the system group, root, Idle, unknown, and the group new users go in.

- ``System`` (a group, 10 shares): root and the entry ``unknown``, where the processes
  of uids with no entry are charged (system daemons, or every new user when shrdaemon
  is told ``--new-uids unknown``);
- ``Users`` (a group, 90 shares): where ``udbgen --passwd``/``--nss`` and shrdaemon's
  enrolment put users by default;
- ``Idle`` (uid 11, the guide's), ``unknown`` (uid 12), ``root`` (uid 0, 1 share).

`missing_skeleton` gives the ``create`` directives for the entries a UDB lacks (by name,
and only where the uid is free), so ``--init`` on a UDB that has them changes nothing,
and an import from passwd or NSS leaves a tree that passes ``udbgen -a``.  Groups are
given uids from SYSTEM_GROUP_UID up, far above any login's; `group_directive` makes
another group (``--resgrp NAME`` or ``--map GROUP=NAME`` naming one not in the UDB).
"""

from __future__ import annotations

from collections.abc import Iterable

from udb.directives import parse
from udb.fields import Directive

#: uids of the groups the skeleton and the imports create: far above every login's
#: (Linux's nobody is 65534, nfsnobody 4294967294), so they take no user's uid.
SYSTEM_GROUP_UID = 4_000_000_000
USERS_GROUP_UID = SYSTEM_GROUP_UID + 1
#: The group new users go in, by default (udbgen --passwd/--nss, shrdaemon --new-uids).
DEFAULT_GROUP = "Users"
#: Shares of a group an import creates because it was named but missing.
NEW_GROUP_SHARES = 100

SKELETON = f"""\
create:System:uid:{SYSTEM_GROUP_UID}:gids:0:passwd:*:shflags:040000:shares:10:resgrp:0:comment:System accounts and uids without an entry:
create:{DEFAULT_GROUP}:uid:{USERS_GROUP_UID}:gids:100:passwd:*:shflags:040000:shares:90:resgrp:0:comment:Users:
create:Idle:uid:11:passwd:*:gids:0:resgrp:0:shflags:0:shares:0:comment:System Idle:
create:unknown:uid:12:passwd:*:gids:0:resgrp:System:shflags:0:shares:1:comment:Processes of uids without an entry:
create:root:uid:0:gids:0:resgrp:System:shares:1:comment:System account:
"""  # noqa: E501 - one directive a line, as udbsee prints them


def missing_skeleton(names: set[str], uids: set[int], source: str = "--init") -> list[Directive]:
    """``create`` directives for the skeleton's entries missing from a UDB holding
    `names` and `uids` (an entry whose name or uid is taken is left to the UDB)."""
    out = []
    for d in parse(SKELETON, source):
        uid = dict((f, v) for f, v, _ in d.fields)["uid"]
        if d.name not in names and uid not in uids:
            out.append(d)
    return out


def group_directive(name: str, uids: Iterable[int], source: str) -> Directive:
    """``create`` for a new group `name` directly under root with NEW_GROUP_SHARES
    shares and the first free uid above the skeleton's groups."""
    taken = set(uids)
    uid = USERS_GROUP_UID + 1
    while uid in taken:
        uid += 1
    text = f"create:{name}:uid:{uid}:passwd:*:shflags:040000:shares:{NEW_GROUP_SHARES}:resgrp:0:"
    return parse(text, source)[0]
