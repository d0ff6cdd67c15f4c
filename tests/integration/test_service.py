"""Running under systemd: sd_notify over $NOTIFY_SOCKET (a real datagram socket here)
and log lines journald keeps structured."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fairshare.daemon.service import JournalFormatter, Notifier, log_formatter, under_journal

ROOT_DIR = Path(__file__).resolve().parents[2]
SCENARIO = ROOT_DIR / "examples" / "scenarios" / "02_shares_2_to_1.toml"


@pytest.fixture
def notify_socket(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    s.bind(path)
    s.settimeout(10)
    yield s, path
    s.close()


def messages(sock) -> list[str]:
    out = []
    sock.settimeout(0.5)
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            return out


def test_notifier_without_a_socket_does_nothing():
    n = Notifier({})
    assert n.notify("READY=1") is False and n.watchdog is None


def test_notifier_abstract_address_and_watchdog_for_this_pid_only():
    n = Notifier({"NOTIFY_SOCKET": "@fairshare-test", "WATCHDOG_USEC": "30000000"})
    assert n.address == "\0fairshare-test" and n.watchdog == 30.0
    other = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}
    assert Notifier(other).watchdog is None
    assert Notifier({"NOTIFY_SOCKET": "/nonexistent/socket"}).notify("READY=1") is False


def test_daemon_says_ready_watchdog_and_stopping(notify_socket, udb_url):
    sock, path = notify_socket
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="8000000", UDB_URL=udb_url)
    r = subprocess.run(
        [sys.executable, "-m", "fairshare.cli.shrdaemon", "--simulate", str(SCENARIO)]
        + ["--cycles", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    got = messages(sock)
    assert got[0].splitlines()[0] == "READY=1"
    assert "STATUS=running, enforcer sim" in got[0]
    cycles = got[1:4]
    assert all(m.startswith("WATCHDOG=1\nSTATUS=cycle ") for m in cycles)
    assert [m.split("\n")[1].split(":")[0] for m in cycles] == [
        "STATUS=cycle 1",
        "STATUS=cycle 2",
        "STATUS=cycle 3",
    ]
    assert got[4].startswith("STOPPING=1") and len(got) == 5


def test_journal_stream_gets_priority_prefixes(tmp_path):
    f = tmp_path / "stderr"
    with open(f, "w") as out:
        st = os.fstat(out.fileno())
        env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert under_journal(env, out.fileno())
        assert not under_journal({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"}, out.fileno())
        assert not under_journal({}, out.fileno()) and not under_journal(env, None)
        assert isinstance(log_formatter(env, out.fileno()), JournalFormatter)
    fmt = JournalFormatter("%(message)s")

    def line(level, msg):
        return fmt.format(logging.LogRecord("shrdaemon", level, __file__, 1, msg, (), None))

    assert line(logging.WARNING, "systemd refused") == "<4>systemd refused"
    assert line(logging.ERROR, "lost\nthe database") == "<3>lost\n<3>the database"
    assert line(logging.INFO, "enforcer none") == "<6>enforcer none"
    assert line(logging.DEBUG, "checkpointed") == "<7>checkpointed"


def test_daemon_under_journald_logs_with_priorities(tmp_path, udb_url):
    log = tmp_path / "journal"
    with open(log, "w") as err:
        st = os.fstat(err.fileno())
        env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}", UDB_URL=udb_url)
        r = subprocess.run(
            [sys.executable, "-m", "fairshare.cli.shrdaemon", "--simulate", str(SCENARIO)]
            + ["--cycles", "1"],
            env=env,
            stderr=err,
            timeout=120,
        )
    assert r.returncode == 0
    lines = log.read_text().splitlines()
    assert lines and all(ln[:3] in ("<6>", "<4>") for ln in lines), lines
    assert lines[0].startswith("<6>loaded the scenario's UDB")
    assert any(ln.startswith("<6>enforcer sim") for ln in lines)
    # The warning that this UDB has no 'unknown' entry is a warning to journald.
    assert [ln for ln in lines if "'unknown' entry" in ln][0].startswith("<4>")


@pytest.mark.requires("systemd-analyze")
def test_example_unit_is_a_valid_notify_service_with_watchdog(tmp_path):
    text = (ROOT_DIR / "examples" / "systemd" / "shrdaemon.service").read_text()
    keys = dict(
        ln.split("=", 1) for ln in text.splitlines() if "=" in ln and not ln.startswith("#")
    )
    assert keys["Type"] == "notify" and int(keys["WatchdogSec"]) > 4
    assert keys["RuntimeDirectory"] == "fairshare"
    # systemd's own parser: every key known, every value well-formed (the binaries are
    # pointed at /bin/true, which exists everywhere).
    unit = tmp_path / "shrdaemon.service"
    unit.write_text(
        text.replace("/usr/local/bin/shrdaemon", "/bin/true").replace(
            "/usr/local/bin/shradmin", "/bin/true"
        )
    )
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
