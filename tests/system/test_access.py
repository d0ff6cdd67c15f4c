"""Everyone reaches the suite through shrdaemon's socket (issue 14), tried as real uids.

A root-owned 0600 UDB in a 0700 directory, a running `shrdaemon --enforcer none
--socket S` with S in a directory every uid can reach, and the commands run in
setuid children (tests/asuser.py) as uids with no passwd entry: their login is
their number.  The hostile clients run while the test watches the daemon's
published cycles keep time.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click._textwrap  # noqa: F401 - the setuid children cannot import from /root
import pytest
import rich.live  # noqa: F401 - shrview imports it for -c only; the children cannot import from /root
import rich.text  # noqa: F401
import sqlalchemy.dialects.sqlite  # noqa: F401
from asuser import UIDS, forked, remove, run_as, shared_dir
from click.testing import CliRunner
from integration.test_server import _ask, _connect

from fairshare.cli.newacct import main as newacct
from fairshare.cli.shrdist import main as shrdist
from fairshare.cli.shrinfo import main as shrinfo
from fairshare.cli.shrsync import main as shrsync
from fairshare.cli.shrtree import main as shrtree
from fairshare.cli.shrview import main as shrview
from fairshare.core.consts import consts_from_mapping
from fairshare.report.lnodes import ViewRequest
from fairshare.report.published import Source
from fairshare.store.config import load_consts, save_consts
from udb import directives
from udb.cli.udbsee import main as udbsee
from udb.image import open_image
from udb.remote import Reader, call
from udb.session import dispose_all, open_udb, write_session

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "examples" / "acme" / "acme.udb"
DELTA = 1.0
#: The socket's limits for this daemon (FAIRSHARE_SERVER_LIMITS, man/shrdaemon.8): shorter
#: than the defaults (5 s to send the request, 10 s to take the reply), so that the
#: hostile clients are dropped in seconds, and still ample for an honest client on a
#: loaded machine.
REQUEST_TIMEOUT, REPLY_TIMEOUT = 2.0, 3.0
LIMITS = f"request_timeout={REQUEST_TIMEOUT:g},reply_timeout={REPLY_TIMEOUT:g}"
ME, ADMIN, OTHER = UIDS
#: A uid with no user entry whose number is the account "lab"'s.
LAB = 62004

#: Entries of the test uids: ME is a user in Proj3 with a quota, a comment, a password
#: hash and two accounts; OTHER has a quota too; ADMIN administers Proj3
#: (shrdist.auth).  The account entry "lab" has the number LAB, a quota and a comment.
PEOPLE = f"""
acid:acct1:5001:
acid:acct2:5002:
acid:acct3:5003:
acid:lab:{LAB}:
create:me:uid:{ME}:resgrp:Proj3:shares:10:acids:5001,5003:passwd:$6$salt$hash:
update:me:cpuquota:7200:cpuquotaused:12:comment:room 12:
create:admin:uid:{ADMIN}:resgrp:Proj3:shares:10:
create:other:uid:{OTHER}:resgrp:Proj3:shares:10:acids:5002:cpuquota:3600:comment:secret:
create:lab:uid:{LAB}:shflags:01000000:resgrp:Proj3:shares:5:cpuquota:900:comment:lab notes:
"""
#: Enough users that the UDB's image (about 1 MB) outgrows the socket's buffers, so a
#: client hanging up mid-reply is seen by the daemon.
CROWD = "".join(
    f"create:x{i}:uid:{20000 + i}:resgrp:Proj2:shares:1:comment:{'c' * 200}:\n" for i in range(3000)
)


def udb_digest(path: Path) -> str:
    """A digest of the UDB's configuration: entries, accounts and the shrdist log."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        h = hashlib.sha256()
        for table in ("entries", "accounts", "share_changes"):
            h.update(repr(conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()).encode())
        return h.hexdigest()
    finally:
        conn.close()


class Site:
    """The running daemon and where everything is."""

    def __init__(self, base: Path):
        self.base = base
        self.db = base / "private" / "udb.sqlite"
        self.sock = str(base / "run" / "shrdaemon.sock")
        self.log = base / "shrdaemon.log"
        self.auth = base / "shrdist.auth"
        self.proc: subprocess.Popen | None = None

    @property
    def udb(self) -> list[str]:
        return ["--udb", str(self.db), "--socket", self.sock]

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), FAIRSHARE_SERVER_LIMITS=LIMITS)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fairshare.cli.shrdaemon", "--enforcer", "none"]
            + ["--udb", str(self.db), "--socket", self.sock, "--auth", str(self.auth)]
            + ["--log-file", str(self.log)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if call(self.sock, "cycle", wait=2)["cycle"]:  # up, and one cycle published
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.1)
        raise AssertionError(f"shrdaemon did not come up:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self.proc = None

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def cycles(self) -> list[tuple[int, float]]:
        """(cycle, time) as published now."""
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT cycle, time FROM lnode_cycles").fetchall()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def site():
    base = shared_dir()
    base.chmod(0o755)  # shrdaemon refuses a socket or UDB below a directory others may write
    (base / "private").mkdir(mode=0o700)
    (base / "run").mkdir(mode=0o755)
    s = Site(base)
    url = f"sqlite:///{s.db}"
    engine = open_udb(url, create=True)  # as udbgen makes it
    directives.run(engine, directives.parse(ACME.read_text() + PEOPLE + CROWD, "site"))
    with write_session(engine) as ses:
        save_consts(ses, consts_from_mapping({"delta": DELTA}, load_consts(ses)))
    dispose_all()
    s.db.chmod(0o600)
    s.auth.write_text(f"{ADMIN} Proj3\n")
    s.auth.chmod(0o644)
    s.start()
    # Warm up as root: every module the commands import lazily is loaded before the forks.
    for cmd, args in (
        (shrinfo, []),
        (shrview, ["-dm"]),
        (shrview, ["-dg"]),
        (shrtree, ["-l"]),
        (udbsee, ["-a"]),
        (shrdist, ["--history"]),
    ):
        CliRunner().invoke(cmd, s.udb + args, catch_exceptions=False)
    open_image(base64.b64decode(call(s.sock, "udb")["image"])).dispose()
    yield s
    s.stop()
    remove(base)


pytestmark = pytest.mark.requires("root")  # commands run as other real uids (setuid)


def test_the_udb_is_root_only_and_the_socket_open_to_all(site):
    assert oct(site.db.stat().st_mode & 0o777) == "0o600"
    assert oct(site.db.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(os.stat(site.sock).st_mode & 0o777) == "0o666"
    hello = forked(lambda: call(site.sock, "hello"), uid=ME)
    assert (hello["uid"], hello["login"], hello["v"]) == (ME, str(ME), 1)


def test_an_ordinary_uid_reads_everything_through_the_daemon(site):
    code, out = run_as(ME, shrinfo, site.udb)
    assert code == 0, out
    assert "me" in out and "Proj3" in out
    code, out = run_as(ME, shrview, [*site.udb, "-dm"])
    assert code == 0, out
    assert "SHRVIEW Type:monitor" in out and "Maint" in out  # root's processes
    code, out = run_as(ME, shrview, [*site.udb, "-dg", "--json"])
    assert code == 0, out
    assert json.loads(out.splitlines()[-1])["display"] == "graph"
    code, out = run_as(ME, shrview, [*site.udb, "-dm", "-r", "3", "--json"])
    assert code == 0, out
    cycles = [json.loads(line)["cycle"] for line in out.splitlines()]
    # Repeat mode waits for new cycles (a loaded machine may make one late).
    assert len(cycles) == 3 and cycles == sorted(cycles) and cycles[0] < cycles[-1]
    code, out = run_as(ME, shrtree, [*site.udb, "-l"])
    assert code == 0, out
    assert "Proj3" in out and "other" in out
    code, out = run_as(ME, udbsee, [*site.udb, "-a"])
    assert code == 0, out
    assert "create:Proj3:" in out and "create:other:" in out
    assert "stored state" not in out


def test_shrtree_through_the_daemon_names_its_udb_and_sees_the_groups_star(site):
    """Without --udb an ordinary user's shrtree -l reads the daemon's copy: the header
    names the daemon's UDB (not the caller's default), and no group is flagged Pw
    (the copy keeps a group's passwd *)."""
    code, out = run_as(ME, shrtree, ["--socket", site.sock, "-l"])
    assert code == 0, out
    assert f"UDB path:      {site.db}" in out.splitlines()
    assert "Pw" not in out and "Proj3" in out


def test_every_shrview_display_and_continuous_mode_through_the_daemon(site):
    for letter in "maslng":
        code, out = run_as(ME, shrview, [*site.udb, f"-d{letter}"])
        assert code == 0, (letter, out)
        assert "stored state" not in out and "no daemon" not in out

    import asyncio

    from textual.widgets import Static

    from fairshare.tui.monitor import Monitor
    from fairshare.tui.views import ShrviewView

    def continuous():
        source = Source(Reader(str(site.db), site.sock), None, None)
        app = Monitor(ShrviewView(source, ViewRequest(display="monitor")), 0.25)

        async def drive():
            async with app.run_test(size=(100, 40)) as pilot:
                await pilot.pause(1.5)
                screen = str(app.query_one("#frame", Static).content)
                await pilot.press("q")
            return screen

        screen = asyncio.run(drive())
        return app.return_value, source.reader.through_daemon, screen

    continuous()  # as root first: Textual's lazily imported modules are loaded before the fork
    shown, through, screen = forked(continuous, uid=ME)
    assert shown >= 2 and through
    assert "SHRVIEW Type:monitor" in screen


def test_udbsee_never_shows_passwords_and_hides_other_users_private_fields(site):
    code, out = run_as(ME, udbsee, [*site.udb, "--json", "me", "other"])
    assert code == 0, out
    mine, theirs = json.loads(out)
    assert "passwd" not in mine and "passwd" not in theirs
    assert (mine["cpuquota"], mine["cpuquotaused"], mine["comment"]) == (7200, 12, "room 12")
    assert not {"cpuquota", "cpuquotaused", "comment"} & set(theirs)
    assert theirs["shares"] == 10 and theirs["acids"] == [5002]
    code, out = run_as(ME, udbsee, [*site.udb, "other"])
    assert "cpuquota" not in out and "secret" not in out and "passwd" not in out
    # Nor does the image hold them, not even in its free pages.
    image = forked(lambda: call(site.sock, "udb")["image"], uid=ME)
    raw = base64.b64decode(image)
    assert b"$6$salt$hash" not in raw and b"secret" not in raw
    # Root sees everything.
    r = CliRunner().invoke(udbsee, [*site.udb, "--json", "other"])
    assert json.loads(r.output)[0]["cpuquota"] == 3600


def test_a_uid_that_is_an_accounts_or_a_groups_number_owns_nothing_of_it(site):
    """Guard: a uid equal to an account's number or a group's uid was taken for that
    entry's owner (uid 2101 saw account p1a-sim's CPU quota and its comment).  Only a
    user entry has an owner."""
    for uid, name in ((LAB, "lab"), (333, "Proj3")):  # ACME's Proj3 has uid 333
        code, out = run_as(uid, udbsee, [*site.udb, "--json", name])
        assert code == 0, out
        (entry,) = json.loads(out)
        assert not {"cpuquota", "cpuquotaused", "comment"} & set(entry), (uid, entry)
        raw = base64.b64decode(forked(lambda: call(site.sock, "udb")["image"], uid=uid))
        assert b"lab notes" not in raw and b"Project 3" not in raw
    code, out = run_as(ME, udbsee, [*site.udb, "--json", "me"])  # a user's own: shown
    assert json.loads(out)[0]["comment"] == "room 12"


def test_an_unlisted_uid_may_not_redistribute_and_nothing_changes(site):
    before = udb_digest(site.db)
    code, out = run_as(ME, shrdist, [*site.udb, "-g", "Proj3", "-b", "me=99"])
    assert code == 2, out
    assert "62001 may not redistribute shares: not listed in" in out
    assert len(out.strip().splitlines()) == 1
    # A listed administrator may not reach outside the group either.
    code, out = run_as(ADMIN, shrdist, [*site.udb, "-g", "Proj2", "-b", "u9=1"])
    assert code == 2 and "may not redistribute shares in Proj2" in out
    assert udb_digest(site.db) == before
    refused = [line for line in site.log_lines() if "shrdist refused" in line]
    assert any(f"uid {ME} " in line for line in refused)
    assert any(f"uid {ADMIN} " in line for line in refused)


def test_a_listed_administrator_redistributes_recorded_under_their_login(site):
    code, out = run_as(ADMIN, shrdist, [*site.udb, "-g", "Proj3", "-b", "me=30", "--json"])
    assert code == 0, out
    doc = json.loads(out)
    assert doc["written"] and {m["name"]: m["shares"] for m in doc["members"]}["me"] == 30
    code, out = run_as(ME, shrdist, [*site.udb, "--history", "--json", "-g", "Proj3"])
    assert code == 0, out
    last = json.loads(out)[-1]
    assert (last["who"], last["member"], last["old"], last["new"]) == (str(ADMIN), "me", 10, 30)
    # Test mode through the daemon writes nothing.
    before = udb_digest(site.db)
    code, out = run_as(ADMIN, shrdist, [*site.udb, "-g", "Proj3", "-p", "-b", "me=1", "--json"])
    assert code == 0 and not json.loads(out)["written"]
    assert udb_digest(site.db) == before


def test_newacct_takes_only_the_callers_accounts_for_the_callers_session(site):
    sock = ["--socket", site.sock]

    def in_my_session():
        refused = CliRunner().invoke(newacct, [*sock, "acct2"])
        chosen = CliRunner().invoke(newacct, [*sock, "acct1", "--json"])
        return refused.exit_code, refused.output, chosen.exit_code, chosen.output

    code, out, code2, out2 = forked(in_my_session, uid=ME, new_session=True)
    assert code == 2 and "acct2: not one of me's accounts" in out
    assert code2 == 0, out2
    doc = json.loads(out2)
    assert (doc["acid"], doc["account"], doc["default"]) == (5001, "acct1", False)
    # Another user's session, named in a request, is refused.
    victim = subprocess.Popen(
        ["setsid", "sleep", "30"], preexec_fn=lambda: (os.setgid(OTHER), os.setuid(OTHER))
    )
    try:
        time.sleep(0.2)
        sid = os.getsid(victim.pid)
        assert sid == victim.pid

        def name_their_session():
            try:
                call(site.sock, "newacct", account="acct1", session=sid)
            except Exception as err:  # noqa: BLE001
                return str(err)
            return "accepted"

        said = forked(name_their_session, uid=ME)
        assert f"session {sid} is not yours" in said
        assert any(
            f"uid {ME} " in line and f"newacct refused: session {sid} is not yours" in line
            for line in site.log_lines()
        )
    finally:
        victim.kill()
        victim.wait()


def test_users_sharing_a_session_keep_their_own_accounts(site):
    """Guard: newacct's choice was the session's, so in a session several users share
    (a login, then su), one user's newacct silently replaced another's choice."""
    sock = ["--socket", site.sock]

    def newacct_as(uid, *args):
        def run():
            r = CliRunner().invoke(newacct, [*sock, *args, "--json"])
            assert r.exit_code == 0, r.output
            return json.loads(r.output)

        return forked(run, uid=uid)

    def one_session():  # a login session (setsid), and two users working in it
        chose = newacct_as(ME, "acct3")
        newacct_as(OTHER, "acct2")  # OTHER, su'd into the session, chooses too
        newacct_as(OTHER, "-d")  # and goes back to the default: OTHER's own record only
        return os.getsid(0), chose, newacct_as(ME), newacct_as(OTHER)

    sid, chose, mine, theirs = forked(one_session, new_session=True)
    assert chose["session"] == mine["session"] == theirs["session"] == sid
    assert (mine["account"], mine["default"]) == ("acct3", False)
    assert (theirs["account"], theirs["default"]) == ("acct2", True)


def test_shrsync_is_for_root_only(site):
    code, out = run_as(ME, shrsync, [*site.udb, "-u"])
    assert code == 2 and "only root may synchronise" in out
    done = call(site.sock, "shrsync", kind="update", wait=30)["done"]
    assert done["kind"] == "update" and done["lnodes"] >= 1


# -- hostile clients -------------------------------------------------------------------------


class CycleWatch:
    """Samples the published (cycle, time) while a test runs."""

    def __init__(self, site: Site):
        self.site, self.seen, self.stop = site, {}, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            for cycle, t in self.site.cycles():
                self.seen[cycle] = t
            time.sleep(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def worst_gap(self) -> float:
        """The longest time between two consecutive published cycles (s)."""
        cycles = sorted(self.seen)
        gaps = [
            self.seen[b] - self.seen[a]
            for a, b in zip(cycles, cycles[1:], strict=False)
            if b == a + 1
        ]
        assert len(gaps) >= 3, f"too few cycles seen: {cycles}"
        return max(gaps)


def test_hostile_clients_while_cycles_keep_time(site):
    before = udb_digest(site.db)
    logged = len(site.log_lines())
    with CycleWatch(site) as watch:
        silent = _connect(site.sock)  # says nothing at all
        # Clients that ask for the UDB and never read the reply: more than the workers.
        slow = [_connect(site.sock) for _ in range(8)]
        for c in slow:
            c.sendall(b'{"v": 1, "request": "udb"}\n')
        garbage = _connect(site.sock)
        garbage.sendall(b"{this is not json\n")
        assert "malformed request" in json.loads(garbage.recv(4096))["error"]
        wrong = _connect(site.sock)
        wrong.sendall(b'{"v": 99, "request": "hello"}\n')
        assert "protocol version 99" in json.loads(wrong.recv(4096))["error"]
        long = _connect(site.sock)
        try:
            long.sendall(b"x" * (1 << 20))  # 1 MiB, no newline
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon hung up once it had seen too much
        # A client that asks for the UDB, reads a little and hangs up mid-reply.
        for _ in range(3):
            rude = _connect(site.sock)
            rude.sendall(b'{"v": 1, "request": "udb"}\n')
            rude.recv(10)
            rude.close()
        # 200 clients at once, each connected before any speaks.
        crowd = [_connect(site.sock) for _ in range(200)]
        assert _ask(site.sock, "hello")["ok"]  # everyone else is still answered
        for c in crowd:
            c.sendall(b'{"v": 1, "request": "cycle"}\n')
        answers = [json.loads(c.makefile("rb").readline()) for c in crowd]
        for c in crowd:
            c.close()
        assert all(a["ok"] and a["cycle"] >= 1 for a in answers)
        # A burst of 1,000 requests from 50 concurrent clients.
        kinds = (["udb"] + ["cycle", "hello"] * 12) * 40
        started = time.monotonic()
        with ThreadPoolExecutor(50) as pool:
            replies = list(pool.map(lambda k: _ask(site.sock, k), kinds))
        burst = time.monotonic() - started
        assert all(r["ok"] for r in replies), [r for r in replies if not r["ok"]][:3]
        silent.settimeout(REQUEST_TIMEOUT + 30)
        assert silent.recv(100) == b""  # dropped once its REQUEST_TIMEOUT is past
        # The slow readers are dropped once their REPLY_TIMEOUT is past.
        deadline = time.monotonic() + REPLY_TIMEOUT + 30
        while time.monotonic() < deadline and (
            sum("did not take the reply to udb" in line for line in site.log_lines()[logged:]) < 8
        ):
            time.sleep(0.1)
        for s in (silent, garbage, wrong, long, *slow):
            s.close()
        time.sleep(2 * DELTA)
    # Cycles went on all along (how late the worst one was: tests/bench/bench_responsiveness.py).
    gap = watch.worst_gap()
    print(f"burst of 1,000 requests from 50 clients: {burst:.2f} s; worst cycle gap {gap:.2f} s")
    assert udb_digest(site.db) == before
    new = site.log_lines()[logged:]
    assert sum("malformed JSON" in line for line in new) == 1
    assert sum("protocol version 99 not supported" in line for line in new) == 1
    assert sum("request longer than 65536 bytes" in line for line in new) == 1
    assert sum(f"sent no complete request within {REQUEST_TIMEOUT:g} s" in ln for ln in new) == 1
    assert sum("left before the reply to udb was sent" in line for line in new) >= 1
    assert sum(f"did not take the reply to udb within {REPLY_TIMEOUT:g} s" in ln for ln in new) == 8
    assert all("Traceback" not in line for line in new)


def test_one_uid_cannot_take_every_connection(site):
    def crowd():
        held = [_connect(site.sock) for _ in range(64)]
        extra = _connect(site.sock)
        said = json.loads(extra.recv(4096) or b"{}")
        for c in (*held, extra):
            c.close()
        return said

    said = forked(crowd, uid=OTHER)
    assert not said["ok"] and "busy: 64 connections of this uid already" in said["error"]
    assert any(
        f"uid {OTHER} " in line and "refused: 64 connections" in line for line in site.log_lines()
    )


def test_the_daemon_refuses_a_second_daemon_on_its_socket(site):
    other = site.base / "other.sqlite"
    open_udb(str(other), create=True)  # as udbgen makes it: the daemon creates no UDB
    r = subprocess.run(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--enforcer", "none", "--once"]
        + ["--udb", str(other), "--socket", site.sock],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    said = r.stderr.strip().splitlines()[-1]
    assert said.endswith(
        f"{site.sock}: another shrdaemon is listening there: give another --socket"
    )
    assert _ask(site.sock, "hello")["ok"]


# -- without a daemon ---------------------------------------------------------------------------


def test_without_a_daemon_a_readable_udb_is_read_read_only(tmp_path):
    base = shared_dir()
    try:
        db = base / "udb.sqlite"
        engine = open_udb(f"sqlite:///{db}", create=True)
        directives.run(engine, directives.parse(ACME.read_text() + PEOPLE, "acme+people"))
        dispose_all()
        db.chmod(0o644)
        base.chmod(0o755)  # nobody but root may create the -wal or -shm file here
        sock = str(base / "none.sock")
        args = ["--udb", str(db), "--socket", sock]
        code, out = run_as(ME, shrinfo, args)
        assert code == 0, out
        assert f"{sock}: no such socket" in out and "stored state" in out
        assert "me" in out
        code, out = run_as(ME, shrtree, [*args, "-l"])
        assert code == 0 and "stored state" in out
        code, out = run_as(ME, udbsee, [*args, "me", "Proj3"])
        assert code == 0 and "stored state" in out
        assert "create:me:" in out and "passwd" not in out  # not even Proj3's *
        assert sorted(p.name for p in base.iterdir()) == ["udb.sqlite"]  # nothing created
        db.chmod(0o600)  # unreadable and no daemon: one line, exit 2
        for cmd, extra in ((shrinfo, []), (shrview, ["-dm"]), (udbsee, ["-a"])):
            code, out = run_as(ME, cmd, [*args, *extra])
            assert code == 2, out
            assert len(out.strip().splitlines()) == 1, out
            assert f"cannot read UDB {db}" in out and "no such socket" in out
        code, out = run_as(ME, newacct, ["--socket", sock])
        assert code == 2 and "no such socket" in out
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(sock)  # what a killed daemon leaves: a socket nobody listens on
        dead.close()
        os.chmod(sock, 0o666)
        code, out = run_as(ME, shrinfo, args)
        assert code == 2 and len(out.strip().splitlines()) == 1, out
        assert f"{sock}: connection refused: shrdaemon is not running" in out
    finally:
        remove(base)
