"""The systemd enforcer against a private dbus-daemon with a fake org.freedesktop.systemd1.

The fake answers Properties.Get(Version) and SetUnitProperties, records every call
with its arguments, and refuses units it is told to (NoSuchUnit), as systemd does.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from pathlib import Path

import pytest
from jeepney import new_error, new_method_return
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection
from jeepney.low_level import HeaderFields, MessageType

from fairshare.enforce.actions import REAL_OS
from fairshare.enforce.base import LnodeTarget
from fairshare.enforce.systemd import (
    CPU_WEIGHT_DEFAULT,
    CPU_WEIGHT_IDLE,
    SystemdBus,
    SystemdEnforcer,
    parse_usage,
    systemd_version,
    unit_cgroup,
)
from udb.errors import OptionError

pytestmark = pytest.mark.requires("dbus")


class FakeSystemd:
    """org.freedesktop.systemd1 on the bus at `address`, served from a thread."""

    def __init__(self, address: str, version: str) -> None:
        self.version = version
        self.calls: list[tuple] = []
        self.refuse: set[str] = set()
        self.conn = open_dbus_connection(address)
        reply = self.conn.send_and_get_reply(message_bus.RequestName("org.freedesktop.systemd1"))
        assert reply.body == (1,)  # primary owner
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                msg = self.conn.receive(timeout=0.2)
            except TimeoutError:
                continue
            except OSError:
                return
            if msg.header.message_type != MessageType.method_call:
                continue
            member = msg.header.fields.get(HeaderFields.member)
            if member == "Get" and msg.body == ("org.freedesktop.systemd1.Manager", "Version"):
                self.conn.send(new_method_return(msg, "v", (("s", self.version),)))
            elif member == "SetUnitProperties":
                unit, runtime, props = msg.body
                self.calls.append((unit, runtime, props))
                if unit in self.refuse:
                    err = new_error(
                        msg,
                        "org.freedesktop.systemd1.NoSuchUnit",
                        "s",
                        (f"Unit {unit} not loaded.",),
                    )
                    self.conn.send(err)
                else:
                    self.conn.send(new_method_return(msg))
            else:
                self.conn.send(new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod"))

    def close(self) -> None:
        self.stopping = True
        self.thread.join(2)
        self.conn.close()


@pytest.fixture
def bus(tmp_path):
    """A private message bus; yields its address."""
    sock = tmp_path / "bus"
    daemon = subprocess.Popen(
        [
            "dbus-daemon",
            "--session",
            "--nofork",
            "--nopidfile",
            f"--address=unix:path={sock}",
            "--print-address",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        address = daemon.stdout.readline().strip()
        assert address, "dbus-daemon did not start"
        yield address
    finally:
        daemon.terminate()
        daemon.wait(5)


def fake_machine(tmp_path: Path) -> tuple[str, Path]:
    """A fake /proc and cgroup v2 mount: uid 1000 in session 3 (pids 11, 12) and
    session 5 (pid 13), uid 1001 in session 4 (pid 21), a system service (pid 31)."""
    where = {
        11: "/user.slice/user-1000.slice/session-3.scope",
        12: "/user.slice/user-1000.slice/session-3.scope",
        13: "/user.slice/user-1000.slice/session-5.scope",
        21: "/user.slice/user-1001.slice/session-4.scope",
        31: "/system.slice/cron.service",
    }
    proc = tmp_path / "proc"
    mount = tmp_path / "cg"
    for pid, cg in where.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::{cg}\n")
        (mount / cg.lstrip("/")).mkdir(parents=True, exist_ok=True)
        procs = mount / cg.lstrip("/") / "cgroup.procs"
        procs.write_text((procs.read_text() if procs.exists() else "") + f"{pid}\n")
    # A process of uid 1000 the daemon has not seen yet (its user manager).
    (mount / "user.slice/user-1000.slice/user@1000.service").mkdir()
    (mount / "user.slice/user-1000.slice/user@1000.service/cgroup.procs").write_text("14\n")
    stat = "usage_usec {}\nuser_usec 1\nsystem_usec 1\n"
    (mount / "user.slice/user-1000.slice/cpu.stat").write_text(stat.format(2_500_000))
    (mount / "user.slice/user-1001.slice/cpu.stat").write_text(stat.format(750_000))
    (mount / "user.slice/user-1000.slice/session-3.scope/cpu.stat").write_text(stat.format(10))
    return str(proc), mount


def targets(bg_b: bool = False) -> list[LnodeTarget]:
    return [
        LnodeTarget("a", (11, 12, 13), e_share=0.6, nrun=3),
        LnodeTarget("b", (21,), e_share=0.2, nrun=1, background=bg_b),
        LnodeTarget("root", (31,), e_share=0.2, nrun=1),  # a system service: never weighed
    ]


def test_pure_helpers():
    line = "0::/user.slice/user-1000.slice/session-3.scope\n"
    assert unit_cgroup(line, False) == "/user.slice/user-1000.slice"
    assert unit_cgroup(line, True) == "/user.slice/user-1000.slice/session-3.scope"
    assert unit_cgroup("0::/system.slice/cron.service\n", False) is None
    assert unit_cgroup("12:cpu:/x\n", False) is None  # cgroup v1 only
    # systemd in legacy mode: its tree is the name=systemd hierarchy, the 0:: line is /.
    legacy = "9:name=systemd:/user.slice/user-1000.slice/session-3.scope\n1:cpu:/\n0::/\n"
    assert unit_cgroup(legacy, False) == "/user.slice/user-1000.slice"
    assert unit_cgroup(legacy, True) == "/user.slice/user-1000.slice/session-3.scope"
    assert parse_usage("usage_usec 1500000\nuser_usec 3\n") == 1.5
    with pytest.raises(ValueError):
        parse_usage("user_usec 3\n")
    assert systemd_version("255.4-1ubuntu8") == 255 and systemd_version("v249") == 249


def test_user_slices_weighed_at_runtime_never_moving_processes(bus, tmp_path):
    proc, mount = fake_machine(tmp_path)
    fake = FakeSystemd(bus, "255.4-1")
    before = {p: (Path(proc) / p / "cgroup").read_text() for p in ("11", "21", "31")}
    try:
        enf = SystemdEnforcer(mount, REAL_OS, proc=proc, connect=lambda: SystemdBus(bus))
        enf.setup()
        assert enf.idle
        enf.apply(targets())
        # cgroup2_weights: the largest e_share gets 10000, 0.2/0.6 of it 3333.
        assert sorted(fake.calls) == [
            ("user-1000.slice", True, [("CPUWeight", ("t", 10000))]),
            ("user-1001.slice", True, [("CPUWeight", ("t", 3333))]),
        ]
        fake.calls.clear()
        enf.apply(targets())  # unchanged weights: no calls
        assert fake.calls == []
        enf.apply(targets(bg_b=True))  # b past MAXUSAGE: CPUWeight=idle
        assert fake.calls == [("user-1001.slice", True, [("CPUWeight", ("t", CPU_WEIGHT_IDLE))])]
        groups = enf.read_groups()
        # The slice's counter and every process in it, also one no sample has seen.
        assert groups["a"].cpu == 2.5 and groups["a"].pids == {11, 12, 13, 14}
        assert groups["b"].cpu == 0.75 and "root" not in groups
        assert enf.read_groups(members=False)["a"].pids == frozenset()
        fake.calls.clear()
        enf.apply(targets()[:1])  # b gone: its slice goes back to systemd's default
        assert fake.calls == [("user-1001.slice", True, [("CPUWeight", ("t", CPU_WEIGHT_DEFAULT))])]
        fake.calls.clear()
        enf.teardown()
        assert fake.calls == [("user-1000.slice", True, [("CPUWeight", ("t", CPU_WEIGHT_DEFAULT))])]
    finally:
        fake.close()
    assert before == {p: (Path(proc) / p / "cgroup").read_text() for p in ("11", "21", "31")}


def test_session_scopes_by_account_and_no_idle_before_252(bus, tmp_path):
    proc, mount = fake_machine(tmp_path)
    fake = FakeSystemd(bus, "249")
    try:
        enf = SystemdEnforcer(
            mount, REAL_OS, by_account=True, proc=proc, connect=lambda: SystemdBus(bus)
        )
        enf.setup()
        assert not enf.idle
        enf.apply(targets(bg_b=True))
        assert sorted(fake.calls) == [
            ("session-3.scope", True, [("CPUWeight", ("t", 10000))]),
            ("session-4.scope", True, [("CPUWeight", ("t", 1))]),  # background, no idle
            ("session-5.scope", True, [("CPUWeight", ("t", 10000))]),
        ]
        # a's counter: session-3.scope's (10 us); session-5.scope has no cpu.stat here,
        # so a reads as unknown rather than half counted.
        assert "a" not in enf.read_groups()
        stat = mount / "user.slice/user-1000.slice/session-5.scope/cpu.stat"
        stat.write_text("usage_usec 30\n")
        reading = enf.read_groups()["a"]
        assert reading.cpu == 40 / 1e6 and reading.pids == {11, 12, 13}
        enf.teardown()
    finally:
        fake.close()


def test_systemd_refusing_is_logged_once_and_retried(bus, tmp_path):
    proc, mount = fake_machine(tmp_path)
    fake = FakeSystemd(bus, "255")
    fake.refuse.add("user-1001.slice")
    try:
        enf = SystemdEnforcer(mount, REAL_OS, proc=proc, connect=lambda: SystemdBus(bus))
        enf.setup()
        # A handler on the daemon's logger itself: shrdaemon's setup (run by other
        # tests in this process) stops it propagating to pytest's capture.
        records: list[logging.LogRecord] = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = records.append
        logging.getLogger("shrdaemon").addHandler(handler)
        try:
            enf.apply(targets())
            enf.apply(targets())
        finally:
            logging.getLogger("shrdaemon").removeHandler(handler)
        refused = [r for r in records if "refused" in r.getMessage()]
        assert len(refused) == 1
        assert "user-1001.slice" in refused[0].getMessage()
        assert "NoSuchUnit" in refused[0].getMessage()
        # Tried again at the next apply; the other slice was set once and kept.
        assert [c[0] for c in fake.calls].count("user-1001.slice") == 2
        assert [c[0] for c in fake.calls].count("user-1000.slice") == 1
        fake.refuse.clear()
        enf.apply(targets())
        assert fake.calls[-1] == ("user-1001.slice", True, [("CPUWeight", ("t", 3333))])
        enf.teardown()
    finally:
        fake.close()


def test_no_systemd_on_the_bus_is_one_line_error(bus, tmp_path):
    proc, mount = fake_machine(tmp_path)
    enf = SystemdEnforcer(mount, REAL_OS, proc=proc, connect=lambda: SystemdBus(bus, timeout=2))
    with pytest.raises(OptionError, match="cannot reach systemd over D-Bus"):
        enf.setup()
    enf = SystemdEnforcer(
        mount, REAL_OS, proc=proc, connect=lambda: SystemdBus(f"unix:path={tmp_path}/x")
    )
    with pytest.raises(OptionError, match="cannot reach systemd over D-Bus"):
        enf.setup()


def test_the_daemon_applies_the_udb_nice_beside_systemd(bus, tmp_path, udb_url):
    """As beside the cgroup enforcers (man/shrdaemon.8, THE UDB NICE): alice's entry says
    nice 4, so her processes at the default nice get 4 while their slice is weighed; bob
    (no UDB nice) is left alone; the daemon's stop puts back what it set."""
    from busy import RecordedOs
    from integration.test_daemon import EPOCH, Script, proc

    from fairshare.daemon.daemon import Daemon, Options
    from fairshare.sim.machine import SimClock
    from fairshare.store.published import LnodeStore
    from udb.models import Entry
    from udb.session import open_udb, write_session

    engine = open_udb(udb_url)
    with write_session(engine) as s:
        s.add_all(
            [Entry(name="alice", uid=1000, shares=1, nice=4), Entry(name="bob", uid=1001, shares=1)]
        )
    proc_dir, mount = fake_machine(tmp_path)
    fake = FakeSystemd(bus, "255")
    clock = SimClock(EPOCH)
    actions = RecordedOs({12: 9})  # pid 12 was started at nice 9: it keeps it
    plan = [proc(11, 1000, 1.0), proc(12, 1000, 1.0, nice=9), proc(21, 1001, 1.0)]
    enf = SystemdEnforcer(mount, actions=actions, proc=proc_dir, connect=lambda: SystemdBus(bus))
    d = Daemon(
        engine,
        Script(clock, lambda i: plan),
        enf,
        LnodeStore(engine, host="test"),
        actions,
        clock=clock,
        options=Options(enforce_min_uid=1000),
    )
    try:
        d.start()
        for _ in range(2):
            clock.sleep(d.consts.delta, d.loop.wake)
            d.step()
        assert actions.nice == {11: 4, 12: 9}
        assert {c[0] for c in fake.calls} == {"user-1000.slice", "user-1001.slice"}
        d.shutdown()
        assert actions.nice == {11: 0, 12: 9}
    finally:
        fake.close()
