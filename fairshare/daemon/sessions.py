"""newacct's per-session accounts (Share by Account mode, guide 4.4.5).

newacct asks the running shrdaemon, over its socket (fairshare.server.server), to charge
a login session to one of the caller's accounts.  The daemon takes the caller's
uid and pid from the kernel (SO_PEERCRED), the session from the caller's pid
(getsid), checks that the caller owns the session and that the account is one of
the caller's acids, and records it in memory (`SessionAccounts`).  Every process
of that session owned by the caller (field 6 of /proc/PID/stat) is then charged to
that account from the daemon's next cycle; the other sessions keep the user's
default account, the first of the entry's acids.  The record is keyed by session
and uid: in a session several users share (su, sudo -u), each user's choice is
their own, and no other user's request changes or clears it.  Records of sessions
that no longer exist, and of accounts taken away from the user, are dropped by the
daemon.  Nothing is written to a file: a restarted daemon starts with every session
on its default account.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from fairshare.collect import ProcessSample, Sample
from fairshare.core.tree import default_acid
from fairshare.store.config import load_consts
from udb.errors import NotFound, OptionError, UdbError
from udb.models import SHF_ACCOUNT, Account, Entry


@dataclass(frozen=True)
class SessionAccount:
    """A session's account: the session id, the uid that chose it and the account number."""

    sid: int
    uid: int
    acid: int


# -- accounts in the UDB -------------------------------------------------------------------


def account_names(session: Session) -> dict[int, str]:
    """Account number -> name, from the account registry and the shareholder entries."""
    names = {acid: name for acid, name in session.execute(select(Account.acid, Account.name))}
    for uid, name in session.execute(
        select(Entry.uid, Entry.name).where(Entry.shflags.op("&")(SHF_ACCOUNT) != 0)
    ):
        names.setdefault(uid, name)
    return names


def resolve_account(session: Session, text: str) -> int:
    """The account number `text` names (a number, or a name in the account registry
    or of a shareholder entry); NotFound otherwise."""
    if text.isascii() and text.isdigit() and len(text) <= 20:  # not '٢١٠١', not 5,000 digits
        return int(text)
    for acid, name in account_names(session).items():
        if name == text:
            return acid
    raise NotFound(f"{text}: no such account")


def user_acids(session: Session, uid: int) -> tuple[str, list[int]]:
    """The name and the acids (first = default) of the entry with `uid`; NotFound if none."""
    row = session.execute(select(Entry.name, Entry.acids).where(Entry.uid == uid)).first()
    if row is None:
        raise NotFound(f"uid {uid} has no UDB entry")
    return row.name, [int(a) for a in (row.acids or [])]


def check_account(session: Session, uid: int, text: str) -> int:
    """The account number for `text` if it is one of uid's acids; OptionError if not."""
    acid = resolve_account(session, text)
    name, acids = user_acids(session, uid)
    if acid not in acids:
        names = account_names(session)
        yours = ", ".join(names.get(a, str(a)) for a in acids) or "none"
        raise OptionError(f"{text}: not one of {name}'s accounts (acids: {yours})")
    return acid


# -- the sessions ----------------------------------------------------------------------------


def _visible(sid: int) -> None:
    """UdbError unless `sid` names a session: getsid gives 0 when the session's leader is
    outside this PID namespace (a container started without a session of its own), and
    the daemon cannot tell such sessions apart, so an account cannot follow them."""
    if sid <= 0:
        raise UdbError(
            "this session cannot be given an account: its leader is outside this PID "
            "namespace (getsid gives 0); start a session of your own, e.g. `setsid -w bash`, "
            "and run newacct there"
        )


def owner_of(pid: int) -> int | None:
    """The real uid of process `pid` (None when it does not exist)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def caller_session(uid: int, pid: int, session: int | None = None) -> int:
    """The session a newacct request from process `pid` of `uid` is about: its own
    (getsid of `pid`), or `session` when named, which the caller must own: it is the
    caller's own session or its leader (the process whose pid is the session id) runs
    as the caller.  UdbError when the caller does not own it or it is not visible."""
    try:
        own = os.getsid(pid)
    except OSError:
        raise UdbError(f"process {pid} is gone") from None
    if session is None or session == own:
        _visible(own)
        return own
    _visible(session)
    leader = owner_of(session)
    if leader is None:
        raise UdbError(f"session {session}: no such session")
    if leader != uid:
        raise UdbError(f"session {session} is not yours: its leader runs as uid {leader}")
    return session


class SessionAccounts:
    """shrdaemon's record of the accounts newacct chose, per session and user: its
    fairshare.daemon.accounts.AccountLookup.

    A record is keyed by the session and the uid that chose it: in a session several
    users share (su, sudo -u), each has a choice of their own, for their own
    processes there, and none can change or clear another's.  The socket server calls
    `choose` and `clear` (from its own threads); the daemon calls
    `refresh(sample, acids)` once a cycle (acids: user uid -> acids) before it maps the
    sample's processes; calling the object with a ProcessSample then gives the account
    to charge, or None for the user's default.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[tuple[int, int], SessionAccount] = {}

    def choose(self, sid: int, uid: int, acid: int) -> None:
        """Charge the processes of `uid` in session `sid` to account `acid` (the other
        users' processes there keep their own choice)."""
        with self._lock:
            self._records[sid, uid] = SessionAccount(sid=sid, uid=uid, acid=acid)

    def clear(self, sid: int, uid: int) -> bool:
        """Back to the default account for `uid`'s processes in `sid`; True if one was set."""
        with self._lock:
            return self._records.pop((sid, uid), None) is not None

    def current(self, sid: int, uid: int, acids: Sequence[int]) -> tuple[int | None, bool]:
        """The account session `sid` of `uid` is charged to, and whether newacct chose it
        (False: the default, the first of `acids`; None when the user has no acids)."""
        rec = self._records.get((sid, uid))
        if rec is not None and rec.acid in acids:
            return rec.acid, True
        return default_acid(acids), False

    def refresh(self, sample: Sample, acids: Mapping[int, Sequence[int]]) -> None:
        """Forget the sessions no process of `sample` belongs to (when sessions are
        known) and the records whose user no longer has the account (when `acids` is
        known: the daemon reads it in Share by Account mode only, and in Share by User
        mode a choice is kept, unused, for when the mode changes)."""
        live = {p.sid for p in sample.processes if p.sid > 0}
        with self._lock:
            self._records = {
                key: rec
                for key, rec in self._records.items()
                if (not live or rec.sid in live)
                and (not acids or rec.acid in acids.get(rec.uid, ()))
            }

    def __call__(self, p: ProcessSample) -> int | None:
        rec = self._records.get((p.sid, p.uid))  # one dict lookup: atomic, needs no lock
        if rec is not None and p.sid > 0:
            return rec.acid
        return None

    @property
    def sessions(self) -> dict[tuple[int, int], SessionAccount]:
        """The records in force, by (session id, uid)."""
        with self._lock:
            return dict(self._records)


def session_request(
    session: Session,
    accounts: SessionAccounts,
    uid: int,
    pid: int,
    *,
    account: str | None = None,
    to_default: bool = False,
    session_id: int | None = None,
) -> dict:
    """The daemon's side of newacct for process `pid` of `uid` (from SO_PEERCRED):
    set (`account`) or clear (`to_default`) the account of the caller's session (or
    of `session_id`, which the caller must own), and say what the session is charged
    to.  Returns the reply's fields; NotFound, OptionError or UdbError when refused."""
    if account and to_default:
        raise OptionError("give an account or default, not both")
    # The account first: one the caller may not take is refused whatever the session.
    name, acids = user_acids(session, uid)
    acid = check_account(session, uid, account) if account else None
    sid = caller_session(uid, pid, session_id)
    if acid is not None:
        accounts.choose(sid, uid, acid)
    elif to_default:
        accounts.clear(sid, uid)
    current, chosen = accounts.current(sid, uid, acids)
    names = account_names(session)
    return {
        "user": name,
        "uid": uid,
        "session": sid,
        "acid": current,
        "account": names.get(current) if current is not None else None,
        "default": not chosen,
        "acids": acids,
        "share_by_account": load_consts(session).share_by_account,
    }
