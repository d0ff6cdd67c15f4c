"""shrdaemon's socket server in this process: a stale socket replaced, never a file; no
socket in a directory others can write, and its mode set as it is bound; no
socket at all with --socket ''; the limits a test may shorten (FAIRSHARE_SERVER_LIMITS).
The server as every uid meets it, hostile clients included: tests/system/test_access.py."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading

import pytest
from click.testing import CliRunner

from fairshare.cli.shrdaemon import main as shrdaemon
from fairshare.cli.shrdaemon import server_limits
from fairshare.core.consts import consts_from_mapping
from fairshare.daemon.trust import Untrusted
from fairshare.server.clients import Held
from fairshare.server.server import Limits, Server
from fairshare.store.config import load_consts, save_consts
from udb.errors import OptionError, UdbError
from udb.remote import connect
from udb.session import dispose_all, open_udb, write_session


def _connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    connect(s, path, 30)
    return s


def _ask(path: str, request: str) -> dict:
    s = _connect(path)
    try:
        s.sendall(json.dumps({"v": 1, "request": request}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        return json.loads(data)
    finally:
        s.close()


def test_an_empty_socket_path_serves_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'u.sqlite'}"
    with write_session(open_udb(url, create=True)) as ses:
        save_consts(ses, consts_from_mapping({"delta": 0.2}, load_consts(ses)))
    log = tmp_path / "log"
    args = ["--udb", url, "--enforcer", "none", "--once", "--socket", "", "--log-file", str(log)]
    r = CliRunner().invoke(shrdaemon, args)
    assert r.exit_code == 0, r.output
    text = log.read_text()
    assert "--socket '': serving no requests" in text and "serving requests on" not in text
    assert list(tmp_path.glob("*.sock")) == []


def test_the_daemon_replaces_a_stale_socket_but_never_a_file(tmp_path):
    engine = open_udb(f"sqlite:///{tmp_path / 'u.sqlite'}", create=True)
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()  # bound, never listening: what a killed daemon leaves
    srv = Server(str(stale), engine, "h", None, tmp_path / "auth")
    srv.start()
    try:
        assert _ask(str(stale), "hello")["ok"]
    finally:
        srv.stop()
    assert not stale.exists()
    # The idle selector thread waits without a timeout: stop must wake it to end it.
    assert "shrdaemon-socket" not in [t.name for t in threading.enumerate()]
    precious = tmp_path / "precious"
    precious.write_text("keep me")
    with pytest.raises(UdbError, match="exists and is not a socket: not replaced"):
        Server(str(precious), engine, "h", None, tmp_path / "auth").start()
    assert precious.read_text() == "keep me"


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_socket_directory_others_can_write_is_refused(tmp_path, mode):
    """Guard: --socket took any directory, where others could swap the socket for a link
    between bind and chmod, or for a socket of their own."""
    engine = open_udb(f"sqlite:///{tmp_path / 'u.sqlite'}", create=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    sock = shared / "s.sock"
    with pytest.raises(Untrusted, match=rf"^--socket {sock}: directory {shared}: writable by"):
        Server(str(sock), engine, "h", None, tmp_path / "auth").start()
    assert not sock.exists()
    dispose_all()
    args = ["--udb", str(engine.url), "--enforcer", "none", "--once", "--socket", str(sock)]
    r = CliRunner().invoke(shrdaemon, args)
    assert r.exit_code == 2, r.output
    said = r.stderr.strip().splitlines()[-1]  # after the log's start-up lines
    assert said.endswith(
        f": --socket {sock}: directory {shared}: writable by group or others "
        f"(mode {mode:04o}): others could swap the socket for their own or a link: refused "
        "(use a directory only root can write, e.g. /run/fairshare)"
    ), said
    assert "Traceback" not in r.stderr


def test_the_socket_is_made_0666_by_bind_and_never_chmod_ed_by_name(tmp_path, monkeypatch):
    """Guard: the socket was bound, then chmod-ed by its name, which follows whatever link
    was put there in between.  Its mode is now set as it is bound, whatever the umask."""
    engine = open_udb(f"sqlite:///{tmp_path / 'u.sqlite'}", create=True)

    def no_chmod(*args, **kw):
        raise AssertionError(f"chmod by name: {args}")

    monkeypatch.setattr("os.chmod", no_chmod)
    old = os.umask(0o077)
    try:
        srv = Server(str(tmp_path / "s.sock"), engine, "h", None, tmp_path / "auth")
        srv.start()
        assert os.umask(0o077) == 0o077  # put back as it was
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.lstat(tmp_path / "s.sock").st_mode) == 0o666
        assert _ask(srv.path, "hello")["ok"]
    finally:
        srv.stop()


def test_the_socket_limits_can_be_changed_for_tests_by_the_environment(tmp_path, monkeypatch):
    assert server_limits(None) == server_limits("") == Limits()
    got = server_limits("request_timeout=2, reply_timeout=0.5,max_per_uid=8")
    assert got == Limits(request_timeout=2.0, reply_timeout=0.5, max_per_uid=8)
    for bad, says in (
        ("x=1", "'x=1': expected NAME=VALUE, NAME one of max_request, request_timeout"),
        ("workers=2.5", "'workers=2.5': expected a positive number"),
        ("reply_timeout=-1", "'reply_timeout=-1': expected a positive number"),
        ("reply_timeout=nan", "'reply_timeout=nan': expected a positive number"),
        ("max_request=" + "9" * 400, "'max_request=9999.*': expected a positive number"),
    ):
        with pytest.raises(OptionError, match=f"^FAIRSHARE_SERVER_LIMITS: {says}"):
            server_limits(bad)
    url = f"sqlite:///{tmp_path / 'u.sqlite'}"
    with write_session(open_udb(url, create=True)) as ses:
        save_consts(ses, consts_from_mapping({"delta": 0.2}, load_consts(ses)))
    log = tmp_path / "log"
    args = ["--udb", url, "--enforcer", "none", "--once", "--log-file", str(log)]
    monkeypatch.setenv("FAIRSHARE_SERVER_LIMITS", "workers=x")
    r = CliRunner().invoke(shrdaemon, args)
    assert r.exit_code == 2
    assert "FAIRSHARE_SERVER_LIMITS: 'workers=x': expected a positive number" in r.output
    monkeypatch.setenv("FAIRSHARE_SERVER_LIMITS", "request_timeout=2,reply_timeout=3")
    r = CliRunner().invoke(shrdaemon, args)
    assert r.exit_code == 0, r.output
    said = [line for line in log.read_text().splitlines() if "FAIRSHARE_SERVER_LIMITS" in line]
    assert len(said) == 1 and "request_timeout=2.0, reply_timeout=3.0" in said[0]


def test_connections_are_held_at_once_and_per_uid_root_past_its_own_limit():
    held = Held(max_clients=3, max_per_uid=2)
    for uid in (1001, 1001, 0):
        assert held.refusal(uid) is None
        held.hold(uid)
    assert held.refusal(1002) == "3 clients already"
    held.release(0)
    assert held.refusal(1001) == "2 connections of this uid already"
    assert held.refusal(0) is None  # root is held to the total only
    held.hold(0)
    held.release(1001)
    assert held.refusal(1001) is None and held.per_uid == {1001: 1, 0: 1}
    held.release(1001)
    held.release(0)
    assert (held.count, held.per_uid) == (0, {})


def test_the_last_slots_are_kept_for_uids_holding_none():
    """Four uids of 64 filled all 256 slots before; now the fourth is held to one and
    any other user still gets in (tests/system/test_floods.py as real uids)."""
    held = Held(max_clients=256, max_per_uid=64, reserve=64)
    for uid in (1001, 1002, 1003, 1004):
        for _ in range(64):
            if held.refusal(uid) is None:
                held.hold(uid)
    assert held.per_uid == {1001: 64, 1002: 64, 1003: 64, 1004: 1}
    assert "kept for users holding none" in held.refusal(1004)
    for uid in range(2000, 2063):  # 63 more users, one connection each
        assert held.refusal(uid) is None
        held.hold(uid)
    assert held.refusal(3000) == "256 clients already"
    assert held.refusal(0) == "256 clients already"


def test_a_uids_work_under_way_and_unread_replies_are_bounded():
    held = Held(max_clients=256, max_per_uid=64, reserve=64, max_busy=2, max_unread=1000)
    held.work(1001, +1)
    held.work(1001, +1)
    assert held.busy_refusal(1001).startswith("busy: 2 requests of this uid being answered")
    assert held.busy_refusal(0) is None and held.busy_refusal(1002) is None
    held.work(1001, -1)
    assert held.busy_refusal(1001) is None
    assert held.unread_refusal(1001, 5000) is None  # the first reply is always given
    held.replies(1001, 5000)
    assert held.unread_refusal(1001, 1).startswith("busy: 5000 bytes of replies to this uid")
    assert held.unread_refusal(0, 10**9) is None
    assert "5000 bytes of replies to this uid not taken yet" in held.busy_refusal(1001)
    held.replies(1001, -5000)
    held.work(1001, -1)
    assert (held.busy, held.unread) == ({}, {})


def test_new_connections_are_paced_per_uid_and_root_is_not():
    from fairshare.server.clients import Pace

    pace = Pace(rate=10, burst=5)
    assert [pace.allow(1001, 100.0) for _ in range(6)] == [True] * 5 + [False]
    assert pace.allow(1002, 100.0)  # another uid has a bucket of its own
    assert all(pace.allow(0, 100.0) for _ in range(100))
    assert not pace.allow(1001, 100.05)  # half a token
    assert pace.allow(1001, 100.2) and pace.allow(1001, 100.2) and not pace.allow(1001, 100.2)


def test_the_log_takes_a_few_lines_per_uid_then_says_how_many_it_left_out():
    import logging
    import time

    from fairshare.server.clients import PeerLog

    said: list[str] = []
    logger = logging.Logger("peerlog-test")
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logger.addHandler(handler)
    plog = PeerLog(logger, burst=3, interval=0.2)
    for i in range(1000):
        plog.warning(1001, "uid 1001: refused %d", i)
    plog.warning(1002, "uid 1002: refused")
    time.sleep(0.25)
    plog.flush()
    assert said == [
        "uid 1001: refused 0",
        "uid 1001: refused 1",
        "uid 1001: refused 2",
        "uid 1002: refused",
        "uid 1001: 997 more lines about its clients not logged in 0.2 s",
    ]


def test_a_value_error_in_a_handler_is_a_malformed_request_not_json(tmp_path):
    """A lone surrogate in "host" fails in the database driver (UnicodeEncodeError):
    it was reported as "not JSON"."""
    url = f"sqlite:///{tmp_path / 'u.sqlite'}"
    open_udb(url, create=True)
    d = tmp_path / "run"
    d.mkdir(mode=0o755)
    srv = Server(str(d / "s.sock"), open_udb(url), "h", None, tmp_path / "auth")
    srv.start()
    try:
        s = _connect(srv.path)
        s.sendall(b'{"v": 1, "request": "cycle", "host": "\\ud800"}\n')
        reply = json.loads(s.makefile("rb").readline())
        s.close()
    finally:
        srv.stop()
    assert not reply["ok"]
    assert reply["error"].startswith("malformed request: cycle: 'utf-8' codec can't encode")
