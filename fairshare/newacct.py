"""newacct's per-session accounts (Share by Account mode, guide 4.4.5).

newacct records the account a login session works under as one small file in a
spool directory (default /run/fairshare/accounts; sticky and world-writable like
/tmp, created by shrdaemon): the file is named by the session id (the shell's
``getsid``) and holds the account number; it is owned by the user who wrote it.
Every process of that session (field 6 of /proc/PID/stat) is then charged to that
account from the daemon's next cycle; the other sessions keep the user's default
account, the first of the entry's acids.

The daemon trusts a session file only when its owner is the uid of the process
being mapped and the account is one of that user's acids, so nobody can charge
another user's session, or an account they do not have, by writing a file.
Files of sessions that no longer exist are removed by the daemon.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from fairshare.collect import ProcessSample, Sample
from udb.errors import NotFound, OptionError, UdbError
from udb.models import SHF_ACCOUNT, Account, Entry

#: The spool directory unless --spool or FAIRSHARE_ACCOUNTS says otherwise.
DEFAULT_SPOOL = "/run/fairshare/accounts"


def spool_path(option: str | None = None) -> Path:
    """The session-accounts directory: `option`, else $FAIRSHARE_ACCOUNTS, else the default."""
    return Path(option or os.environ.get("FAIRSHARE_ACCOUNTS") or DEFAULT_SPOOL)


@dataclass(frozen=True)
class SessionAccount:
    """A session file: the session id, the uid owning the file and the account number."""

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
    if text.isdigit():
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


# -- the session files ---------------------------------------------------------------------


def _session_file(spool: Path, sid: int) -> Path:
    return spool / str(sid)


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


def write_session_account(spool: Path, sid: int, acid: int) -> Path:
    """Record `acid` for session `sid` (atomically: a new file renamed into place), owned
    by the caller.  UdbError when the spool is missing or another user owns the name."""
    if not spool.is_dir():
        raise UdbError(f"{spool}: no such directory (is shrdaemon running?)")
    _visible(sid)
    target = _session_file(spool, sid)
    try:
        st = target.lstat()
    except FileNotFoundError:
        st = None
    if st is not None and st.st_uid != os.geteuid() and os.geteuid() != 0:
        raise UdbError(f"{target}: belongs to uid {st.st_uid}, not you: ask root to remove it")
    try:
        fd, tmp = tempfile.mkstemp(dir=spool, prefix=f".{sid}.")
        with os.fdopen(fd, "w") as f:
            f.write(f"{acid}\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as err:
        raise UdbError(f"{target}: cannot write: {err.strerror}") from None
    return target


def clear_session_account(spool: Path, sid: int) -> bool:
    """Drop session `sid`'s record (back to the default account); True if there was one."""
    _visible(sid)
    try:
        _session_file(spool, sid).unlink()
    except FileNotFoundError:
        return False
    except OSError as err:
        raise UdbError(f"{_session_file(spool, sid)}: cannot remove: {err.strerror}") from None
    return True


def read_session_account(spool: Path, sid: int) -> SessionAccount | None:
    """Session `sid`'s record (None when there is none or it cannot be parsed)."""
    return _read(_session_file(spool, sid))


def _read(path: Path) -> SessionAccount | None:
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > 64:
            return None
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not (path.name.isdigit() and text.isdigit()):
        return None
    return SessionAccount(sid=int(path.name), uid=st.st_uid, acid=int(text))


def current_account(
    spool: Path, sid: int, uid: int, acids: Sequence[int]
) -> tuple[int | None, bool]:
    """The account session `sid` of `uid` is charged to, and whether newacct chose it
    (False: the default, the first of `acids`; None when the user has no acids)."""
    rec = read_session_account(spool, sid) if sid > 0 else None
    if rec is not None and rec.uid == uid and rec.acid in acids:
        return rec.acid, True
    return (acids[0] if acids else None), False


# -- the daemon's side: the account_of hook ---------------------------------------------------


class SessionAccounts:
    """shrdaemon's `account_of` hook: the account newacct set for a process's session.

    The daemon calls `refresh(sample, acids)` once a cycle (acids: user uid -> acids)
    before it maps the sample's processes; calling the object with a ProcessSample
    then gives the account to charge, or None for the user's default.
    """

    def __init__(self, spool: Path | str | None = None, create: bool = True) -> None:
        self.spool = Path(spool) if spool is not None else spool_path()
        self._by_sid: dict[int, SessionAccount] = {}
        if create and os.geteuid() == 0:
            try:
                self.spool.mkdir(parents=True, exist_ok=True)
                os.chmod(self.spool, 0o1777)
            except OSError:
                pass  # newacct says so when it cannot write there

    def refresh(self, sample: Sample, acids: Mapping[int, Sequence[int]]) -> None:
        """Re-read the spool: keep the records whose owner has the account; remove the
        records of sessions no process of `sample` belongs to (when sessions are known)."""
        live = {p.sid for p in sample.processes if p.sid > 0}
        found: dict[int, SessionAccount] = {}
        try:
            names = os.listdir(self.spool)
        except OSError:
            names = []
        for name in names:
            if not name.isdigit():
                continue
            path = self.spool / name
            rec = _read(path)
            if rec is None:
                continue
            if live and rec.sid not in live:
                try:
                    path.unlink()
                except OSError:
                    pass
                continue
            if rec.acid in acids.get(rec.uid, ()):
                found[rec.sid] = rec
        self._by_sid = found

    def __call__(self, p: ProcessSample) -> int | None:
        rec = self._by_sid.get(p.sid)
        if rec is not None and p.sid > 0 and rec.uid == p.uid:
            return rec.acid
        return None

    @property
    def sessions(self) -> dict[int, SessionAccount]:
        """The trusted records of the last refresh, by session id."""
        return dict(self._by_sid)
