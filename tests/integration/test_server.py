"""shrdaemon's socket server in this process: a stale socket replaced, never a file; no
socket at all with --socket ''.  The server as every uid meets it, hostile clients
included: tests/system/test_access.py."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from click.testing import CliRunner

from fairshare.cli.shrdaemon import main as shrdaemon
from fairshare.core.consts import consts_from_mapping
from fairshare.server.server import Server
from fairshare.store.config import load_consts, save_consts
from udb.errors import UdbError
from udb.remote import connect
from udb.session import open_udb, write_session


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
