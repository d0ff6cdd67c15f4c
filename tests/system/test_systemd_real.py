"""The systemd enforcer and the shipped unit file against a real systemd 252.

Each test boots this machine's systemd in namespaces of its own (tests/realsystemd.py,
about 1 to 4 s) and drives it over its private socket; test_systemd.py covers the same
enforcer against a D-Bus double.  systemd runs in legacy mode there (cgroup v1), as on
this host: CPUWeight= becomes ``cpu.shares`` (weight * 1024 / 100).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from conftest import ACME, ROOT, load
from realsystemd import CGROUP, HIERARCHIES, RealSystemd

from fairshare.enforce.actions import REAL_OS
from fairshare.enforce.base import LnodeTarget
from fairshare.enforce.systemd import CPU_WEIGHT_DEFAULT, SystemdEnforcer

UNIT = ROOT / "examples" / "systemd" / "shrdaemon.service"

pytestmark = pytest.mark.requires("real-systemd")


@pytest.fixture
def systemd(tmp_path):
    """A real systemd, booted for the test and killed after it (with every cgroup it
    made); the module skips, saying why, where none can boot (requires "real-systemd")."""
    work = tmp_path / "sd"
    work.mkdir()
    units = ("init.scope", "user.slice", "system.slice")
    host_v2 = [u for u in units if (CGROUP / "unified" / u).exists()]
    with RealSystemd(work) as sd:
        yield sd
    # Everything it made is gone, and it made no unit in the host's cgroup v2 root.
    assert not [h for h in HIERARCHIES if sd.cgroup(h).exists()]
    assert [u for u in units if (CGROUP / "unified" / u).exists()] == host_v2


def shares(sd: RealSystemd, path: str) -> int | None:
    """cpu.shares of the namespace's cgroup `path`; None when systemd has none there."""
    try:
        return int(sd.cgroup("cpu", path).joinpath("cpu.shares").read_text())
    except FileNotFoundError:
        return None


def to_shares(weight: int) -> int:
    """systemd's CPUWeight= -> cpu.shares on cgroup v1 (cgroup_cpu_weight_to_shares)."""
    return min(max(weight * 1024 // 100, 2), 262144)


def sessions(sd: RealSystemd) -> dict[str, list[int]]:
    """Sleepers in session-3.scope (uid 1000, two), session-5.scope (uid 1000) and
    session-4.scope (uid 1001), as logind would place them: their host pids by scope."""
    out: dict[str, list[int]] = {}
    for scope, user, n in (("session-3", 1000, 2), ("session-5", 1000, 1), ("session-4", 1001, 1)):
        pids = [sd.spawn() for _ in range(n)]
        sd.start_scope(f"{scope}.scope", f"user-{user}.slice", [inner for inner, _ in pids])
        out[scope] = [host for _, host in pids]
    return out


def cgroups(pids) -> dict[int, str]:
    """The unit each process is in (its name=systemd cgroup: systemd itself moves them
    in the cpu hierarchy when a slice gets or loses a CPU setting)."""
    out = {}
    for p in pids:
        text = Path(f"/proc/{p}/cgroup").read_text()
        out[p] = next(line for line in text.splitlines() if ":name=systemd:" in line)
    return out


def test_private_socket_answers_every_first_call(systemd):
    """systemd 252 leaves unread a message that came in the same read as BEGIN: without
    SystemdBus's Ping first, most first calls on a new connection time out."""
    answered = 0
    for _ in range(10):
        bus = systemd.bus(timeout=2)
        try:
            answered += bus.version().startswith("252")
        except TimeoutError:
            pass
        finally:
            bus.close()
    assert answered == 10


def test_enforcer_weighs_user_slices_and_teardown_restores_them(systemd):
    """The enforcer's SetUnitProperties calls are accepted, the weights reach cpu.shares,
    background gets CPUWeight=idle, no process moves, and teardown leaves every slice
    and scope as it was."""
    sd = systemd
    s = sessions(sd)
    a = LnodeTarget("alice", (*s["session-3"], *s["session-5"]), e_share=0.6, nrun=3)
    b = LnodeTarget("bob", tuple(s["session-4"]), e_share=0.2, nrun=1)
    before = cgroups([*a.pids, *b.pids])
    slices = ("user.slice/user-1000.slice", "user.slice/user-1001.slice")
    assert [shares(sd, p) for p in slices] == [None, None]  # systemd set nothing yet
    enf = SystemdEnforcer(Path("/sys/fs/cgroup/cpu"), REAL_OS, connect=sd.bus)
    enf.setup()
    assert enf.idle  # systemd 252 takes CPUWeight=idle
    try:
        enf.apply([a, b])
        assert sd.prop("user-1000.slice", "Slice", "CPUWeight") == 10000
        assert sd.prop("user-1001.slice", "Slice", "CPUWeight") == 3333
        assert [shares(sd, p) for p in slices] == [to_shares(10000), to_shares(3333)]
        enf.apply([a, LnodeTarget("bob", b.pids, e_share=0.2, nrun=1, background=True)])
        assert sd.prop("user-1001.slice", "Slice", "CPUWeight") == 0  # idle
        assert shares(sd, slices[1]) == 2  # the kernel's least
        assert cgroups([*a.pids, *b.pids]) == before  # nothing moved
    finally:
        enf.teardown()
    for unit in ("user-1000.slice", "user-1001.slice"):
        assert sd.prop(unit, "Slice", "CPUWeight") == CPU_WEIGHT_DEFAULT
    # No CPU setting left: systemd drops the slices' cpu cgroups again, as before.
    assert [shares(sd, p) for p in slices] == [None, None]
    for scope in ("session-3.scope", "session-4.scope", "session-5.scope"):
        assert sd.state(scope) == "active"
    assert cgroups([*a.pids, *b.pids]) == before


def test_enforcer_weighs_session_scopes_by_account(systemd):
    sd = systemd
    s = sessions(sd)
    targets = [
        LnodeTarget("acct-a", tuple(s["session-3"]), e_share=0.5, nrun=2),
        LnodeTarget("acct-b", (*s["session-5"], *s["session-4"]), e_share=0.25, nrun=2),
    ]
    enf = SystemdEnforcer(Path("/sys/fs/cgroup/cpu"), REAL_OS, by_account=True, connect=sd.bus)
    enf.setup()
    try:
        enf.apply(targets)
        want = {"session-3": 10000, "session-5": 5000, "session-4": 5000}
        for scope, w in want.items():
            assert sd.prop(f"{scope}.scope", "Scope", "CPUWeight") == w
            user = 1001 if scope == "session-4" else 1000
            assert shares(sd, f"user.slice/user-{user}.slice/{scope}.scope") == to_shares(w)
        assert sd.prop("user-1000.slice", "Slice", "CPUWeight") == CPU_WEIGHT_DEFAULT
    finally:
        enf.teardown()
    for scope in ("session-3", "session-4", "session-5"):
        assert sd.prop(f"{scope}.scope", "Scope", "CPUWeight") == CPU_WEIGHT_DEFAULT
        assert sd.state(f"{scope}.scope") == "active"


def test_systemd_refusing_a_unit_is_one_log_line(systemd):
    """A process in a session scope systemd does not know (its cgroup made by hand):
    systemd answers NoSuchUnit; the enforcer logs it once, weighs the other scope, and
    goes on."""
    sd = systemd
    s = sessions(sd)
    stray = sd.cgroup("systemd", "user.slice/user-1002.slice/session-9.scope")
    stray.mkdir(parents=True)
    _inner, pid = sd.spawn()
    (stray / "cgroup.procs").write_text(str(pid))
    targets = [
        LnodeTarget("a", tuple(s["session-3"]), e_share=0.5, nrun=2),
        LnodeTarget("ghost", (pid,), e_share=0.5, nrun=1),
    ]
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger("shrdaemon").addHandler(handler)
    enf = SystemdEnforcer(Path("/sys/fs/cgroup/cpu"), REAL_OS, by_account=True, connect=sd.bus)
    enf.setup()
    try:
        enf.apply(targets)
        enf.apply(targets)
    finally:
        enf.teardown()
        logging.getLogger("shrdaemon").removeHandler(handler)
        os.kill(pid, signal.SIGKILL)
    lines = [r.getMessage() for r in records]
    assert len(lines) == 1, lines
    assert "session-9.scope" in lines[0] and "NoSuchUnit" in lines[0]
    assert sd.prop("session-3.scope", "Scope", "CPUWeight") == CPU_WEIGHT_DEFAULT  # torn down
    assert sd.state("session-3.scope") == "active"


# -- the shipped unit file ------------------------------------------------------------------


def shipped_unit(tmp_path: Path, args: str = "") -> tuple[Path, dict[str, str]]:
    """A work directory holding the ACME UDB, and the units: the shipped unit file as it
    is, with a drop-in that only points ExecStartPre and ExecStart at this tree (with
    `args` added, and -R1: a 1 s cycle) and shortens the times (WatchdogSec=4)."""
    work = tmp_path / "sd"
    work.mkdir()
    load(f"sqlite:///{work / 'udb.sqlite'}", ACME)
    text = UNIT.read_text()
    python = f"{sys.executable} -m fairshare.cli."
    pre = re.search(r"^ExecStartPre=-?/usr/local/bin/(.*)$", text, re.M).group(1)
    start = re.search(r"^ExecStart=/usr/local/bin/(.*)$", text, re.M).group(1)
    dropin = "\n".join(
        [
            "[Service]",
            f"Environment=UDB_URL=sqlite:////run/host/udb.sqlite PYTHONPATH={ROOT}",
            "ExecStartPre=",
            f"ExecStartPre={python}{pre} -R1",
            "ExecStart=",
            f"ExecStart={python}{start} {args}",
            "WatchdogSec=4",
            "TimeoutStopSec=5",
            "RestartSec=200ms",
            "StandardOutput=append:/run/host/daemon.log",
            "",
        ]
    )
    return work, {"shrdaemon.service": text, "shrdaemon.service.d/test.conf": dropin}


def start_daemon(sd: RealSystemd) -> None:
    """Start shrdaemon.service; Type=notify: "activating" until READY=1, then active."""
    sd.manager("StartUnit", "ss", ("shrdaemon.service", "replace"))
    assert sd.state("shrdaemon.service") == "activating"
    state = sd.wait_state("shrdaemon.service", {"active", "failed", "inactive"}, 25)
    log = sd.work / "daemon.log"
    assert state == "active", (state, log.read_text() if log.exists() else "", sd.log())


def stop_daemon(sd: RealSystemd) -> None:
    """A stop: SIGTERM, STOPPING=1, every lnode written back, exit 0."""
    sd.manager("StopUnit", "ss", ("shrdaemon.service", "replace"))
    assert sd.wait_state("shrdaemon.service", {"inactive", "failed"}, 15) == "inactive"
    assert sd.prop("shrdaemon.service", "Service", "Result") == "success"


def test_shipped_unit_notify_readiness_and_watchdog(tmp_path):
    """examples/systemd/shrdaemon.service under a real systemd: Type=notify makes it
    active only once the daemon said READY=1; its WATCHDOG=1 after every cycle keeps it
    alive; a hung daemon (SIGSTOP) is killed by the watchdog and restarted; a stop
    ends it cleanly."""
    work, units = shipped_unit(tmp_path)
    with RealSystemd(work, units) as sd:
        start_daemon(sd)
        assert sd.prop("shrdaemon.service", "Service", "StatusText").startswith("running")
        pid = sd.prop("shrdaemon.service", "Service", "MainPID")
        # WATCHDOG=1 after every cycle: the last keep-alive moves on.
        first = sd.prop("shrdaemon.service", "Service", "WatchdogTimestampMonotonic")
        deadline = time.monotonic() + 10
        while sd.prop("shrdaemon.service", "Service", "WatchdogTimestampMonotonic") == first:
            assert time.monotonic() < deadline, sd.log()
            time.sleep(0.2)
        assert sd.prop("shrdaemon.service", "Service", "StatusText").startswith("cycle")
        # Hung: no more WATCHDOG=1.  systemd aborts it and starts it again.
        os.kill(sd.host_pid(pid), signal.SIGSTOP)
        deadline = time.monotonic() + 25
        while sd.prop("shrdaemon.service", "Service", "NRestarts") < 1:
            assert time.monotonic() < deadline, sd.log()
            time.sleep(0.2)
        assert "Watchdog timeout" in sd.log()
        assert sd.wait_state("shrdaemon.service", {"active", "failed"}, 25) == "active"
        assert sd.prop("shrdaemon.service", "Service", "MainPID") not in (0, pid)
        stop_daemon(sd)


def test_shipped_unit_daemon_weighs_user_slices_through_systemd(tmp_path):
    """The daemon the shipped unit starts, with --enforcer systemd, weighs the slices of
    two users' sessions through the real systemd (over its private socket, no D-Bus
    daemon), and its stop gives them back systemd's default weight."""
    work, units = shipped_unit(tmp_path, "--enforcer systemd")
    with RealSystemd(work, units) as sd:
        for scope, uid in (("session-3", 1001), ("session-4", 1002)):
            inner, _host = sd.spawn(
                f"exec setpriv --reuid={uid} --regid=10 --clear-groups sleep 600"
            )
            sd.start_scope(f"{scope}.scope", f"user-{uid}.slice", [inner])
        start_daemon(sd)
        slices = ("user-1001.slice", "user-1002.slice")
        deadline = time.monotonic() + 15
        while CPU_WEIGHT_DEFAULT in [sd.prop(u, "Slice", "CPUWeight") for u in slices]:
            assert time.monotonic() < deadline, ((work / "daemon.log").read_text(), sd.log())
            time.sleep(0.2)
        log = (work / "daemon.log").read_text()
        assert "--enforcer systemd: systemd is PID 1 in legacy mode" in log
        assert "refused" not in log and "did not answer" not in log
        for u in slices:
            w = sd.prop(u, "Slice", "CPUWeight")
            assert 1 <= w <= 10000
            assert shares(sd, f"user.slice/{u}") == to_shares(w)
        stop_daemon(sd)
        assert [sd.prop(u, "Slice", "CPUWeight") for u in slices] == [CPU_WEIGHT_DEFAULT] * 2
