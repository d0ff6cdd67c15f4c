"""Guard, "Floods and slow clients", as unprivileged users make them: real uids (setuid
children, tests/asuser.py) against a running `shrdaemon --enforcer none`, each flood
bounded in count and time (tests/floods.py).  No timing is asserted: what the floods
cost in latency, memory and log is measured by tests/bench/bench_floods.py."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click._textwrap  # noqa: F401 - the setuid children cannot import from /root
import pytest
import sqlalchemy.dialects.sqlite  # noqa: F401
from asuser import UIDS, forked, remove, shared_dir
from floods import ask, flood, open_idle, unread_udb

from udb import directives
from udb.remote import call
from udb.session import dispose_all, open_udb

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "examples" / "acme" / "acme.udb"
#: Five users: one floods, the others hold connections or ask.
FLOODER, OTHER, THIRD = UIDS
FOURTH, FIFTH = 62004, 62005
#: Limits shorter than the defaults so that the held connections go in seconds, and a
#: small budget of unread reply bytes so that a UDB of a few thousand users meets it.
MAX_UNREAD = 1_000_000
LIMITS = f"request_timeout=4,reply_timeout=4,max_unread={MAX_UNREAD}"
#: Users with long comments: a `udb` reply of a few hundred kB.
CROWD = "".join(
    f"create:x{i}:uid:{20000 + i}:resgrp:Proj2:shares:1:comment:{'c' * 200}:\n" for i in range(3000)
)

pytestmark = pytest.mark.requires("root")  # the clients run as other real uids (setuid)


class Daemon:
    def __init__(self, base: Path):
        self.base = base
        self.db = base / "private" / "udb.sqlite"
        self.sock = str(base / "run" / "shrdaemon.sock")
        self.log = base / "shrdaemon.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), FAIRSHARE_SERVER_LIMITS=LIMITS)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fairshare.cli.shrdaemon", "--enforcer", "none"]
            + ["--udb", str(self.db), "--socket", self.sock, "--log-file", str(self.log)]
            # the flooders' uids stay with unknown: the log's lines about them are the socket's
            + ["--new-uids", "unknown"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                call(self.sock, "hello", wait=2)
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        raise AssertionError(f"shrdaemon did not come up:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    def lines_about(self, uid: int, since: int = 0) -> list[str]:
        return [ln for ln in self.log.read_text().splitlines()[since:] if f"uid {uid} " in ln]

    def log_length(self) -> int:
        return len(self.log.read_text().splitlines())


@pytest.fixture(scope="module")
def daemon():
    base = shared_dir()
    base.chmod(0o755)
    (base / "private").mkdir(mode=0o700)
    (base / "run").mkdir(mode=0o755)
    d = Daemon(base)
    directives.run(
        open_udb(f"sqlite:///{d.db}", create=True),
        directives.parse(ACME.read_text() + CROWD, "site"),
    )
    dispose_all()
    d.db.chmod(0o600)
    d.start()
    yield d
    d.stop()
    remove(base)


def background(fn, uid: int):
    """Run `fn` as `uid` in a forked child from a thread; the thread's result list."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(forked(fn, uid=uid)))
    t.start()
    return t, out


def test_a_flood_from_one_uid_fills_no_log_and_every_other_request_is_answered(daemon):
    """One uid connects and hangs up as fast as it can for 5 s (before: a refusal
    logged for every connection, 23 MB in 10 s); another user asks meanwhile."""
    since = daemon.log_length()
    flooder, made = background(lambda: flood(daemon.sock, 5.0, 200_000), FLOODER)
    time.sleep(0.5)
    took = forked(lambda: ask(daemon.sock, 15, 0.2), uid=OTHER)
    flooder.join()
    assert made[0] > 2000  # it was a flood
    assert None not in took, took  # every request of the other user was answered
    about = daemon.lines_about(FLOODER, since)
    # At most 20 lines about its clients per 10 s window, and one saying what was left out.
    assert len(about) <= 2 * (20 + 1), about[:5]
    assert not daemon.lines_about(OTHER, since)


def test_a_user_with_no_connection_gets_one_while_four_uids_hold_64_each(daemon):
    """Four uids holding 64 idle connections each took all 256 slots before, and a
    fifth user was told "busy: 256 clients already"."""
    r, w = os.pipe()
    holders = []
    for uid in (FLOODER, OTHER, THIRD, FOURTH):
        pid = os.fork()
        if pid == 0:  # a holder: opens its connections, then waits to be let go
            try:
                os.close(w)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                held = open_idle(daemon.sock, 64)
                os.read(r, 1)
                for s in held:
                    s.close()
            finally:
                os._exit(0)
        holders.append(pid)
    os.close(r)
    try:
        time.sleep(1.5)  # every holder has connected (well within request_timeout=4)
        said = forked(lambda: call(daemon.sock, "hello", wait=10), uid=FIFTH)
        assert said["ok"] and said["uid"] == FIFTH
    finally:
        os.close(w)
        for pid in holders:
            os.waitpid(pid, 0)
    refused = [
        ln for ln in daemon.log.read_text().splitlines() if "kept for users holding none" in ln
    ]
    assert refused  # the fourth uid was held to what the reserve leaves


def test_one_uid_cannot_hold_more_than_its_share_of_unread_replies(daemon):
    """64 `udb` requests whose replies are never read (before: each reply built and
    held in full, 1.5 GB on a 100,000-user UDB): past MAX_UNREAD bytes the uid's
    requests get "busy" instead of a reply."""
    size = len(base64.b64decode(call(daemon.sock, "udb")["image"])) * 4 // 3
    assert size > MAX_UNREAD / 4  # a few replies fill the budget

    def hog():
        held = unread_udb(daemon.sock, 64)
        time.sleep(1.5)
        kinds = []
        for s in held:
            f = s.makefile("rb")
            try:
                reply = json.loads(f.readline() or b"{}")
            except (OSError, ValueError):
                reply = {}
            kinds.append("image" if reply.get("ok") else reply.get("error", "closed")[:40])
            s.close()
        return kinds

    kinds = forked(hog, uid=FLOODER)
    images = kinds.count("image")
    busy = sum(k.startswith("busy:") for k in kinds)
    assert 1 <= images <= MAX_UNREAD // size + 2 + 1, kinds
    assert busy >= 64 - images - 2, kinds
    assert forked(lambda: call(daemon.sock, "hello"), uid=OTHER)["ok"]


def test_deeply_nested_json_from_a_user_is_refused_as_malformed(daemon):
    since = daemon.log_length()

    def nested():
        import socket

        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(daemon.sock)
        s.sendall(b"[" * 30000 + b"]" * 30000 + b"\n")
        reply = json.loads(s.makefile("rb").readline())
        s.close()
        return reply

    reply = forked(nested, uid=THIRD)
    assert reply == {"ok": False, "error": "malformed request: nested too deeply"}
    new = daemon.log.read_text().splitlines()[since:]
    assert not [ln for ln in new if "internal error" in ln or "failed" in ln or "Traceback" in ln]
