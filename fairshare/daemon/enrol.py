"""What the daemon does with a uid it has never seen (shrdaemon --new-uids).

A process whose uid has no entry is charged to ``unknown``.  That suits system daemons,
but not a user added after the UDB was built: every new user would share unknown's one
share.  So by default (``--new-uids enrol:Users:100``) the daemon enrols such a uid: it
creates an entry for it under the default group with the default shares, named after
its login (the name service's, so directory users count), in one transaction, and the
next cycle's poll sees the new entry and schedules it under that group.  Uids below
``--enforce-min-uid`` (system accounts), nobody, and uids whose login name is unusable
or already taken stay with ``unknown``.  ``--new-uids unknown`` keeps them all there,
for a site that enrols by hand.  Only in Share by User mode: in Share by Account mode a
process is charged to its account, which a new entry would not have.

A refused enrolment (the group missing, the name taken) is logged once and tried again
every RETRY_EVERY cycles, so creating the group later fixes it without a restart.
"""

from __future__ import annotations

import logging
import pwd
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy import Engine

from fairshare.collect import Sample
from fairshare.daemon.state import Lnodes
from udb import directives
from udb.directives import NAME_RE
from udb.errors import OptionError, UdbError
from udb.fields import Directive
from udb.passwd import NOBODY_NAMES, NOBODY_UIDS
from udb.rules import IDLE_UID, MAX_COMMENT, MAX_SHARES
from udb.skeleton import DEFAULT_GROUP

log = logging.getLogger("shrdaemon")

#: Where the daemon's directives say they come from, in its log.
SOURCE = "shrdaemon --new-uids"
#: Cycles before a refused enrolment is tried again.
RETRY_EVERY = 15


@dataclass(frozen=True)
class NewUids:
    """The administrator's choice for uids without an entry: enrol them under `group`
    with `shares` (`enrol` True), or charge them to unknown."""

    enrol: bool = True
    group: str = DEFAULT_GROUP
    shares: int = 100

    def __str__(self) -> str:
        return f"enrol:{self.group}:{self.shares}" if self.enrol else "unknown"


def parse_new_uids(text: str) -> NewUids:
    """``unknown``, ``enrol``, ``enrol:GROUP`` or ``enrol:GROUP:SHARES``."""
    kind, _, rest = text.partition(":")
    if kind == "unknown" and not rest:
        return NewUids(enrol=False)
    if kind == "enrol":
        group, _, shares = rest.partition(":")
        group = group or DEFAULT_GROUP
        if NAME_RE.fullmatch(group) and (
            not shares or (shares.isdigit() and int(shares) <= MAX_SHARES)
        ):
            return NewUids(True, group, int(shares) if shares else 100)
    raise OptionError(
        f"--new-uids {text}: expected unknown, or enrol[:GROUP[:SHARES]] (shares 0 to {MAX_SHARES})"
    )


def login_of(uid: int) -> tuple[str, int, str] | None:
    """(name, primary gid, GECOS) of `uid` from the name service; None when it has none."""
    try:
        p = pwd.getpwuid(uid)
    except KeyError:
        return None
    return p.pw_name, p.pw_gid, p.pw_gecos


@dataclass
class Enrolment:
    """Enrols the new uids of each sample under `policy` (see the module docstring)."""

    policy: NewUids
    min_uid: int
    lookup: Callable[[int], tuple[str, int, str] | None] = login_of
    refused: dict[int, int] = field(default_factory=dict)  # uid -> cycle it was refused

    def unseen(self, ln: Lnodes, sample: Sample, cycle: int) -> list[int]:
        """The uids of `sample` with no entry that the policy enrols this cycle."""
        if not self.policy.enrol or ln.tree.mode != "user":
            return []
        known = ln.leaf_of_id
        new = {p.uid for p in sample.processes if p.uid not in known}
        return sorted(
            uid
            for uid in new
            if uid >= self.min_uid
            and uid not in NOBODY_UIDS
            and uid != IDLE_UID
            and cycle - self.refused.get(uid, -RETRY_EVERY) >= RETRY_EVERY
        )

    def enrol(self, engine: Engine, uids: Iterable[int], cycle: int) -> int:
        """Create an entry for each of `uids` in one transaction; returns how many."""
        todo = []
        for uid in uids:
            login = self.lookup(uid)
            name, gid, gecos = login if login is not None else (f"uid{uid}", None, "")
            if name in NOBODY_NAMES or not NAME_RE.fullmatch(name):
                self._refuse(uid, cycle, f"login name {name!r} is not usable as a UDB name")
                continue
            fields: list[tuple[str, object, int]] = [
                ("uid", uid, 0),
                ("gids", [] if gid is None else [gid], 0),
                ("resgrp", self.policy.group, 0),
                ("shares", self.policy.shares, 0),
                ("comment", gecos.replace("\n", " ")[:MAX_COMMENT], 0),
            ]
            text = f"create:{name}:"  # what an error names
            todo.append((uid, name, Directive("create", name, fields, SOURCE, 1, 0, text)))
        if not todo:
            return 0
        try:
            directives.run(engine, [d for _, _, d in todo])
        except UdbError as err:
            # One transaction: nothing was written.  Try them one by one next time round.
            for uid, _, _ in todo:
                self._refuse(uid, cycle, str(err))
            return 0
        for uid, name, _ in todo:
            log.info(
                "enrolled uid %d (%s) under %s with %d shares (--new-uids %s)",
                uid, name, self.policy.group, self.policy.shares, self.policy,
            )  # fmt: skip
        return len(todo)

    def _refuse(self, uid: int, cycle: int, why: str) -> None:
        if uid not in self.refused:
            log.warning("uid %d stays with unknown: cannot enrol it: %s", uid, why)
        self.refused[uid] = cycle
